// MoE gate/up at decode with the token's activation in registers (the form of cuda_gemv_q8_xreg.cu, shared
// pieces in cuda_gemv_xreg.cuh), for gate and up stacks of a format with a LaneCodec (cuda_gemv_xreg_lanes.cuh:
// V4-Flash's IQ2_XXS, the other 1- to 3-bit i-quants, Q2_K). The pipelined kernel (moe_gate_up_kernel in
// cuda_moe_decode.cu) re-reads the activation digits for every row pair from L1 and ran at 30 us per layer on
// IQ2_XXS, the same from L2 as from HBM: bound by its own latency, not by memory.
//
// A block takes one (token, slot) pair and a run of f_per_block rows f of its expert: the gate and up rows of
// each f, interleaved (gate f, up f, gate f + 1, ...), four to a stage. Lane l of warp w holds values
// [512 H w + 16 H l, + 16 H) of the token's x as digits it computes itself (so no quantize kernel runs before
// this one); each warp copies its slice of a row (2 H blocks of 256 values, starting anywhere in a 16-byte word)
// into its ring and multiplies its lanes' weights (LaneCodec::dot) by the digits. Every 16 f, warp 0 adds the
// warps' sums in warp order and writes h[pair, f] = SwiGLU(gate, up) * the routing weight, as the pipelined
// kernel does.
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

constexpr int kStages = 6;  // ring depth: a stage is only 4 x 132 H bytes per warp (IQ2_XXS), so five are in flight

struct Params {
    const float* x;        // [n, D]
    const int32_t* ids;    // [n, k]
    const float* weights;  // [n, k]
    float* h;              // [n * k, F]
    const uint8_t *gate, *up;
    size_t row_bytes;  // of gate and up
    int64_t D;
    int F;  // F * row_bytes < 2^32 (launch_moe_gate_up_xreg): 32-bit row offsets in an expert
    int k, n_experts;
    float clamp;
    int f_per_block;  // a multiple of kRows / 2
    int blocks_per_pair;
};

template <GgmlType T, int H>
using Geom = LaneGeom<T, H, kStages>;

// Launch bounds: H = 2 blocks have at most 16 warps (D <= 16384), so the compiler may take 72 registers a
// thread where a 1024-thread bound held it to 64 and it recomputed lane constants in every stage; at 128-thread
// blocks the shared memory keeps 7 blocks on an SM either way.
// P: the activation's digit planes (3: the exact digits; 2: the bf16 mode's, gemv::digits2_of4).
template <GgmlType T, int H, int P>
__global__ void __launch_bounds__(kMaxWarps* kWarp / H, 1)
    moe_gate_up_xreg_kernel(const __grid_constant__ Params a, QuantTables tb) {
    using G = Geom<T, H>;
    extern __shared__ uint4 smem[];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);  // every thread, before any exit
    const int n_warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int pair = (int)blockIdx.x / a.blocks_per_pair;
    const int f0 = ((int)blockIdx.x % a.blocks_per_pair) * a.f_per_block;
    const int nf = min(a.F - f0, a.f_per_block);
    const int n_stages = (2 * nf + kRows - 1) / kRows;
    uint4* ring = smem + (size_t)warp * kStages * kRows * G::kSlotWords;
    float* sums = reinterpret_cast<float*>(smem + (size_t)n_warps * kStages * kRows * G::kSlotWords);

    pdl_wait();  // the expert ids, the routing weights and x come from the kernels before
    pdl_trigger();
    const int e = checked_expert(a.ids, pair, a.n_experts);
    const uint32_t rb = (uint32_t)a.row_bytes;
    const size_t expert_at = (size_t)e * a.F * rb + (size_t)warp * G::kSliceBytes;
    const uint8_t* gate = a.gate + expert_at;
    const uint8_t* up = a.up + expert_at;
    // Row i of the block: gate (i even) or up row f(i) = f0 + i / 2, clamped into the matrix (rows past the
    // block's last are read, not used); the offset in the expert is 32-bit. row_sh(i): its address mod 16.
    auto row_f = [&](int i) { return (uint32_t)min(f0 + (i >> 1), a.F - 1); };
    auto row = [&](int i) { return ((i & 1) ? up : gate) + row_f(i) * rb; };
    const uint32_t sh_gate = (uint32_t)reinterpret_cast<uintptr_t>(gate) & 15;
    const uint32_t sh_up = (uint32_t)reinterpret_cast<uintptr_t>(up) & 15, rb15 = rb & 15;
    auto row_sh = [&](int i) { return (((i & 1) ? sh_up : sh_gate) + row_f(i) * rb15) % 16; };
    auto issue = [&](int s) { issue_covering<kStages, G::kSlotWords>(ring, s, G::kSliceBytes, row, lane); };
    ring_start<kStages>(n_stages, issue);

    const float* x = a.x + (int64_t)(pair / a.k) * a.D + warp * G::kSliceValues;
    auto flush = [&](const float* buf, int row0) {
        const int fi = row0 / 2 + lane;  // rows 2 i and 2 i + 1 of the chunk: gate and up of f0 + fi
        if (lane < kChunk / 2 && fi < nf) {
            float gv = buf[2 * lane], uv = buf[2 * lane + 1];
            for (int w = 1; w < n_warps; ++w) {
                gv += buf[w * kChunk + 2 * lane];
                uv += buf[w * kChunk + 2 * lane + 1];
            }
            if (a.clamp > 0) {  // as the swiglu op, then the routing weight (before the down projection)
                gv = fminf(gv, a.clamp);
                uv = fminf(fmaxf(uv, -a.clamp), a.clamp);
            }
            const float hv = gv / (1.0f + expf(-gv)) * uv;
            a.h[(int64_t)pair * a.F + f0 + fi] = hv * a.weights[pair];
        }
    };
    lane_stages<T, H, P, kStages>(x, ring, n_stages, issue, row_sh, lut, sums, n_warps, flush);
}

