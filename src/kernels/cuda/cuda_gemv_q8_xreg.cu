// The Q8_0 decode GEMV for one activation row with the activation held in registers. The pipelined GEMV
// (cuda_gemv.cu) gives each warp two rows and the whole input, so every warp reads all of the activation
// digits through L1 (112 bytes per 32 values against 68 bytes of weights): Nsight Compute showed its warps
// waiting on those loads (long scoreboard) and a 35.6 MB matrix taking 20.5 us where a plain read takes 12.7.
//
// Here a block of W warps covers the input: lane l of warp w owns values [512 H w + 16 H l, + 16 H) (H = 2: one
// whole Q8_0 block per lane, H = 1: half a block, the one launched: see kH below), quantizes them itself
// to the digits of cuda_gemv_digits.cuh (the same digits quantize_digits_kernel writes, so no quantize kernel runs) and
// keeps them in registers while the block streams its rows: each warp copies its 544 H-byte slice of the next kRows
// rows into a cp.async ring, every lane multiplies its weights by its digits (3 dp4a per 4 weights), a butterfly leaves
// each row's warp sum on one lane, and every kChunk rows the warps' sums are added in warp order in shared memory and
// stored. The grid is one wave; each block takes a contiguous run of rows of one job (a batch's jobs share K, as a
// layer's projections of one input or wo_a's groups do).
//
// Up to kMaxRows activation rows (a speculative verify step's 2-4 tokens): each lane holds every row's digits,
// and each weight word it loads is multiplied by all of them, so the matrix is read once for all rows. Row q's
// arithmetic is exactly the one-row kernel's (the same products, butterfly and warp order), so a token's output
// does not depend on how many tokens share the step.
#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"
#include "kernels/cuda/cuda_gemv_xreg.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;
using namespace xreg;

constexpr int kMaxJobs = kGemvMaxJobs;
constexpr int kMaxRows = 4;
// Blocks of more than one activation row have at most this many warps (K <= 512 H x 16), which leaves 128
// registers a thread for the rows' digits.
constexpr int kMaxWarpsRows = 16;

// S: the ring's depth; NR: activation rows.
template <int H, int S, int NR = 1>
struct Geom {
    static constexpr int kValues = 16 * H;                      // per lane
    static constexpr int kWords = kValues / 4;                  // weight words and digit words (per plane) per lane
    static constexpr int kSliceValues = kWarp * kValues;        // per warp
    static constexpr int kSliceBytes = kSliceValues / 32 * 34;  // 544 H
    static constexpr int kSliceWords = kSliceBytes / 16;        // 16-byte words
    static_assert(kSliceBytes % 16 == 0, "a warp's slice of a row is whole 16-byte words");
    static constexpr size_t smem(int w) { return block_smem(w, S * kRows * kSliceBytes, NR); }
};

struct RowNorm {  // matmul_norm's: x normed first when `on`, times `weight` when non-null
    bool on = false;
    const float* weight = nullptr;
    float eps = 0.0f;
};
struct Job {
    const uint8_t* w;
    size_t row_bytes;
    int64_t M;
    const float* x;
    float* y;
    int64_t x_stride, y_stride;  // between activation rows
    int64_t block0;              // the job's first block
    RowNorm norm;
};
struct Batch {
    Job job[kMaxJobs];
    int count;
    int64_t rows_per_block;  // a multiple of kRows
};

