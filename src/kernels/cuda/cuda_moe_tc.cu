// The routed experts of a prefill chunk on tensor cores (the bf16 GEMM mode), decoding the quantized weights
// as they are loaded: two grouped GEMM kernels over every expert with kTcMinRows rows or more.
//
// Why: decoding each expert's weight into a bf16 scratch matrix for cuBLAS (the per-expert path cuda_gemm_tc.cu
// keeps for the formats these kernels do not take, and for A/B)
// writes and reads back ~4 bytes per weight value, ~26 GB per V4-Flash layer with all 256 experts active, and
// takes 7 launches per expert; the 2-bit weights themselves are ~1.7 GB. Here a block decodes the weight tile
// it needs straight into shared memory (the exact decoders of cuda_dequant.cuh, rounded to bf16) and
// multiplies it with bf16 mma.sync (f32 accumulation); one launch covers all experts.
//
//   gate/up: h [row, f] = bf16(swiglu(x . gate_f, x . up_f) * routing weight), a block per (128-row tile of
//            one expert, 64 features): 64 gate and 64 up weight rows per k-step, SwiGLU in the epilogue;
//   down:    y [row, d] = h . down_d (f32), a block per (128-row tile, 64 outputs).
// The numerics are the cuBLAS path's: bf16 activations and weights, f32 sums, the SwiGLU in f32 then rounded.
//
// Block: 8 warps as 4 x 2, each 32 rows x 32 outputs (and the matching up outputs); k-steps of 64 values.
// Shared rows are 64 + 8 bf16 (144 bytes), so the ldmatrix row addresses of a fragment hit distinct banks.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kBM = kMoeTcTileRows, kBN = 64, kBK = 64, kThreads = 256;
constexpr int kLd = kBK + 8;  // bf16 per shared row

struct Stack {
    const uint8_t* data;  // expert 0's first row
    size_t row_bytes;
    size_t expert_bytes;  // rows per expert * row_bytes
};

// Values of a weight row staged per pipeline stage: whole blocks of every block format (32 or 256 values).
constexpr int kStageK = 256;

template <GgmlType T, bool GATE_UP>
struct MoeTcLayout {
    using D = Dq<T>;
    static constexpr int kWRows = GATE_UP ? 2 * kBN : kBN;  // weight rows a block decodes per k-step
    static constexpr int kStageBytes = kStageK / D::kElems * D::kBytes;
    // 16-byte words of one row's raw stage: the data, the partial word before it, and a spare word.
    static constexpr int kSlotWords = (kStageBytes + 15) / 16 + 1;
    // Two stages of raw rows, and each row's offset in its slot (an int per row and stage).
    static constexpr size_t kRawBytes = (size_t)2 * kWRows * (kSlotWords * 16 + sizeof(int));
    static constexpr size_t kXBytes = (size_t)2 * kBM * kLd * 2;
    static constexpr size_t kWBytes = (size_t)kWRows * kLd * 2;
    static constexpr size_t kSmem = kRawBytes + kXBytes + kWBytes;
};