// Blocks of w warps per SM with H values per lane (0: such a block cannot run here).
template <GgmlType T, int H, int P = 3>
int blocks_per_sm_h(int w) {
    return blocks_per_sm<moe_gate_up_xreg_kernel<T, H, P>, Geom<T, H>>(w);
}

template <GgmlType T, int H, int P>
void launch_h(Params p, int64_t pairs, int w, const QuantTables& t, cudaStream_t s) {
    const int bps = blocks_per_sm_h<T, H, P>(w);
    DSV4_CHECK(bps > 0);
    const int64_t per = wave_rows_per_block(pairs * 2 * p.F, bps);
    p.f_per_block = (int)(per / 2);
    p.blocks_per_pair = (p.F + p.f_per_block - 1) / p.f_per_block;
    launch_pdl(moe_gate_up_xreg_kernel<T, H, P>, (unsigned)(pairs * p.blocks_per_pair), w * kWarp,
               Geom<T, H>::smem(w), s, p, t);
}

// H = 2 (a whole 32-value sub-block per lane) where D allows: faster than H = 1 for V4-Flash's experts.
bool whole_blocks(int64_t D) { return D % 1024 == 0; }

}  // namespace

bool moe_gate_up_xreg_serves(const MoeArgs& a) {
    // Up to kMoeDecodePairs pairs: each pair is its own run of blocks, with the one-token arithmetic, so a token's
    // output does not depend on the step's other tokens.
    if (a.n < 1 || a.n * a.k > kMoeDecodePairs) return false;
    if (!has_lane_codec(a.gate.type) || a.up.type != a.gate.type) return false;
    const int64_t D = a.gate.cols, F = a.gate.rows, pairs = a.n * a.k;
    if (a.up.cols != D || a.up.rows != F || a.gate.row_bytes != a.up.row_bytes || pairs < 1 || F < 1) return false;
    if (D % 512 != 0 || D > 512 * kMaxWarps || !aligned16(a.x)) return false;
    if ((uint64_t)F * a.gate.row_bytes > UINT32_MAX || pairs * 2 * F > INT32_MAX) return false;  // 32-bit offsets
    bool ok = false;
    with_lane_codec(a.gate.type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        constexpr int kAlign = LaneCodec<T>::kAlign;
        if (a.gate.row_bytes % kAlign != 0 || reinterpret_cast<uintptr_t>(a.gate.data) % kAlign != 0 ||
            reinterpret_cast<uintptr_t>(a.up.data) % kAlign != 0)
            return;
        ok = whole_blocks(D) ? blocks_per_sm_h<T, 2>((int)(D / 1024)) > 0 : blocks_per_sm_h<T, 1>((int)(D / 512)) > 0;
    });
    return ok;
}

void launch_moe_gate_up_xreg(const MoeArgs& a, float* h, int planes, const QuantTables& t, cudaStream_t s) {
    DSV4_CHECK(moe_gate_up_xreg_serves(a));
    const int64_t D = a.gate.cols, F = a.gate.rows, pairs = a.n * a.k;
    const Params p{a.x, a.ids, a.weights, h, a.gate.data, a.up.data, a.gate.row_bytes, D, (int)F, a.k,
                   (int)a.gate.n_experts, a.clamp, 0, 0};
    with_lane_codec(a.gate.type, [&](auto tc) {
        constexpr GgmlType T = decltype(tc)::value;
        with_planes(planes, [&](auto pl) {
            constexpr int P = decltype(pl)::value;
            if (whole_blocks(D))
                launch_h<T, 2, P>(p, pairs, (int)(D / 1024), t, s);
            else
                launch_h<T, 1, P>(p, pairs, (int)(D / 512), t, s);
        });
    });
}

}  // namespace dsv4::cuda
