// MoE experts for a batch of decoding tokens (9..512 (token, slot) pairs): the pairs are grouped by expert on
// the device and each expert's rows are streamed once for up to kChunk of its pairs, where the per-pair kernels
// of cuda_moe_decode.cu stream them once per pair. At 64 streams of V4-Flash (384 pairs over 256 experts, ~200
// of them touched) that is about half the bytes.
// 1. plan: one block orders the pairs by (expert, pair index) and cuts each expert's pairs into chunks of at
//    most kChunk; the chunk count stays on the device (no host synchronization, so a step graph replays it).
// 2. gate_up: for every chunk and row f of its expert, the gate and up rows are streamed together against the
//    chunk's activations, then the clamped SwiGLU and each pair's routing weight give h[pair, f].
// 3. down: for every chunk and output row d, y[pair, d] = h[pair] . W_down[e][d].
// 4. each token's k rows of y summed in ascending expert id, ties by slot (the CPU's order; moe_sum_pairs).
// The two streaming kernels walk their (chunk, rows) groups in a grid-stride loop over a grid sized for the
// GPU, since how many chunks there are is known only on the device. A pair's sums do not depend on which chunk
// it shares or its place in it: each activation row is its own accumulator in the codecs' dots.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;

constexpr int kMaxPairs = 512;  // n * k up to this: one plan block, a thread per pair
constexpr int kChunk = 4;       // pairs of one expert per weight read
constexpr int kGateItems = 4;   // rows f per gate/up group (as cuda_moe_decode.cu)
constexpr int kDownItems = 4;   // row pairs d per down group
constexpr int64_t kTargetWarps = 4096;

// Chunk c: expert e, pairs pair[c * kChunk + 0 .. count).
struct Chunk {
    int expert;
    int count;
};

struct GroupedParams {
    const void* x = nullptr;         // [n, D] floats, or their XDigits for the digit codecs
    const float* weights = nullptr;  // [n * k]
    float* h = nullptr;              // [n * k, F]
    const void* hq = nullptr;        // h as the down codec reads it
    float* y = nullptr;              // [n * k, D]
    const Chunk* chunks = nullptr;   // [max_chunks]
    const int32_t* pairs = nullptr;  // [max_chunks * kChunk]
    const int32_t* n_chunks = nullptr;
    int64_t D = 0, F = 0;
    int k = 0;
    float clamp = 0.0f;
    const uint8_t *gate = nullptr, *up = nullptr, *down = nullptr;
    size_t gate_row = 0, up_row = 0, down_row = 0;  // row bytes
};

// The most chunks P pairs over E experts can make: every chunk holds a pair, and at most one chunk per expert
// is short.
int64_t max_chunks(int64_t P, int E) { return std::min<int64_t>(P, E + P / kChunk); }

