// The decode GEMV of one activation row held in registers for the formats with a lane codec
// (cuda_gemv_xreg_lanes.cuh: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q2_K), in the form of the Q8_0
// kernel (cuda_gemv_q8_xreg.cu) and of the MoE register kernels: the pipelined GEMV (cuda_gemv.cu) has every
// warp read the whole input's digits (112 bytes per 32 values) through L1, more than the 8 to 14 weight bytes
// of these formats per 32 values, and the float codecs of the IQ1 formats spend a conversion per weight.
//
// A block of K / (512 H) warps covers the input, lane l of warp w owning values [512 H w + 16 H l, + 16 H), which it
// quantizes itself to digits (cuda_gemv_digits.cuh) and keeps in registers. Each block takes a contiguous run of
// rows of one job (a batch's jobs share K and the format); each warp copies its slice of the next 4 rows (2 H
// blocks of 256 values, from whatever offset in a 16-byte word the slice starts at) into its cp.async ring, its
// lanes multiply their weights by their digits (LaneCodec::dot), a butterfly leaves each row's warp sum on 8 lanes,
// and every 32 rows the warps' sums are added in warp order in shared memory and stored. The grid is one wave.
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_gemv_xreg.cuh"
#include "kernels/cuda/cuda_gemv_xreg_lanes.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;
using namespace xreg;

constexpr int kMaxJobs = kGemvMaxJobs;
constexpr int kStages = 6;  // ring depth: a stage is 4 x 2 H blocks per warp (66 to 110 bytes each)

template <GgmlType T, int H>
using Geom = LaneGeom<T, H, kStages>;

struct Job {
    const uint8_t* w;
    size_t row_bytes;
    int64_t M;
    const float* x;
    float* y;
    int64_t block0;  // the job's first block
};
struct Batch {
    Job job[kMaxJobs];
    int count;
    int64_t rows_per_block;  // a multiple of kRows
};

// Launch bounds as the MoE gate/up kernel's: H = 2 blocks have at most 16 warps (K <= 16384).
template <GgmlType T, int H>
__global__ void __launch_bounds__(kMaxWarps* kWarp / H, 1)
    gemv_lane_xreg_kernel(const __grid_constant__ Batch b, QuantTables tb) {
    using G = Geom<T, H>;
    extern __shared__ uint4 smem[];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);  // every thread, before any exit
    const int n_warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const BlockRows br = block_rows(b);
    const Job& J = b.job[br.job];
    const int64_t r0 = br.r0;
    const int rows = br.rows;
    const int n_stages = (rows + kRows - 1) / kRows;
    uint4* ring = smem + (size_t)warp * kStages * kRows * G::kSlotWords;
    float* sums = reinterpret_cast<float*>(smem + (size_t)n_warps * kStages * kRows * G::kSlotWords);

    // Row i of the block: r0 + i, clamped into the matrix (rows past the block's last are read, not used).
    const uint8_t* slice = J.w + (size_t)warp * G::kSliceBytes;
    auto row = [&](int i) {
        const int64_t r = r0 + i < J.M ? r0 + i : J.M - 1;
        return slice + (size_t)r * J.row_bytes;
    };
    auto issue = [&](int s) { issue_covering<kStages, G::kSlotWords>(ring, s, G::kSliceBytes, row, lane); };
    ring_start<kStages>(n_stages, issue);
    pdl_begin();  // the weights are on their way; now wait for the kernel that wrote x

    auto row_sh = [&](int i) { return (uint32_t)(reinterpret_cast<uintptr_t>(row(i)) & 15); };
    const float* x = J.x + (int64_t)warp * G::kSliceValues;
    auto flush = [&](const float* buf, int row0) {
        const int r = row0 + lane;
        if (r < rows) {
            float t = buf[lane];
            for (int w = 1; w < n_warps; ++w) t += buf[w * kChunk + lane];
            J.y[r0 + r] = t;
        }
    };
    lane_stages<T, H, 3, kStages>(x, ring, n_stages, issue, row_sh, lut, sums, n_warps, flush);
}

// H = 2 (a whole 32-value sub-block per lane) where K allows, as the MoE register kernels.
int lane_h(int64_t K) { return K % 1024 == 0 ? 2 : 1; }

template <GgmlType T, int H>
int blocks_per_sm_h(int w) {
    return blocks_per_sm<gemv_lane_xreg_kernel<T, H>, Geom<T, H>>(w);
}

template <GgmlType T, int H>
void launch_h(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s) {
    const int w = (int)(ps[0].K / (512 * H));
    const int bps = blocks_per_sm_h<T, H>(w);
    DSV4_CHECK(bps > 0);
    int64_t rows = 0;
    for (int j = 0; j < count; ++j) rows += ps[j].M;
    const int64_t per = wave_rows_per_block(rows, bps);
    Batch b{};
    int64_t blocks = 0;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        b.job[j] = Job{p.w, p.row_bytes, p.M, p.x, p.y, blocks};
        blocks += (p.M + per - 1) / per;
    }
    b.count = count;
    b.rows_per_block = per;
    launch_pdl(gemv_lane_xreg_kernel<T, H>, (unsigned)blocks, w * kWarp, Geom<T, H>::smem(w), s, b, t);
}

}  // namespace

bool gemv_lane_xreg_serves(const MatmulParams* ps, int count) {
    if (count < 1 || count > kMaxJobs || !has_lane_codec(ps[0].type)) return false;
    const int64_t K = ps[0].K;
    const int hv = lane_h(K);
    if (K % 512 != 0 || K > 512 * kMaxWarps) return false;
    bool ok = false;
    with_lane_codec(ps[0].type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        constexpr int kAlign = LaneCodec<T>::kAlign;
        for (int j = 0; j < count; ++j) {
            const MatmulParams& p = ps[j];
            if (p.type != T || p.n != 1 || p.K != K || p.M < 1 || p.offsets) return;
            if (p.row_bytes % kAlign != 0 || reinterpret_cast<uintptr_t>(p.w) % kAlign != 0 || !aligned16(p.x)) return;
        }
        const int w = (int)(K / (512 * hv));
        ok = hv == 2 ? blocks_per_sm_h<T, 2>(w) > 0 : blocks_per_sm_h<T, 1>(w) > 0;
    });
    return ok;
}

void launch_gemv_lane_xreg(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s) {
    DSV4_CHECK(gemv_lane_xreg_serves(ps, count));
    with_lane_codec(ps[0].type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        if (lane_h(ps[0].K) == 2)
            launch_h<T, 2>(ps, count, t, s);
        else
            launch_h<T, 1>(ps, count, t, s);
    });
}

}  // namespace dsv4::cuda
