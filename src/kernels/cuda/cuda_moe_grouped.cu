// MoE experts for a batch of decoding tokens (8..85 tokens, up to 512 (token, slot) pairs): the pairs are
// grouped by expert on the device and each expert's rows are streamed once for up to kChunk of its pairs, where
// the per-pair kernels of cuda_moe_decode.cu stream them once per pair.
// 1. plan: one block orders the pairs by (expert, pair index) and cuts each expert's pairs into chunks of at
//    most kChunk; the chunk count stays on the device (no host synchronization, so a step graph replays it).
// 2. gate_up: for every chunk and row f of its expert, the gate and up rows are streamed together against the
//    chunk's activations, then the clamped SwiGLU and each pair's routing weight give h[pair, f].
// 3. down: for every chunk and output row d, y[pair, d] = h[pair] . W_down[e][d].
// 4. each token's k rows of y summed in ascending expert id, ties by slot (the CPU's order; moe_sum_pairs).
// The streaming kernels are as many warps as fit on the GPU, each looping over (chunk, rows) groups on its own,
// since how many chunks there are is known only on the device. A pair's sums do not depend on the chunk it
// shares: each activation row is its own accumulator in the codecs' dots.
//
// Chunks hold two pairs: the digit codecs' dots cost about as much per pair as the decode of the weights they
// share, so wider chunks save bytes but few instructions, and their accumulators cost occupancy.
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
constexpr int kChunk = 2;       // pairs of one expert per weight read
constexpr int kGateItems = 8;   // rows f per gate/up group
constexpr int kDownItems = 8;   // row pairs d per down group
// Resident blocks per SM the streaming kernels are compiled for (128 registers): with two pairs' accumulators
// the 2-bit digit codecs spill at 5 blocks (102 registers) and more.
constexpr int kGroupedMinBlocks = 4;

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

// Calls go(std::integral_constant<int, NT>) with NT = m, the chunk's pairs (1 or kChunk).
template <class F>
__device__ __forceinline__ void with_width(int m, F&& go) {
    static_assert(kChunk == 2, "widths 1 and 2");
    if (m == 1)
        go(std::integral_constant<int, 1>{});
    else
        go(std::integral_constant<int, 2>{});
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

// The loop over (chunk, rows) groups shared by both kernels: each warp takes groups warp, warp + all warps, ...
// on its own (no block barriers: a warp streams a whole group, split-K is never needed here since even 8
// tokens make thousands of groups). body(chunk, local) runs the warp's group.
template <class Body>
__device__ __forceinline__ void for_groups(const GroupedParams& a, int64_t per_chunk, Body&& body) {
    const int64_t total = (int64_t)*a.n_chunks * per_chunk;
    const int64_t stride = (int64_t)gridDim.x * kWarpsPerBlock;
    for (int64_t group = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp; group < total; group += stride)
        body(group / per_chunk, group % per_chunk);
}

template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, kGroupedMinBlocks)
    moe_gate_up_grouped_kernel(GroupedParams a, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    static_assert(R == 2, "a warp streams one gate row and one up row at a time");
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_chunk = (a.F + kGateItems - 1) / kGateItems;
    for_groups(a, per_chunk, [&](int64_t chunk, int64_t local) {
        const Chunk ch = a.chunks[chunk];
        GroupGateUpSrc<X> src;
        src.gate = a.gate + (size_t)ch.expert * a.F * a.gate_row;
        src.up = a.up + (size_t)ch.expert * a.F * a.up_row;
        src.gate_row = a.gate_row;
        src.up_row = a.up_row;
        src.f0 = local * kGateItems;
        src.F = a.F;
        int pair[kChunk];
#pragma unroll
        for (int t = 0; t < kChunk; ++t) {
            pair[t] = a.pairs[chunk * kChunk + (t < ch.count ? t : 0)];
            src.xs[t] = static_cast<const X*>(a.x) + (pair[t] / a.k) * XOf<C>::row(a.D);
        }
        with_width(ch.count, [&](auto width) {
            constexpr int NT = decltype(width)::value;
            stream_rows<C, R, NT>(src, kGateItems, (int)(a.D / C::kElems), 0, 1, NT, ring[warp], lut, [] {},
                                  [&](int item, const float(&acc)[R][NT]) {
                                      const int64_t f = src.f0 + item;
                                      if (lane != 0 || f >= a.F) return;
#pragma unroll
                                      for (int t = 0; t < NT; ++t) {
                                          float gv = acc[0][t], uv = acc[1][t];
                                          if (a.clamp > 0) {  // as the swiglu op, then the routing weight
                                              gv = fminf(gv, a.clamp);
                                              uv = fminf(fmaxf(uv, -a.clamp), a.clamp);
                                          }
                                          const float hv = gv / (1.0f + expf(-gv)) * uv;
                                          a.h[(int64_t)pair[t] * a.F + f] = hv * a.weights[pair[t]];
                                      }
                                  });
        });
    });
}

