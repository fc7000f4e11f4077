// MoE down projection and sum at decode with the activations in registers (the form of cuda_gemv_q8_xreg.cu,
// shared pieces in cuda_gemv_xreg.cuh), for a down stack of a format with a LaneCodec (cuda_gemv_xreg_lanes.cuh:
// V4-Flash's Q2_K, the 1- to 3-bit i-quants). The pipelined kernel (moe_down_sum_kernel in cuda_moe_decode.cu)
// needs h quantized by a kernel of its own and re-reads the digits for every row pair; it ran at 21.5 us per
// layer with 24.6% occupancy on Q2_K.
//
// A block takes one token and a run of output rows d. Its warps are the token's k slots times F / 512 H
// slices: warp group i holds the i-th slot in the CPU's summation order (ascending expert id, ties by slot)
// and lane l of slice s the values [512 H s + 16 H l, + 16 H) of that slot's h row as digits (with their f32
// sums, for Q2_K's block minimum). Each warp streams its slice of its expert's rows d (2 H blocks of 256 values)
// through its ring, four rows to a stage; every 32 rows warp 0 adds, for each row,
// the slices of each slot and then the slots in order, and writes the token's output.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_gemv_xreg.cuh"
#include "kernels/cuda/cuda_gemv_xreg_lanes.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;
using namespace xreg;

constexpr int kStages = 6;  // ring depth: a stage is only 4 x 168 H bytes per warp
constexpr int kMaxSlots = 32;

struct Params {
    const float* h;       // [n * k, F]
    const int32_t* ids;   // [n, k]
    float* out;           // [n, D]
    const uint8_t* down;  // [E][D][F]
    size_t row_bytes;
    int64_t D, F;
    int k, n_experts;
    int slices;  // warps per slot: F / (512 H)
    int64_t rows_per_block;
    int64_t blocks_per_token;
};

template <GgmlType T, int H>
using Geom = LaneGeom<T, H, kStages>;

// Launch bounds: H = 2 blocks of at most 24 warps (k F / 1024 of them: 12 for V4-Flash), so the compiler may
// take up to 85 registers a thread (a 1024-thread bound held it to 64); two 12-warp blocks still fit an SM.
template <int H>
constexpr int kMaxThreads = H == 2 ? 24 * kWarp : kMaxWarps * kWarp;

// P: the activation's digit planes (3: the exact digits; 2: the bf16 mode's, gemv::digits2_of4).
template <GgmlType T, int H, int P>
__global__ void __launch_bounds__(kMaxThreads<H>, 1)
    moe_down_xreg_kernel(const __grid_constant__ Params a, QuantTables tb) {
    using G = Geom<T, H>;
    extern __shared__ uint4 smem[];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);  // every thread, before any exit
    __shared__ int item_expert[kMaxSlots], item_pair[kMaxSlots];
    const int n_warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t token = blockIdx.x / a.blocks_per_token;
    const int64_t d0 = (blockIdx.x % a.blocks_per_token) * a.rows_per_block;
    const int rows = (int)(a.D - d0 < a.rows_per_block ? a.D - d0 : a.rows_per_block);
    const int n_stages = (rows + kRows - 1) / kRows;
    uint4* ring = smem + (size_t)warp * kStages * kRows * G::kSlotWords;
    float* sums = reinterpret_cast<float*>(smem + (size_t)n_warps * kStages * kRows * G::kSlotWords);

    // The expert ids come from the routing kernel, which finished before the gate/up kernel before this one got
    // past its own pdl_wait (and so before this grid could launch): the weights' copies start before this
    // kernel waits for h.
    if (warp == 0 && lane < a.k) {  // slot `lane` becomes item slot_rank(...) of the summation order
        const int64_t p = token * a.k + lane;
        const int e = checked_expert(a.ids, p, a.n_experts);
        const int rank = slot_rank(a.ids, token, a.k, lane, e);
        item_expert[rank] = e;
        item_pair[rank] = (int)p;
    }
    __syncthreads();
    const int item = warp / a.slices, slice = warp % a.slices;
    const uint32_t rb = (uint32_t)a.row_bytes, last = (uint32_t)(a.D - 1);
    const uint8_t* base = a.down + (size_t)item_expert[item] * a.D * rb + (size_t)slice * G::kSliceBytes;
    // Row r of the block: d(r) = d0 + r, clamped into the matrix (rows past the block's last are read, not
    // used); the offset in the expert is 32-bit (D * row_bytes < 2^32: launch_moe_down_xreg). row_sh(r): its
    // address mod 16 (a multiple of the format's kAlign: so are row_bytes and the matrix).
    auto row_d = [&](int r) { return min((uint32_t)d0 + (uint32_t)r, last); };
    auto row = [&](int r) { return base + row_d(r) * rb; };
    const uint32_t sh_base = (uint32_t)reinterpret_cast<uintptr_t>(base) & 15, rb15 = rb & 15;
    auto row_sh = [&](int r) { return (sh_base + row_d(r) * rb15) % 16; };
    auto issue = [&](int s) { issue_covering<kStages, G::kSlotWords>(ring, s, G::kSliceBytes, row, lane); };
    ring_start<kStages>(n_stages, issue);
    pdl_wait();  // h comes from the gate/up kernel
    pdl_trigger();

    const float* x = a.h + (int64_t)item_pair[item] * a.F + slice * G::kSliceValues;
    auto flush = [&](const float* buf, int row0) {
        const int r = row0 + lane;
        if (r < rows) {
            float total = 0.0f;
            for (int i = 0; i < a.k; ++i) {
                float y = buf[i * a.slices * kChunk + lane];
                for (int sl = 1; sl < a.slices; ++sl) y += buf[(i * a.slices + sl) * kChunk + lane];
                total += y;
            }
            a.out[token * a.D + d0 + r] = total;
        }
    };
    lane_stages<T, H, P, kStages>(x, ring, n_stages, issue, row_sh, lut, sums, n_warps, flush);
}

