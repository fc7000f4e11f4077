// MoE experts for a few tokens (decode), in two kernels and no grouping pass:
// 1. gate_up: for every (token, slot) pair and row f of its expert (the id read on the device), the
//    gate and up rows are streamed together (they multiply the same token), then the clamped SwiGLU and the
//    routing weight give h[pair, f].
// 2. down_sum: for every token and two output rows d, the down rows of its k experts are streamed in
//    ascending expert id (ties by slot) and the k products are summed in that order, the CPU's, straight
//    into the output: no [n*k, D] intermediate and no separate sum.
// Both stream weights like the decode GEMV (cuda_gemv_stream.cuh), so each reads exactly the chosen
// experts' bytes (an expert chosen by two tokens is read twice; with n * k <= 64 that is rare and cheap).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;

constexpr int kMaxSlots = 32;  // k (moe_experts' own limit)
// Rows per warp as the GEMV: gate_up streams the gate and up rows of one row f at a time, kGateItems rows f
// in turn; down_sum two output rows.
constexpr int kGateItems = 4;
constexpr int64_t kTargetWarps = 4096;

struct MoeDecodeParams {
    const void* x = nullptr;         // [n, D] floats, or [n, D / kDigitBlock] XDigits for the digit codecs
    const int32_t* ids = nullptr;    // [n, k]
    const float* weights = nullptr;  // [n, k]
    float* h = nullptr;              // [n * k, F]
    const void* hq = nullptr;        // h as the down codec reads it: h itself or [n * k, F / kDigitBlock] XDigits
    float* out = nullptr;            // [n, D]
    int64_t n = 0, D = 0, F = 0;
    int k = 0, n_experts = 0;
    float clamp = 0.0f;
    const uint8_t *gate = nullptr, *up = nullptr, *down = nullptr;
    size_t gate_row = 0, up_row = 0, down_row = 0;  // row bytes
};

// Item i of a warp: row f0 + i of the expert's gate (r = 0) and up (r = 1) matrices (clamped into range).
template <class X>
struct GateUpSrc {
    const uint8_t *gate, *up;  // the expert's matrices
    size_t gate_row, up_row;
    int64_t f0, F;
    const X* xs[1];
    __device__ const uint8_t* row(int item, int r) const {
        const int64_t f = f0 + item < F ? f0 + item : F - 1;
        return r == 0 ? gate + (size_t)f * gate_row : up + (size_t)f * up_row;
    }
    __device__ const X* x(int, int) const { return xs[0]; }
};

// Grid x: (pair, kGateItems rows f) groups, wg warps each; a warp streams its rows' gate and up rows one
// after the other through its ring (rows of one or two stages would otherwise leave each warp a single round
// trip to memory). C: Codec<T> or DigitCodec<T>.
template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, min_blocks<C, 1>())
    moe_gate_up_kernel(MoeDecodeParams a, int wg, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    static_assert(R == 2, "a warp streams one gate row and one up row at a time");
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ float partial[kWarpsPerBlock][kGateItems][R];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_pair = (a.F + kGateItems - 1) / kGateItems;
    const int64_t group = (int64_t)blockIdx.x * (kWarpsPerBlock / wg) + warp / wg;
    const int split = warp % wg;
    const bool live = group < a.n * a.k * per_pair;
    const int64_t pair = live ? group / per_pair : 0;
    const int64_t f0 = (group % per_pair) * kGateItems;
    if (live) {
        const int e = checked_expert(a.ids, pair, a.n_experts);
        GateUpSrc<X> src;
        src.gate = a.gate + (size_t)e * a.F * a.gate_row;
        src.up = a.up + (size_t)e * a.F * a.up_row;
        src.gate_row = a.gate_row;
        src.up_row = a.up_row;
        src.f0 = f0;
        src.F = a.F;
        src.xs[0] = static_cast<const X*>(a.x) + (pair / a.k) * XOf<C>::row(a.D);
        stream_rows<C, R, 1>(
            src, kGateItems, (int)(a.D / C::kElems), split, wg, 1, ring[warp], lut, [] {},
            [&](int item, const float(&acc)[R][1]) {
                if (lane == 0)
#pragma unroll
                    for (int r = 0; r < R; ++r) partial[warp][item][r] = acc[r][0];
            });
    }
    __syncthreads();
    if (live && split == 0 && lane < kGateItems && f0 + lane < a.F) {
        float gv = partial[warp][lane][0], uv = partial[warp][lane][1];
        for (int w = 1; w < wg; ++w) {
            gv += partial[warp + w][lane][0];
            uv += partial[warp + w][lane][1];
        }
        if (a.clamp > 0) {  // as the swiglu op, then the routing weight (applied before the down projection)
            gv = fminf(gv, a.clamp);
            uv = fminf(fmaxf(uv, -a.clamp), a.clamp);
        }
        const float hv = gv / (1.0f + expf(-gv)) * uv;
        a.h[pair * a.F + f0 + lane] = hv * a.weights[pair];
    }
}