// Block (blockIdx.x: tile, blockIdx.y: 64 outputs). GATE_UP: w0 = gate, w1 = up (N = F outputs, K = D), out h
// (bf16, ldo); otherwise w0 = down (N = D, K = F), out y (f32, ldo). x: bf16 rows (ldx >= K, zero past K).
//
// Pipeline: the raw bytes of a stage (256 values of each weight row, whole blocks) are copied to shared memory
// by cp.async one stage ahead, the activations one 64-value k-step ahead; each k-step decodes its slice of the
// raw stage (the exact decoders, reading shared memory) into a bf16 tile and multiplies it. So the HBM and L2
// latencies overlap the decode and the tensor-core work of the step before.
template <GgmlType T, bool GATE_UP>
__global__ void __launch_bounds__(kThreads, 2)
    moe_tc_kernel(const MoeTcTile* tiles, const __nv_bfloat16* x, int64_t ldx, Stack w0, Stack w1, int64_t K, int64_t N,
                  void* out, int64_t ldo, const float* weights, const int32_t* pair_of_row, float clamp,
                  QuantTables tb) {
    using L = MoeTcLayout<T, GATE_UP>;
    using D = Dq<T>;
    constexpr int kWRows = L::kWRows, kSlotWords = L::kSlotWords;
    constexpr int kSets = GATE_UP ? 2 : 1;
    extern __shared__ uint4 smem_words[];
    uint4* raw = smem_words;  // [2][kWRows][kSlotWords]
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_words + 2 * kWRows * kSlotWords);  // [2][kBM][kLd]
    __nv_bfloat16* ws = xs + 2 * kBM * kLd;                                                      // [kWRows][kLd]
    int* shifts = reinterpret_cast<int*>(ws + kWRows * kLd);  // [2][kWRows]: offset of a row's stage in its slot
    const MoeTcTile tile = tiles[blockIdx.x];
    const int64_t n0 = (int64_t)blockIdx.y * kBN;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int wm = warp / 2, wn = warp % 2;

    // Weight row j of this block (j < kBN: gate or down row n0 + j; j >= kBN: up row n0 + j - kBN), or null
    // past N.
    auto wrow = [&](int j) -> const uint8_t* {
        const bool up = GATE_UP && j >= kBN;
        const int64_t r = n0 + (up ? j - kBN : j);
        if (r >= N) return nullptr;
        const Stack& st = up ? w1 : w0;
        return st.data + (size_t)tile.expert * st.expert_bytes + (size_t)r * st.row_bytes;
    };
    // Stage kb (values [kStageK kb, ...)) of every weight row into raw buffer kb & 1: the 16-byte words that
    // cover its bytes (a word holding any byte of the row lies in the weight's allocation).
    auto stage_raw = [&](int64_t kb) {
        const int64_t k0 = kb * kStageK;
        const int bytes = (int)((K - k0 < kStageK ? K - k0 : kStageK) / D::kElems) * D::kBytes;
        uint4* dst = raw + (kb & 1) * kWRows * kSlotWords;
        for (int c = threadIdx.x; c < kWRows * kSlotWords; c += kThreads) {
            const int j = c / kSlotWords, w = c % kSlotWords;
            const uint8_t* r = wrow(j);
            const uint8_t* start = r ? r + (size_t)(k0 / D::kElems) * D::kBytes : nullptr;
            const int shift = (int)(reinterpret_cast<uintptr_t>(start) & 15);
            if (w == 0) shifts[(kb & 1) * kWRows + j] = r ? shift : -1;  // -1: a row past N (zeros)
            if (r && w < (shift + bytes + 15) / 16) cp_async16(dst + j * kSlotWords + w, start - shift + 16 * w);
        }
    };
    // Activations of k-step ks (values [64 ks, 64 ks + 64)) into buffer ks & 1; rows past the tile and chunks
    // past ldx are zeros.
    auto stage_x = [&](int64_t ks) {
        __nv_bfloat16* dst = xs + (ks & 1) * kBM * kLd;
        for (int c = threadIdx.x; c < kBM * (kBK / 8); c += kThreads) {
            const int r = c / (kBK / 8), q = c % (kBK / 8);
            const int64_t k = ks * kBK + 8 * q;
            const bool ok = r < tile.rows && k < ldx;
            cp_async16_zfill(dst + r * kLd + 8 * q, ok ? x + (tile.row0 + r) * ldx + k : x, ok);
        }
    };

    float acc[kSets][2][4][4];
#pragma unroll
    for (int s = 0; s < kSets; ++s)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[s][mi][ni][e] = 0.0f;

    constexpr int kSubs = kStageK / kBK;  // k-steps per stage
    const int64_t steps = (K + kBK - 1) / kBK;
    stage_raw(0);
    stage_x(0);
    cp_async_commit();
    for (int64_t ks = 0; ks < steps; ++ks) {
        const int64_t kb = ks / kSubs;
        const int sub = (int)(ks % kSubs);
        // The next k-step's activations, and at a stage's first step the next stage's raw bytes. Their buffers
        // were last read before the barrier that ended the previous step.
        if (ks + 1 < steps) stage_x(ks + 1);
        if (sub == 0 && (kb + 1) * kStageK < K) stage_raw(kb + 1);
        cp_async_commit();
        cp_async_wait<1>();  // everything but the group just issued: this step's activations and raw stage
        __syncthreads();

        // Decode this step's 8 groups of 8 values of every weight row from the raw stage into ws (bf16): thread
        // t takes group t % 8 of rows t / 8, t / 8 + 32, ...
        const uint4* rs = raw + (kb & 1) * kWRows * kSlotWords;
        const int q = threadIdx.x % (kBK / 8);
        const bool k_ok = ks * kBK + 8 * q < K;
#pragma unroll
        for (int i = 0; i < kWRows * (kBK / 8) / kThreads; ++i) {
            const int j = threadIdx.x / (kBK / 8) + i * (kThreads / (kBK / 8));
            const int shift = shifts[(kb & 1) * kWRows + j];
            float v[8];
            if (shift >= 0 && k_ok) {
                decode8<T>(reinterpret_cast<const uint8_t*>(rs + j * kSlotWords) + shift, sub * (kBK / 8) + q, kStageK,
                           v, tb);
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) v[i] = 0.0f;
            }
            *reinterpret_cast<uint4*>(ws + j * kLd + 8 * q) =
                make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
        }
        __syncthreads();

        const __nv_bfloat16* xt = xs + (ks & 1) * kBM * kLd;
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                ldmatrix_x4(a[mi], xt + (32 * wm + 16 * mi + (lane % 16)) * kLd + 16 * kk + (lane / 16) * 8);
#pragma unroll
            for (int s = 0; s < kSets; ++s)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    // Two n-tiles: matrices (rows +0, k +0), (+0, +8), (+8, +0), (+8, +8) -> b0, b1 of each.
                    uint32_t b[4];
                    ldmatrix_x4(b, ws + (s * kBN + 32 * wn + 16 * p + (lane % 8) + (lane / 16) * 8) * kLd + 16 * kk +
                                       ((lane / 8) % 2) * 8);