template <int H, int kStages, int NR>
__global__ void __launch_bounds__((NR == 1 ? kMaxWarps : kMaxWarpsRows) * kWarp, 1)
    gemv_q8_xreg_kernel(const __grid_constant__ Batch b) {
    using G = Geom<H, kStages, NR>;
    extern __shared__ uint4 smem[];
    const int n_warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const BlockRows br = block_rows(b);
    const Job& J = b.job[br.job];
    const int64_t r0 = br.r0;
    const int rows = br.rows;
    const int n_stages = (rows + kRows - 1) / kRows;
    uint4* ring = smem + (size_t)warp * kStages * kRows * G::kSliceWords;
    float* sums = reinterpret_cast<float*>(smem + (size_t)n_warps * kStages * kRows * G::kSliceWords);

    // Stage s: rows r0 + kRows s + r (past the last row: the last, so the copies read valid memory).
    const uint8_t* slice = J.w + (size_t)warp * G::kSliceBytes;
    auto issue = [&](int s) {
        uint4* slot = ring + (s % kStages) * kRows * G::kSliceWords;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t row = r0 + kRows * s + r < J.M ? r0 + kRows * s + r : J.M - 1;
            const uint8_t* src = slice + (size_t)row * J.row_bytes;
            uint4* dst = slot + r * G::kSliceWords;
#pragma unroll
            for (int v = 0; v < G::kSliceWords / kWarp; ++v)
                cp_async16(dst + kWarp * v + lane, src + 16 * (kWarp * v + lane));
            constexpr int kRest = G::kSliceWords % kWarp, kFull = G::kSliceWords - kRest;
            if (lane < kRest) cp_async16(dst + kFull + lane, src + 16 * (kFull + lane));
        }
    };
    ring_start<kStages>(n_stages, issue);
    pdl_begin();  // the weights are on their way; now wait for the kernel that wrote x

    uint32_t a0[NR][G::kWords], a1[NR][G::kWords], a2[NR][G::kWords];
    float sx[NR];
    const int64_t at = (int64_t)warp * G::kSliceValues + G::kValues * lane;  // the lane's first value
#pragma unroll
    for (int q = 0; q < NR; ++q) {
        float v[4 * H][4];
        lane_load<H>(J.x + q * J.x_stride + at, v);
        if (J.norm.on) {  // uniform over the block: every block norms the whole row it holds (rms_norm's numerics)
            // The norm's weights go out with x's loads, not after the block's sum.
            float4 nw[4 * H];
#pragma unroll
            for (int i = 0; i < 4 * H; ++i)
                nw[i] = rms_weight4(J.norm.weight, at / 4 + i);
            __shared__ double scratch[kMaxWarps];
            double ss = 0;
#pragma unroll
            for (int i = 0; i < 4 * H; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) ss += (double)v[i][j] * v[i][j];
            ss = block_sum(ss, scratch);
            const float r = rms_factor(ss, n_warps * G::kSliceValues, J.norm.eps);
#pragma unroll
            for (int i = 0; i < 4 * H; ++i) {
                const float4 o =
                    rms_scale4(make_float4(v[i][0], v[i][1], v[i][2], v[i][3]), r, nw[i], J.norm.weight != nullptr);
                v[i][0] = o.x, v[i][1] = o.y, v[i][2] = o.z, v[i][3] = o.w;
            }
        }
        sx[q] = lane_quantize<H>(v, a0[q], a1[q], a2[q]);
    }
    const int scale_at = 34 * (H * lane / 2);                           // the lane's block in the slice
    const int data_at = scale_at + 2 + (H == 1 ? 16 * (lane & 1) : 0);  // its first weight byte

    RingCursor<kStages, kRows * G::kSliceBytes> stage(ring);
    for (int s = 0; s < n_stages; ++s, stage.next()) {
        ring_wait<kStages>(s, n_stages, issue);
        const uint32_t stage_at = stage.at();
        float acc[NR][kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const uint32_t p = stage_at + r * G::kSliceBytes;
            uint32_t w[G::kWords];
            lds_words_any(p + data_at, w);  // may read one word past the slice: the next row, or the sums
            const float scale = half_bits(lds16(p + scale_at));
#pragma unroll
            for (int q = 0; q < NR; ++q) {
                DigitSums ds;
                digit_dot<true, G::kWords>(w, a0[q], a1[q], a2[q], ds);
                acc[q][r] = (scale * sx[q]) * digit_value(ds);
            }
        }
        __syncwarp();  // every lane is done with this slot before a later issue() refills it
        float k[NR];
#pragma unroll
        for (int q = 0; q < NR; ++q) k[q] = butterfly4(acc[q], lane);  // lane 8 r: row r's warp sum
        stash_sums_rows<NR>(k, s, n_stages, sums, n_warps, [&](int q, const float* buf, int row0) {
            const int row = row0 + lane;
            if (row < rows) {
                float t = buf[lane];
                for (int w = 1; w < n_warps; ++w) t += buf[w * kChunk + lane];
                J.y[q * J.y_stride + r0 + row] = t;
            }
        });
    }
    cp_async_wait<0>();
}