// One block, a thread per pair (P <= blockDim.x). A pair's rank among its expert's pairs is the number of
// earlier pairs with the same expert, so the plan is the same on every run.
__global__ void moe_plan_kernel(const int32_t* ids, int P, int n_experts, Chunk* chunks, int32_t* pairs,
                                int32_t* n_chunks) {
    pdl_begin();
    extern __shared__ int plan_smem[];
    int* count = plan_smem;             // [n_experts]
    int* start = plan_smem + n_experts;  // [n_experts]: the expert's first chunk
    __shared__ int sid[kMaxPairs];
    const int p = threadIdx.x;
    for (int e = p; e < n_experts; e += blockDim.x) count[e] = 0;
    int e = -1, rank = 0;
    if (p < P) {
        e = checked_expert(ids, p, n_experts);
        sid[p] = e;
    }
    __syncthreads();
    if (p < P) {
        for (int q = 0; q < p; ++q) rank += sid[q] == e;
        atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (p < kWarp) {  // exclusive scan of the chunks per expert: lane l takes a run of experts
        const int per = (n_experts + kWarp - 1) / kWarp;
        const int e0 = min(p * per, n_experts), e1 = min(e0 + per, n_experts);
        int sum = 0;
        for (int j = e0; j < e1; ++j) sum += (count[j] + kChunk - 1) / kChunk;
        int incl = sum;
        for (int o = 1; o < kWarp; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (p >= o) incl += v;
        }
        int run = incl - sum;
        for (int j = e0; j < e1; ++j) {
            start[j] = run;
            run += (count[j] + kChunk - 1) / kChunk;
        }
        if (p == kWarp - 1) *n_chunks = incl;
    }
    __syncthreads();
    if (p < P) {
        const int c = start[e] + rank / kChunk, slot = rank % kChunk;
        pairs[c * kChunk + slot] = p;
        if (slot == 0) chunks[c] = Chunk{e, min(kChunk, count[e] - rank)};
    }
}

// Resident blocks per SM the kernels are compiled for: four (128 registers) for the integer digit codecs, two
// for the float codecs, whose accumulators for four activation rows spill at 128 registers.
template <class C>
constexpr int grouped_min_blocks() {
    return requires { typename C::X; } ? 4 : 2;
}

// Calls go(std::integral_constant<int, NT>) with NT the accumulator width for m pairs: 1, 2 or kChunk.
template <class F>
__device__ __forceinline__ void with_width(int m, F&& go) {
    static_assert(kChunk == 4, "widths 1, 2, 4");
    if (m == 1)
        go(std::integral_constant<int, 1>{});
    else if (m == 2)
        go(std::integral_constant<int, 2>{});
    else
        go(std::integral_constant<int, 4>{});
}

// Gate/up rows f0 .. f0 + kGateItems of one expert against the chunk's activation rows.
template <class X>
struct GroupGateUpSrc {
    const uint8_t *gate, *up;
    size_t gate_row, up_row;
    int64_t f0, F;
    const X* xs[kChunk];
    __device__ const uint8_t* row(int item, int r) const {
        const int64_t f = f0 + item < F ? f0 + item : F - 1;
        return r == 0 ? gate + (size_t)f * gate_row : up + (size_t)f * up_row;
    }
    __device__ const X* x(int, int t) const { return xs[t]; }
};

// Down rows d0 + 2 item + r of one expert against the chunk's h rows.
template <class X>
struct GroupDownSrc {
    const uint8_t* down;
    size_t row_bytes;
    int64_t d0, D;
    const X* hs[kChunk];
    __device__ const uint8_t* row(int item, int r) const {
        const int64_t d = d0 + 2 * item + r < D ? d0 + 2 * item + r : D - 1;
        return down + (size_t)d * row_bytes;
    }
    __device__ const X* x(int, int t) const { return hs[t]; }
};

// The block-level loop over (chunk, rows) groups shared by both kernels: gpb groups per block, wg warps each;
// every block takes the same number of turns (two barriers per turn). body(chunk, local, live) runs the warp's
// group and leaves its sums in shared memory; finish(chunk, local) combines them.
template <class Body, class Finish>
__device__ __forceinline__ void for_groups(const GroupedParams& a, int64_t per_chunk, int wg, Body&& body,
                                           Finish&& finish) {
    const int warp = threadIdx.x / kWarp;
    const int gpb = kWarpsPerBlock / wg;
    const int64_t total = (int64_t)*a.n_chunks * per_chunk;
    for (int64_t base = (int64_t)blockIdx.x * gpb; base < total; base += (int64_t)gridDim.x * gpb) {
        const int64_t group = base + warp / wg;
        const bool live = group < total;
        const int64_t chunk = live ? group / per_chunk : 0, local = group % per_chunk;
        if (live) body(chunk, local);
        __syncthreads();
        if (live && warp % wg == 0) finish(chunk, local);
        __syncthreads();
    }
}

template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, grouped_min_blocks<C>())
    moe_gate_up_grouped_kernel(GroupedParams a, int wg, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    static_assert(R == 2, "a warp streams one gate row and one up row at a time");
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ float partial[kWarpsPerBlock][kGateItems][R][kChunk];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_chunk = (a.F + kGateItems - 1) / kGateItems;
    for_groups(
        a, per_chunk, wg,
        [&](int64_t chunk, int64_t local) {
            const Chunk ch = a.chunks[chunk];
            GroupGateUpSrc<X> src;
            src.gate = a.gate + (size_t)ch.expert * a.F * a.gate_row;
            src.up = a.up + (size_t)ch.expert * a.F * a.up_row;
            src.gate_row = a.gate_row;
            src.up_row = a.up_row;
            src.f0 = local * kGateItems;
            src.F = a.F;
            for (int t = 0; t < kChunk; ++t) {
                const int p = a.pairs[chunk * kChunk + (t < ch.count ? t : 0)];
                src.xs[t] = static_cast<const X*>(a.x) + (p / a.k) * XOf<C>::row(a.D);
            }
            with_width(ch.count, [&](auto width) {
                constexpr int NT = decltype(width)::value;
                stream_rows<C, R, NT>(
                    src, kGateItems, (int)(a.D / C::kElems), warp % wg, wg, ch.count, ring[warp], lut, [] {},
                    [&](int item, const float(&acc)[R][NT]) {
                        if (lane == 0)
#pragma unroll
                            for (int r = 0; r < R; ++r)
#pragma unroll
                                for (int t = 0; t < NT; ++t) partial[warp][item][r][t] = acc[r][t];
                    });
            });
        },
        [&](int64_t chunk, int64_t local) {
            const Chunk ch = a.chunks[chunk];
            const int item = lane % kGateItems, t = lane / kGateItems;
            const int64_t f = local * kGateItems + item;
            if (t >= ch.count || f >= a.F) return;
            float gv = partial[warp][item][0][t], uv = partial[warp][item][1][t];
            for (int w = 1; w < wg; ++w) {
                gv += partial[warp + w][item][0][t];
                uv += partial[warp + w][item][1][t];
            }
            if (a.clamp > 0) {  // as the swiglu op, then the routing weight (applied before the down projection)
                gv = fminf(gv, a.clamp);
                uv = fminf(fmaxf(uv, -a.clamp), a.clamp);
            }
            const int p = a.pairs[chunk * kChunk + t];
            const float hv = gv / (1.0f + expf(-gv)) * uv;
            a.h[(int64_t)p * a.F + f] = hv * a.weights[p];
        });
}