template <GgmlType T, class C>
__global__ void __launch_bounds__(kThreads, kGroupedMinBlocks)
    moe_down_grouped_kernel(GroupedParams a, QuantTables tb) {
    pdl_begin();
    constexpr int R = kRowsPerWarp;
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t per_chunk = (a.D + kDownItems * R - 1) / (kDownItems * R);
    for_groups(a, per_chunk, [&](int64_t chunk, int64_t local) {
        const Chunk ch = a.chunks[chunk];
        GroupDownSrc<X> src;
        src.down = a.down + (size_t)ch.expert * a.D * a.down_row;
        src.row_bytes = a.down_row;
        src.d0 = local * kDownItems * R;
        src.D = a.D;
        int pair[kChunk];
#pragma unroll
        for (int t = 0; t < kChunk; ++t) {
            pair[t] = a.pairs[chunk * kChunk + (t < ch.count ? t : 0)];
            src.hs[t] = static_cast<const X*>(a.hq) + (int64_t)pair[t] * XOf<C>::row(a.F);
        }
        with_width(ch.count, [&](auto width) {
            constexpr int NT = decltype(width)::value;
            stream_rows<C, R, NT>(src, kDownItems, (int)(a.F / C::kElems), 0, 1, NT, ring[warp], lut, [] {},
                                  [&](int item, const float(&acc)[R][NT]) {
                                      if (lane != 0) return;
#pragma unroll
                                      for (int r = 0; r < R; ++r) {
                                          const int64_t d = src.d0 + 2 * item + r;
                                          if (d >= a.D) continue;
#pragma unroll
                                          for (int t = 0; t < NT; ++t) a.y[(int64_t)pair[t] * a.D + d] = acc[r][t];
                                      }
                                  });
        });
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

// Launches streaming kernel K (codec C) over at most `groups` groups: one warp per group, at most the blocks
// that fit on the GPU at once (the warps then loop over the groups).
template <auto K>
void launch_grouped(int64_t groups, const GroupedParams& p, const QuantTables& t, cudaStream_t s) {
    prefer_shared<K>();
    const unsigned blocks = std::min<unsigned>(ceil_div(groups, kWarpsPerBlock), resident_blocks<K>());
    launch_pdl(K, blocks, kThreads, 0, s, p, t);
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
            launch_grouped<moe_gate_up_grouped_kernel<T, Cd>>(C * ((F + kGateItems - 1) / kGateItems), p, b.tables(),
                                                              b.stream());
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
            launch_grouped<moe_down_grouped_kernel<T, Cd>>(
                C * ((D + kDownItems * kRowsPerWarp - 1) / (kDownItems * kRowsPerWarp)), p, b.tables(), b.stream());
        });
    });
    CUDA_CHECK_LAUNCH();
    b.moe_sum_pairs(a.out, p.y, a.ids, a.n, a.k, D);
}

}  // namespace dsv4::cuda