#pragma unroll
                    for (int mi = 0; mi < 2; ++mi) {
                        mma_bf16(acc[s][mi][2 * p], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[0], b[1]);
                        mma_bf16(acc[s][mi][2 * p + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[2], b[3]);
                    }
                }
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    // Epilogue: acc[.][mi][ni][e] is row 32 wm + 16 mi + lane / 4 + 8 (e / 2), output 32 wn + 8 ni + 2 (lane % 4)
    // + e % 2.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 32 * wm + 16 * mi + lane / 4 + 8 * h;
            if (r >= tile.rows) continue;
            const int64_t grow = tile.row0 + r;
            const float wgt = GATE_UP ? weights[pair_of_row[grow]] : 1.0f;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int64_t col = n0 + 32 * wn + 8 * ni + 2 * (lane % 4);
                if (col >= N) continue;
                const float v0 = acc[0][mi][ni][2 * h], v1 = acc[0][mi][ni][2 * h + 1];
                if constexpr (GATE_UP) {
                    const float u0 = acc[kSets - 1][mi][ni][2 * h], u1 = acc[kSets - 1][mi][ni][2 * h + 1];
                    __nv_bfloat16* o = static_cast<__nv_bfloat16*>(out) + grow * ldo + col;
                    o[0] = __float2bfloat16_rn(swiglu_value(v0, u0, clamp) * wgt);
                    if (col + 1 < N) o[1] = __float2bfloat16_rn(swiglu_value(v1, u1, clamp) * wgt);
                } else {
                    float* o = static_cast<float*>(out) + grow * ldo + col;
                    o[0] = v0;
                    if (col + 1 < N) o[1] = v1;
                }
            }
        }
}

template <GgmlType T, bool GATE_UP>
void launch_moe_tc(CudaBackend& b, dim3 grid, const MoeTcTile* tiles, const __nv_bfloat16* x, int64_t ldx, Stack w0,
                   Stack w1, int64_t K, int64_t N, void* out, int64_t ldo, const float* weights,
                   const int32_t* pair_of_row, float clamp) {
    constexpr size_t smem = MoeTcLayout<T, GATE_UP>::kSmem;
    CUDA_CHECK(cudaFuncSetAttribute(moe_tc_kernel<T, GATE_UP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    moe_tc_kernel<T, GATE_UP><<<grid, kThreads, smem, b.stream()>>>(tiles, x, ldx, w0, w1, K, N, out, ldo, weights,
                                                                    pair_of_row, clamp, b.tables());
    CUDA_CHECK_LAUNCH();
}

Stack stack_of(const Weight& w) {
    return {w.data, w.row_bytes, (size_t)w.rows * w.row_bytes};
}

// Block formats whose blocks tile a stage (32 or 256 values; plain types are not what expert stacks use, and
// a stage of them would be 256 values of 2-4 bytes per row), within the device's shared memory per block.
template <bool GATE_UP>
bool stageable(const CudaBackend& b, GgmlType t) {
    bool ok = false;
    dispatch_weight_type(t, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            ok = MoeTcLayout<T, GATE_UP>::kSmem <= (size_t)b.props().sharedMemPerBlockOptin;
    });
    return ok;
}

}  // namespace

bool moe_tc_kernels_fit(const CudaBackend& b, const MoeArgs& a) {
    return a.gate.type == a.up.type && a.down.cols == a.gate.rows && a.down.rows == a.gate.cols &&
           stageable<true>(b, a.gate.type) && stageable<false>(b, a.down.type);
}

void moe_tc_gate_up(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* xb,
                    int64_t ldx, __nv_bfloat16* h, int64_t ldh, const int32_t* pair_of_row) {
    const int64_t D = a.gate.cols, F = a.gate.rows;
    const dim3 grid((unsigned)n_tiles, ceil_div(F, kBN));
    dispatch_weight_type(a.gate.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            launch_moe_tc<T, true>(b, grid, tiles, xb, ldx, stack_of(a.gate), stack_of(a.up), D, F, h, ldh, a.weights,
                                   pair_of_row, a.clamp);
    });
}

void moe_tc_down(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* hb,
                 int64_t ldh, float* y) {
    const int64_t D = a.down.rows, F = a.down.cols;
    const dim3 grid((unsigned)n_tiles, ceil_div(D, kBN));
    dispatch_weight_type(a.down.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            launch_moe_tc<T, false>(b, grid, tiles, hb, ldh, stack_of(a.down), stack_of(a.down), F, D, y, D, nullptr,
                                    nullptr, 0.0f);
    });
}

}  // namespace dsv4::cuda