// The lane width and ring depth this GEMV runs with: H = 1 (half a Q8_0 block per lane: a warp's chain of
// dependent instructions is half as long as with a whole block, and a block has twice the warps, which
// small matrices gain most from) and S = 4 stages (three in flight while one is multiplied).
constexpr int kH = 1, kS = 4;
template <int NR>
using Kernel = Geom<kH, kS, NR>;

// f(std::integral_constant<int, NR>) for the kernel of nr = NR activation rows (1 .. kMaxRows): the one
// place the row count becomes a template argument.
template <class F>
auto with_rows(int64_t nr, F&& f) {
    switch (nr) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 3: return f(std::integral_constant<int, 3>{});
        default: return f(std::integral_constant<int, 4>{});
    }
}
static_assert(kMaxRows == 4, "with_rows covers 1 .. kMaxRows");

// Blocks of w warps per SM for nr activation rows (0: such a block cannot run here).
int blocks_per_sm_for(int w, int64_t nr) {
    return with_rows(nr, [&](auto NR) { return blocks_per_sm<gemv_q8_xreg_kernel<kH, kS, NR>, Kernel<NR>>(w); });
}

void launch_batch(const MatmulParams* ps, int count, RowNorm norm, cudaStream_t s) {
    const int w = (int)(ps[0].K / (512 * kH));
    const int64_t nr = ps[0].n;
    const int bps = blocks_per_sm_for(w, nr);
    DSV4_CHECK(bps > 0);
    int64_t rows = 0;
    for (int j = 0; j < count; ++j) rows += ps[j].M;
    const int64_t per = wave_rows_per_block(rows, bps);
    Batch b{};
    int64_t blocks = 0;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        b.job[j] = Job{p.w, p.row_bytes, p.M, p.x, p.y, p.x_stride, p.y_stride, blocks, norm};
        blocks += (p.M + per - 1) / per;
    }
    b.count = count;
    b.rows_per_block = per;
    with_rows(nr, [&](auto NR) {
        launch_pdl(gemv_q8_xreg_kernel<kH, kS, NR>, (unsigned)blocks, w * kWarp, Kernel<NR>::smem(w), s, b);
    });
}

}  // namespace

bool gemv_q8_xreg_serves(const MatmulParams* ps, int count, bool with_norm, const float* norm) {
    if (count < 1 || count > kMaxJobs || (with_norm && count != 1)) return false;
    if (with_norm && norm != nullptr && !aligned16(norm)) return false;
    const int64_t K = ps[0].K;
    if (K % 512 != 0 || K > 512 * kMaxWarps) return false;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        // 16-byte copies of each warp's slice need 16-byte aligned rows (K % 512 == 0 makes row_bytes a
        // multiple of 16); the lanes' float4 loads need an aligned x.
        if (p.type != GgmlType::Q8_0 || p.n != ps[0].n || p.K != K || p.M < 1 || p.offsets) return false;
        if (!aligned16(p.w) || p.row_bytes % 16 != 0 || !aligned16(p.x)) return false;
        // Every activation row's float4 loads aligned too.
        if (p.n > 1 && (p.x_stride % 4 != 0 || p.x_stride < K || p.y_stride < p.M)) return false;
    }
    const int64_t nr = ps[0].n, w = K / (512 * kH);
    if (nr < 1 || nr > kMaxRows || (nr > 1 && w > kMaxWarpsRows)) return false;
    return blocks_per_sm_for((int)w, nr) > 0;
}

void launch_gemv_q8_xreg(const MatmulParams* ps, int count, cudaStream_t s) {
    DSV4_CHECK(gemv_q8_xreg_serves(ps, count, false, nullptr));
    launch_batch(ps, count, RowNorm{}, s);
}

void launch_gemv_q8_xreg_norm(const MatmulParams& p, const float* norm, float eps, cudaStream_t s) {
    DSV4_CHECK(gemv_q8_xreg_serves(&p, 1, true, norm));
    launch_batch(&p, 1, RowNorm{true, norm, eps}, s);
}

}  // namespace dsv4::cuda