template <int R, class X>
struct DownSrc {
    const uint8_t* down = nullptr;
    size_t expert_bytes = 0, row_bytes = 0;
    int64_t d[R] = {};            // output rows (clamped into range)
    const int* expert = nullptr;  // [item]: expert of the item-th slot in summation order
    const int* pair = nullptr;    // [item]: its (token, slot) pair
    const X* h = nullptr;
    int64_t h_stride = 0;  // in X
    __device__ const uint8_t* row(int item, int r) const {
        return down + (size_t)expert[item] * expert_bytes + (size_t)d[r] * row_bytes;
    }
    __device__ const X* x(int item, int) const { return h + (int64_t)pair[item] * h_stride; }
};

// Grid x: (token, output row pair) groups, wg warps each.
template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, min_blocks<C, 1>())
    moe_down_sum_kernel(MoeDecodeParams a, int wg, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ float partial[kWarpsPerBlock][kMaxSlots][R];
    __shared__ int expert[kWarpsPerBlock][kMaxSlots], pair[kWarpsPerBlock][kMaxSlots];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_token = (a.D + R - 1) / R;
    const int64_t group = (int64_t)blockIdx.x * (kWarpsPerBlock / wg) + warp / wg;
    const int split = warp % wg;
    const bool live = group < a.n * per_token;
    const int64_t token = live ? group / per_token : 0;
    const int64_t d0 = (group % per_token) * R;
    if (live) {
        // Summation order: slot j goes to rank #{slots before it in (expert id, slot) order}.
        if (lane < a.k) {
            const int64_t p = token * a.k + lane;
            const int e = checked_expert(a.ids, p, a.n_experts);
            const int rank = slot_rank(a.ids, token, a.k, lane, e);
            expert[warp][rank] = e;
            pair[warp][rank] = (int)p;
        }
        __syncwarp();
        DownSrc<R, X> src;
        src.down = a.down;
        src.row_bytes = a.down_row;
        src.expert_bytes = (size_t)a.D * a.down_row;
#pragma unroll
        for (int r = 0; r < R; ++r) src.d[r] = d0 + r < a.D ? d0 + r : a.D - 1;
        src.expert = expert[warp];
        src.pair = pair[warp];
        src.h = static_cast<const X*>(a.hq);
        src.h_stride = XOf<C>::row(a.F);
        stream_rows<C, R, 1>(
            src, a.k, (int)(a.F / C::kElems), split, wg, 1, ring[warp], lut, [] {},
            [&](int item, const float(&acc)[R][1]) {
                if (lane == 0)
#pragma unroll
                    for (int r = 0; r < R; ++r) partial[warp][item][r] = acc[r][0];
            });
    }
    __syncthreads();
    if (live && split == 0 && lane < R && d0 + lane < a.D) {
        float total = 0.0f;
        for (int item = 0; item < a.k; ++item) {
            float y = partial[warp][item][lane];
            for (int w = 1; w < wg; ++w) y += partial[warp + w][item][lane];
            total += y;
        }
        a.out[token * a.D + d0 + lane] = total;
    }
}

// Launches streaming kernel K (codec C) over `groups` groups of rows `cols` values long, with wg warps per
// group: split-K only while the groups alone leave the GPU short of warps.
template <auto K, class C>
void launch_groups(int64_t groups, int64_t cols, const MoeDecodeParams& p, const QuantTables& t, cudaStream_t s) {
    constexpr int R = kRowsPerWarp;
    const int64_t n_stages = (cols / C::kElems + Stage<C, R>::kBlocks - 1) / Stage<C, R>::kBlocks;
    int wg = 1;
    while (wg < kWarpsPerBlock && 2 * wg <= n_stages && groups * wg < kTargetWarps) wg *= 2;
    prefer_shared<K>();
    launch_pdl(K, ceil_div(groups * wg, kWarpsPerBlock), kThreads, 0, s, p, wg, t);
}