template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, grouped_min_blocks<C>())
    moe_down_grouped_kernel(GroupedParams a, int wg, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ float partial[kWarpsPerBlock][kDownItems][R][kChunk];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_chunk = (a.D + kDownItems * R - 1) / (kDownItems * R);
    for_groups(
        a, per_chunk, wg,
        [&](int64_t chunk, int64_t local) {
            const Chunk ch = a.chunks[chunk];
            GroupDownSrc<X> src;
            src.down = a.down + (size_t)ch.expert * a.D * a.down_row;
            src.row_bytes = a.down_row;
            src.d0 = local * kDownItems * R;
            src.D = a.D;
            for (int t = 0; t < kChunk; ++t) {
                const int p = a.pairs[chunk * kChunk + (t < ch.count ? t : 0)];
                src.hs[t] = static_cast<const X*>(a.hq) + (int64_t)p * XOf<C>::row(a.F);
            }
            with_width(ch.count, [&](auto width) {
                constexpr int NT = decltype(width)::value;
                stream_rows<C, R, NT>(
                    src, kDownItems, (int)(a.F / C::kElems), warp % wg, wg, ch.count, ring[warp], lut, [] {},
                    [&](int item, const float(&acc)[R][NT]) {
                        if (lane == 0)
#pragma unroll
                            for (int r = 0; r < R; ++r)
#pragma unroll
                                for (int t = 0; t < NT; ++t) partial[warp][item][r][t] = acc[r][t];
                    });
            });
        },
        [&](int64_t chunk, int64_t local) {
            const Chunk ch = a.chunks[chunk];
            // Lane: (item, r, t) of kDownItems * R * kChunk = 32.
            static_assert(kDownItems * kRowsPerWarp * kChunk == kWarp, "a lane per output of the group");
            const int t = lane % kChunk, r = (lane / kChunk) % R, item = lane / (kChunk * R);
            const int64_t d = local * kDownItems * R + 2 * item + r;
            if (t >= ch.count || d >= a.D) return;
            float v = partial[warp][item][r][t];
            for (int w = 1; w < wg; ++w) v += partial[warp + w][item][r][t];
            a.y[(int64_t)a.pairs[chunk * kChunk + t] * a.D + d] = v;
        });
}

// The blocks of kernel K (kThreads each) that fit on the GPU at once.
template <auto K>
unsigned resident_blocks() {
    static const unsigned blocks = [] {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K, kThreads, 0));
        return (unsigned)std::max(1, per_sm) * (unsigned)device_limits().sms;
    }();
    return blocks;
}