// Blocks of w warps per SM with H values per lane (0: such a block cannot run here).
template <GgmlType T, int H, int P = 3>
int blocks_per_sm_h(int w) {
    return blocks_per_sm<moe_down_xreg_kernel<T, H, P>, Geom<T, H>>(w);
}

template <GgmlType T, int H, int P>
void launch_h(Params p, int64_t n, int w, const QuantTables& t, cudaStream_t s) {
    const int bps = blocks_per_sm_h<T, H, P>(w);
    DSV4_CHECK(bps > 0);
    const int64_t per = wave_rows_per_block(n * p.D, bps);
    p.rows_per_block = per;
    p.blocks_per_token = (p.D + per - 1) / per;
    launch_pdl(moe_down_xreg_kernel<T, H, P>, (unsigned)(n * p.blocks_per_token), w * kWarp, Geom<T, H>::smem(w), s,
               p, t);
}

// The values per lane: H = 2 (32 values) where F allows, as the gate/up kernel.
int lane_h(int64_t F) { return F % 1024 == 0 ? 2 : 1; }

}  // namespace

bool moe_down_xreg_serves(const MoeArgs& a) {
    // Up to kMoeDecodePairs pairs, as the gate/up kernel: a token's blocks sum its slots as for one token.
    if (a.n < 1 || a.n * a.k > kMoeDecodePairs || !has_lane_codec(a.down.type) || a.k < 1 || a.k > kMaxSlots)
        return false;
    const int64_t F = a.down.cols, D = a.down.rows;
    if (F % 512 != 0 || D < 1) return false;
    if ((uint64_t)D * a.down.row_bytes > UINT32_MAX) return false;  // 32-bit offsets in an expert
    const int hv = lane_h(F);
    const int64_t w = F / (512 * hv) * a.k;
    if (w > kMaxWarps) return false;
    bool ok = false;
    with_lane_codec(a.down.type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        constexpr int kAlign = LaneCodec<T>::kAlign;
        if (a.down.row_bytes % kAlign != 0 || reinterpret_cast<uintptr_t>(a.down.data) % kAlign != 0) return;
        ok = hv == 2 ? blocks_per_sm_h<T, 2>((int)w) > 0 : blocks_per_sm_h<T, 1>((int)w) > 0;
    });
    return ok;
}

void launch_moe_down_xreg(const MoeArgs& a, const float* h, int planes, const QuantTables& t, cudaStream_t s) {
    DSV4_CHECK(moe_down_xreg_serves(a));
    const int64_t F = a.down.cols, D = a.down.rows;
    const int hv = lane_h(F);
    const int64_t slices = F / (512 * hv), w = slices * a.k;
    const Params p{h, a.ids, a.out, a.down.data, a.down.row_bytes, D, F, a.k, (int)a.down.n_experts, (int)slices, 0, 0};
    with_lane_codec(a.down.type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        with_planes(planes, [&](auto pl) {
            constexpr int P = decltype(pl)::value;
            if (hv == 2)
                launch_h<T, 2, P>(p, a.n, (int)w, t, s);
            else
                launch_h<T, 1, P>(p, a.n, (int)w, t, s);
        });
    });
}

}  // namespace dsv4::cuda