template <GgmlType T>
bool fits(const Weight& w) {
    using C = Codec<T>;
    return reinterpret_cast<uintptr_t>(w.data) % C::kAlign == 0 && w.row_bytes % C::kAlign == 0 &&
           w.cols % C::kElems == 0;
}

}  // namespace

bool moe_decode_serves(const MoeArgs& a) {
    if (a.n * a.k > kMoeDecodePairs || a.k > kMaxSlots) return false;
    if (a.gate.type != a.up.type || a.gate.row_bytes != a.up.row_bytes) return false;
    if (!aligned16(a.x)) return false;
    bool ok = false;
    dispatch_codec(a.gate.type,
                   [&](auto tag) { ok = fits<decltype(tag)::type>(a.gate) && fits<decltype(tag)::type>(a.up); });
    bool down_ok = false;
    dispatch_codec(a.down.type, [&](auto tag) { down_ok = fits<decltype(tag)::type>(a.down); });
    return ok && down_ok;
}

int moe_xreg_planes(const CudaBackend& b, const MoeArgs& a) {
    return b.gemm_precision() == GemmPrecision::BF16 && a.n >= kTcMinRows ? 2 : 3;
}

void launch_moe_decode(CudaBackend& b, const MoeArgs& a, bool xreg) {
    DSV4_CHECK(moe_decode_serves(a));
    const int64_t D = a.gate.cols, F = a.gate.rows, P = a.n * a.k;
    CudaBackend::Scratch s(b);
    MoeDecodeParams p;
    p.x = a.x;
    p.ids = a.ids;
    p.weights = a.weights;
    p.h = s.get<float>(P * F);  // 256-byte aligned: the down kernel's float4 loads of h rows (F % 8 == 0)
    p.hq = p.h;
    p.out = a.out;
    p.n = a.n;
    p.D = D;
    p.F = F;
    p.k = a.k;
    p.n_experts = (int)a.gate.n_experts;
    p.clamp = a.clamp;
    p.gate = a.gate.data;
    p.up = a.up.data;
    p.down = a.down.data;
    p.gate_row = a.gate.row_bytes;
    p.up_row = a.up.row_bytes;
    p.down_row = a.down.row_bytes;
    DSV4_CHECK(a.up.n_experts == p.n_experts && a.down.n_experts == p.n_experts);

    // The digit codecs (cuda_gemv_digits.cuh) read the activations as digits: x before the first kernel, h
    // between the two.
    const bool gate_digits = has_digit_codec(a.gate.type);
    const bool down_digits = has_digit_codec(a.down.type);
    const int planes = moe_xreg_planes(b, a);  // of the register kernels
    // Gate/up with the token's activation in registers where a LaneCodec serves (it quantizes x itself), else the
    // pipelined kernel (over x's digits for the digit codecs).
    if (xreg && moe_gate_up_xreg_serves(a)) {
        launch_moe_gate_up_xreg(a, p.h, planes, b.tables(), b.stream());
    } else {
        if (gate_digits) {
            XDigits* xq = s.get<XDigits>(a.n * (D / kDigitBlock));
            launch_quantize_digits(xq, a.x, D, a.n, D, b.stream());
            p.x = xq;
        }
        dispatch_codec(a.gate.type, [&](auto tag) {
            constexpr GgmlType T = decltype(tag)::type;
            with_codec<T>(gate_digits, [&](auto codec) {
                using C = decltype(codec);
                launch_groups<moe_gate_up_kernel<T, C>, C>(P * ((F + kGateItems - 1) / kGateItems), D, p, b.tables(),
                                                           b.stream());
            });
        });
    }
    CUDA_CHECK_LAUNCH();
    // Down with h in registers where a LaneCodec serves (it quantizes h itself), else the pipelined kernel.
    if (xreg && moe_down_xreg_serves(a)) {
        launch_moe_down_xreg(a, p.h, planes, b.tables(), b.stream());
    } else {
        if (down_digits) {
            XDigits* hq = s.get<XDigits>(P * (F / kDigitBlock));
            launch_quantize_digits(hq, p.h, F, P, F, b.stream());
            p.hq = hq;
        }
        dispatch_codec(a.down.type, [&](auto tag) {
            constexpr GgmlType T = decltype(tag)::type;
            with_codec<T>(down_digits, [&](auto codec) {
                using C = decltype(codec);
                launch_groups<moe_down_sum_kernel<T, C>, C>(a.n * ((D + kRowsPerWarp - 1) / kRowsPerWarp), F, p,
                                                            b.tables(), b.stream());
            });
        });
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