// Launches streaming kernel K (codec C) over at most `groups` groups of rows `cols` values long: split-K only
// while the groups alone leave the GPU short of warps, at most the blocks that fit at once.
template <auto K, class C>
void launch_grouped(int64_t groups, int64_t cols, const GroupedParams& p, const QuantTables& t, cudaStream_t s) {
    constexpr int R = kRowsPerWarp;
    const int64_t n_stages = (cols / C::kElems + Stage<C, R>::kBlocks - 1) / Stage<C, R>::kBlocks;
    int wg = 1;
    while (wg < kWarpsPerBlock && 2 * wg <= n_stages && groups * wg < kTargetWarps) wg *= 2;
    prefer_shared<K>();
    const unsigned blocks = std::min<unsigned>(ceil_div(groups * wg, kWarpsPerBlock), resident_blocks<K>());
    launch_pdl(K, blocks, kThreads, 0, s, p, wg, t);
}

// The codec a stack is read with: the digit codec where the format has one (activations quantized first).
template <GgmlType T, class F>
void with_grouped_codec(F&& go) {
    if constexpr (has_digit_codec(T))
        go(DigitCodec<T>{});
    else
        go(Codec<T>{});
}

}  // namespace

bool moe_grouped_serves(const MoeArgs& a) { return moe_decode_serves(a) && a.n * a.k <= kMaxPairs; }

void launch_moe_grouped(CudaBackend& b, const MoeArgs& a) {
    DSV4_CHECK(moe_grouped_serves(a));
    const int64_t D = a.gate.cols, F = a.gate.rows, P = a.n * a.k;
    const int E = (int)a.gate.n_experts;
    DSV4_CHECK(a.up.n_experts == E && a.down.n_experts == E);
    const int64_t C = max_chunks(P, E);
    CudaBackend::Scratch s(b);
    GroupedParams p;
    p.weights = a.weights;
    p.h = s.get<float>(P * F);  // 256-byte aligned rows where F % 8 == 0: the codecs' float4 loads
    p.hq = p.h;
    p.y = s.get<float>(P * D);
    Chunk* chunks = s.get<Chunk>(C);
    int32_t* pairs = s.get<int32_t>(C * kChunk);
    int32_t* n_chunks = s.get<int32_t>(1);
    p.chunks = chunks;
    p.pairs = pairs;
    p.n_chunks = n_chunks;
    p.D = D;
    p.F = F;
    p.k = a.k;
    p.clamp = a.clamp;
    p.gate = a.gate.data;
    p.up = a.up.data;
    p.down = a.down.data;
    p.gate_row = a.gate.row_bytes;
    p.up_row = a.up.row_bytes;
    p.down_row = a.down.row_bytes;

    const size_t smem = 2 * (size_t)E * sizeof(int);
    DSV4_CHECK_MSG(smem <= 32 * 1024, "moe_experts: %d experts exceed the plan kernel's shared memory", E);
    launch_pdl(moe_plan_kernel, 1, kMaxPairs, smem, b.stream(), a.ids, (int)P, E, chunks, pairs, n_chunks);
    CUDA_CHECK_LAUNCH();

    p.x = a.x;
    if (has_digit_codec(a.gate.type)) {
        XDigits* xq = s.get<XDigits>(a.n * (D / kDigitBlock));
        launch_quantize_digits(xq, a.x, D, a.n, D, b.stream());
        p.x = xq;
    }
    dispatch_codec(a.gate.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        with_grouped_codec<T>([&](auto codec) {
            using Cd = decltype(codec);
            launch_grouped<moe_gate_up_grouped_kernel<T, Cd>, Cd>(C * ((F + kGateItems - 1) / kGateItems), D, p,
                                                                  b.tables(), b.stream());
        });
    });
    CUDA_CHECK_LAUNCH();
    if (has_digit_codec(a.down.type)) {
        XDigits* hq = s.get<XDigits>(P * (F / kDigitBlock));
        launch_quantize_digits(hq, p.h, F, P, F, b.stream());
        p.hq = hq;
    }
    dispatch_codec(a.down.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        with_grouped_codec<T>([&](auto codec) {
            using Cd = decltype(codec);
            launch_grouped<moe_down_grouped_kernel<T, Cd>, Cd>(
                C * ((D + kDownItems * kRowsPerWarp - 1) / (kDownItems * kRowsPerWarp)), F, p, b.tables(), b.stream());
        });
    });
    CUDA_CHECK_LAUNCH();
    b.moe_sum_pairs(a.out, p.y, a.ids, a.n, a.k, D);
}

}  // namespace dsv4::cuda
