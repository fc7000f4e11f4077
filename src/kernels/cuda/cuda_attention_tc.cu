// Sparse attention on tensor cores, in the bf16 GEMM mode (GemmPrecision::BF16): prefill chunks and decode.
//
// Why it pays: K = V and every head of a query reads the same KV rows (MQA), so one query's attention is two
// small matrix products, S = Q K^T (heads x entries, over head_dim) and O = P V (heads x head_dim, over
// entries): the f32 kernel (cuda_attention.cu) spends 2 flops per (head, entry, dim) twice on CUDA cores,
// ~37% of a 4096-token V4-Flash prefill chunk. Here they run as bf16 mma.sync (m16n8k16, f32 accumulation),
// the numerics the official model uses; the f32 mode keeps the exact kernel.
//
// Block: one query and a group of up to 64 heads (4 m-tiles of 16; fewer heads: fewer m-tiles), two warps per
// m-tile; where those blocks would leave SMs idle (decode, short chunks) each query's tiles are also split over
// blocks (tc_splits), whose partial results the f32 kernels' merge combines (cuda_attention.cu). Entries go in
// tiles of 32 rows, staged in shared memory as f32 by cp.async (double-buffered: the next
// tile's copies fly while this one is multiplied; skipped entries are zero-filled rows), and Q is kept as bf16
// in shared memory. The two warps of an m-tile each take half of head_dim: partial scores over their half,
// summed through shared memory (a two-warp barrier), then both run the same online softmax on the full scores
// and each accumulates O for its half of the dims (head_dim 512: 16 x 256 f32 accumulators per warp).
// Packed compressed rows (AttentionArgs::comp_packed; the PACKED instances) are copied as their bytes into their
// f32 tile rows and unpacked in place once the copies land, before the barrier that opens the tile to the math
// (cuda_attention_rows.cuh): the tiles, the fragments and the shared memory are the same.
//
// Shared-memory layout: a Q row is head_dim + 16 bf16 and a tile row head_dim + 8 floats, so the fragment loads
// of a warp hit distinct banks; the columns of a score tile are the tile's rows in the order col_entry() gives,
// which keeps the P V operand loads (4 rows x 8 dims per load) conflict-free with the same row stride. The
// order is free: it only decides which entry each score column holds, and P V reads V in the same order.
//
// Errors (against exact f32 attention): q and the KV rows are rounded to bf16 (relative 2^-9 each), so a score
// s carries an absolute error of about |s| 2^-8 / sqrt(terms); the probabilities are rounded to bf16 and both
// the numerator and the denominator use the rounded values, so the output is an exact weighted average of the
// bf16 rows under slightly perturbed weights. tests/backend_ops/cases_attention.cpp derives its bound.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_attention_rows.cuh"
#include "kernels/cuda/cuda_attention_tc.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kTile = 32;      // entries per tile: 4 score n-tiles, 2 P V k-steps
constexpr int kMaxMTiles = 4;  // 64 heads per block
constexpr int kMaxWarps = 2 * kMaxMTiles;

// Row (0..7) of an 8-row group that score column c holds: {0, 2, 1, 3, 6, 4, 7, 5}. With a tile row stride of
// 8 (mod 32) words, the score operand's 16-byte loads of rows col_entry(2p), col_entry(2p + 1) (one phase of 8
// lanes) fall 16 banks apart, and the P V operand's loads of rows col_entry(2t) (or 2t + 1), t = 0..3, cover
// the four bank octets.
__device__ __forceinline__ int col_entry(int c) {
    return (int)((0x57463120u >> (4 * c)) & 15u);
}

__device__ __forceinline__ float bf16_lo(uint32_t v) {
    return __uint_as_float(v << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t v) {
    return __uint_as_float(v & 0xffff0000u);
}

// Barrier of the two warps (64 threads) of m-tile mt; id 0 is __syncthreads'.
__device__ __forceinline__ void pair_barrier(int mt) {
    asm volatile("bar.sync %0, 64;" ::"r"(1 + mt) : "memory");
}

template <int HD>
struct TcLayout {
    static constexpr int kHalf = HD / 2;       // dims per warp of a pair
    static constexpr int kQStride = HD + 16;   // bf16 per Q row
    static constexpr int kRowStride = HD + 8;  // floats per tile row
    static constexpr size_t kTileBytes = (size_t)kTile * kRowStride * sizeof(float);
    static constexpr size_t kXchgBytes = (size_t)kMaxWarps * 16 * kWarp * sizeof(float);
    static size_t smem(int mtiles) { return 2 * kTileBytes + kXchgBytes + (size_t)16 * mtiles * kQStride * 2; }
};

// Block: query qg / groups, heads [h0, h0 + 16 mtiles) with h0 = (qg % groups) 16 mtiles, where qg = blockIdx.x
// (SPLIT: qg = blockIdx.x / splits, the split blockIdx.x % splits); 64 mtiles threads. PACKED: a.comp_packed.
// SPLIT (decode): the block takes its split's share of the query's entries, whole tiles of them (a query uses as
// many splits as it has tiles, at most `splits`; the others write an empty partial), and writes the partial
// running max, denominator and unnormalized output of each head, part_o only where the split had a valid entry,
// in the layout attention_merge_kernel reads (cuda_attention.cu).
template <int HD, bool PACKED, bool SPLIT = false>
__global__ void __launch_bounds__(kMaxWarps* kWarp, 1) attention_tc_kernel(AttentionArgs a, int groups, int splits,
                                                                           float2* part_ml, float* part_o) {
    pdl_begin();
    using L = TcLayout<HD>;
    constexpr int kHalf = L::kHalf, kRs = L::kRowStride, kQs = L::kQStride;
    constexpr int kKSteps = kHalf / 16;  // score k-steps per warp
    constexpr int kNTiles = kHalf / 8;   // output n-tiles per warp
    extern __shared__ __align__(16) unsigned char smem[];
    float* tiles = reinterpret_cast<float*>(smem);  // [2][kTile][kRs]
    float* xchg = tiles + 2 * kTile * kRs;          // [warp][16][kWarp] partial scores
    __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(xchg + kMaxWarps * 16 * kWarp);  // [16 mtiles][kQs]

    const int H = a.n_heads;
    const int n_warps = blockDim.x / kWarp, G = 8 * n_warps;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int mt = warp / 2, half = warp % 2, g = lane / 4, t = lane % 4;
    const int split = SPLIT ? (int)(blockIdx.x % (unsigned)splits) : 0;
    const int64_t qg = SPLIT ? blockIdx.x / (unsigned)splits : blockIdx.x;
    const int64_t i = qg / groups;
    const int h0 = (int)(qg % groups) * G;

    const int total = entry_count(a, i);
    int begin = 0, end = total;
    if constexpr (SPLIT) {
        const int tiles = (total + kTile - 1) / kTile;
        const int used = max(1, min(splits, tiles));
        const int per = (tiles + used - 1) / used * kTile;
        begin = (int)min((int64_t)total, (int64_t)split * per);
        end = min(total, begin + per);
        if (begin >= end) {  // a split this query does not use: an empty partial, without staging Q
            for (int r = threadIdx.x; r < G; r += blockDim.x)
                if (h0 + r < H) part_ml[(i * splits + split) * H + h0 + r] = make_float2(-INFINITY, 0.0f);
            return;
        }
    }

    // Q of the block's heads as bf16 (heads past H: zeros, computed on and never written).
    for (int idx = threadIdx.x; idx < G * (HD / 4); idx += blockDim.x) {
        const int r = idx / (HD / 4), c = idx % (HD / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (h0 + r < H) v = *reinterpret_cast<const float4*>(a.q + (i * H + h0 + r) * HD + 4 * c);
        *reinterpret_cast<uint2*>(qs + r * kQs + 4 * c) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }

    // Every warp resolves the tile's 32 entries itself (lane r: entry r), so the valid mask is a ballot
    // identical in all warps; a warp copies rows warp, warp + n_warps, ... of a tile.
    auto load_tile = [&](int buf, const float* row, unsigned valid) {
        float* dst = tiles + buf * kTile * kRs;
        for (int r = warp; r < kTile; r += n_warps) {
            const float* src = (const float*)__shfl_sync(0xffffffffu, (unsigned long long)row, r);
            const bool ok = valid >> r & 1;
            for (int c = lane; c < HD / 4; c += kWarp)
                cp_async16_zfill(dst + r * kRs + 4 * c, ok ? src + 4 * c : a.q, ok);
        }
    };
    // load_tile in the PACKED instances: the rows of `packed` (the tile's valid compressed rows) are packed rows,
    // staged for unpack_rows, which then takes the same rows in the same warps.
    PackedRows pk{};
    if constexpr (PACKED) pk = packed_rows(a, true);
    auto load_tile_packed = [&](int buf, const float* row, unsigned valid, unsigned packed) {
        float* dst = tiles + buf * kTile * kRs;
        for (int r = warp; r < kTile; r += n_warps) {
            const float* src = (const float*)__shfl_sync(0xffffffffu, (unsigned long long)row, r);
            if (packed >> r & 1) {
                stage_packed_row(dst + r * kRs, src, pk, lane);
                continue;
            }
            const bool ok = valid >> r & 1;
            for (int c = lane; c < HD / 4; c += kWarp)
                cp_async16_zfill(dst + r * kRs + 4 * c, ok ? src + 4 * c : a.q, ok);
        }
    };

    float o[kNTiles][4];  // rows g, g + 8 of the m-tile; dims half kHalf + 8 nt + 2t (+1)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};

    const float* row = entry_row<PACKED>(a, i, begin + lane, end);
    unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
    if constexpr (PACKED)
        load_tile_packed(0, row, valid, valid & comp_lanes(a, begin));
    else
        load_tile(0, row, valid);
    cp_async_commit();
    row = entry_row<PACKED>(a, i, begin + kTile + lane, end);
    for (int base = begin, it = 0; base < end; base += kTile, ++it) {
        const unsigned next_valid = __ballot_sync(0xffffffffu, row != nullptr);
        __syncthreads();  // every warp is done with tile it - 1, whose buffer the next copies refill
        if constexpr (PACKED) {
            if (base + kTile < end)
                load_tile_packed((it + 1) & 1, row, next_valid, next_valid & comp_lanes(a, base + kTile));
        } else {
            if (base + kTile < end) load_tile((it + 1) & 1, row, next_valid);
        }
        cp_async_commit();
        row = entry_row<PACKED>(a, i, base + 2 * kTile + lane, end);
        cp_async_wait<1>();
        if constexpr (PACKED)  // tile it's packed rows, each by the warp that staged it, once its copies landed
            unpack_rows<(HD + 127) / 128, true>(tiles + (it & 1) * kTile * kRs, kRs, valid & comp_lanes(a, base), pk,
                                                warp, n_warps, lane);
        __syncthreads();  // tile it (and, on the first pass, Q) is in shared memory
        const unsigned cur = valid;
        valid = next_valid;
        if (cur == 0) continue;  // the same in every warp
        const float* tile = tiles + (it & 1) * kTile * kRs;

        // Partial scores over this warp's half of the dims. Lane t takes dims 4t..4t+3 of each 16-dim step in
        // both operands (any fixed pairing of A's and B's k is the same dot product).
        float s[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        const __nv_bfloat16* qa = qs + (mt * 16 + g) * kQs + half * kHalf + 4 * t;
        const float* kb = tile + half * kHalf + 4 * t;
#pragma unroll 4
        for (int ks = 0; ks < kKSteps; ++ks) {
            const uint2 q0 = *reinterpret_cast<const uint2*>(qa + 16 * ks);
            const uint2 q1 = *reinterpret_cast<const uint2*>(qa + 8 * kQs + 16 * ks);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float4 k = *reinterpret_cast<const float4*>(kb + (8 * j + col_entry(g)) * kRs + 16 * ks);
                mma_bf16(s[j], q0.x, q1.x, q0.y, q1.y, pack_bf16(k.x, k.y), pack_bf16(k.z, k.w));
            }
        }
        // The pair's halves, summed (a + b == b + a, so both warps hold the same scores).
        float* mine = xchg + warp * 16 * kWarp;
        const float* other = xchg + (warp ^ 1) * 16 * kWarp;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) mine[(4 * j + e) * kWarp + lane] = s[j][e];
        pair_barrier(mt);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] += other[(4 * j + e) * kWarp + lane];

        // Online softmax over the tile: s[j][e] is row g + 8 (e / 2), column 2t + e % 2 of score tile j. The
        // tile has a valid entry, so every row's max is finite (on the first one alpha = exp(-inf) = 0).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const bool ok = cur >> (8 * j + col_entry(2 * t + (e & 1))) & 1;
                s[j][e] = ok ? s[j][e] * a.scale : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_r[r], mx[r]);
            alpha[r] = expf(m_r[r] - m_new);
            m_r[r] = m_new;
            l_r[r] *= alpha[r];
        }
        // Probabilities rounded to bf16 (the P V operand); the denominator sums the same rounded values.
        uint32_t p[4][2];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                p[j][r] = pack_bf16(expf(s[j][2 * r] - m_r[r]), expf(s[j][2 * r + 1] - m_r[r]));
                l_r[r] += bf16_lo(p[j][r]) + bf16_hi(p[j][r]);
            }
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
            o[nt][0] *= alpha[0];
            o[nt][1] *= alpha[0];
            o[nt][2] *= alpha[1];
            o[nt][3] *= alpha[1];
        }

        // O += P V over this warp's dims. k-step kk of P V is score tiles 2kk (k < 8) and 2kk + 1 (k >= 8), so
        // its k = 2t, 2t + 1 are entries 16kk + col_entry(2t), 16kk + col_entry(2t + 1), and k + 8 those + 8.
        const float* vb = tile + half * kHalf + g;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            const float* r0 = vb + (16 * kk + col_entry(2 * t)) * kRs;
            const float* r1 = vb + (16 * kk + col_entry(2 * t + 1)) * kRs;
            const float* r2 = r0 + 8 * kRs;
            const float* r3 = r1 + 8 * kRs;
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
                mma_bf16(o[nt], p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1],
                         pack_bf16(r0[8 * nt], r1[8 * nt]), pack_bf16(r2[8 * nt], r3[8 * nt]));
        }
    }
    cp_async_wait<0>();

    // Each lane holds a quarter of its rows' denominators; the sink joins at the row max (the CPU's rule); a
    // query without a valid entry gets zeros.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 1);
        l_r[r] += __shfl_xor_sync(0xffffffffu, l_r[r], 2);
        const int h = h0 + mt * 16 + g + 8 * r;
        if (h >= H) continue;
        if constexpr (SPLIT) {
            const int64_t slot = (i * splits + split) * H + h;
            if (half == 0 && t == 0) part_ml[slot] = make_float2(m_r[r], l_r[r]);
            if (m_r[r] == -INFINITY) continue;
            float* dst = part_o + slot * HD + half * kHalf + 2 * t;
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
                *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
            continue;
        }
        float inv = 0.0f;
        if (m_r[r] != -INFINITY) inv = 1.0f / (l_r[r] + (a.sinks ? expf(a.sinks[h] - m_r[r]) : 0.0f));
        float* dst = a.out + (i * H + h) * HD + half * kHalf + 2 * t;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
            *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    }
}

template <int HD>
struct TcLaunch {
    int mtiles, groups;
    size_t smem;
    explicit TcLaunch(const AttentionArgs& a)
        : mtiles((int)std::min<int64_t>(kMaxMTiles, (a.n_heads + 15) / 16)),
          groups((a.n_heads + 16 * mtiles - 1) / (16 * mtiles)),
          smem(TcLayout<HD>::smem(mtiles)) {}
    bool fits(const CudaBackend& b, const AttentionArgs& a) const {
        return smem <= (size_t)b.props().sharedMemPerBlockOptin && a.n * groups * kAttentionMaxSplits <= INT32_MAX;
    }
};

// Splits of each query's entries, so that the blocks fill the SMs once: none where the (query, head group) blocks
// already do (prefill chunks). Up to kAttentionDecodeQueries queries are shaped as one query (as the f32 kernel
// does, so that a token's output does not depend on the step it ran in): where the entry count is counted on the
// device (an HCA layer's every compressed entry, growing under one step graph), kAttentionMaxSplits, of which each
// query uses as many as it has tiles. Otherwise as many as fill the SMs, at most one a tile where the count is known
// here (an index list, the window).
int tc_splits(const CudaBackend& b, const AttentionArgs& a, int groups) {
    const int64_t sms = b.props().multiProcessorCount;
    const int64_t nq = a.n <= kAttentionDecodeQueries ? 1 : a.n, blocks = nq * groups;
    if (blocks >= sms) return 1;
    int64_t s = std::min<int64_t>((sms + blocks - 1) / blocks, kAttentionMaxSplits);
    if (a.kv_comp && !a.comp_idx) {
        if (nq == 1) s = kAttentionMaxSplits;
    } else {
        const int64_t entries = a.n_win + (a.kv_comp ? a.n_comp : 0);
        s = std::min<int64_t>(s, (entries + kTile - 1) / kTile);
    }
    return (int)std::max<int64_t>(s, 1);
}

// One split: the kernel writes out itself, no partials (as attention_f32). Returns whether the splits were merged.
template <int HD>
bool launch_tc(CudaBackend& b, const AttentionArgs& a) {
    const TcLaunch<HD> l(a);
    const int splits = tc_splits(b, a, l.groups);
    const auto kernel = splits > 1 ? (a.comp_packed ? attention_tc_kernel<HD, true, true>
                                                    : attention_tc_kernel<HD, false, true>)
                                   : (a.comp_packed ? attention_tc_kernel<HD, true> : attention_tc_kernel<HD, false>);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)l.smem));
    CudaBackend::Scratch s(b);
    float2* part_ml = nullptr;
    float* part_o = nullptr;
    if (splits > 1) {
        const int64_t slots = a.n * splits * a.n_heads;
        part_ml = s.get<float2>(slots);
        part_o = s.get<float>(slots * HD);
    }
    launch_pdl(kernel, (unsigned)(a.n * l.groups * splits), 2 * l.mtiles * kWarp, l.smem, b.stream(), a, l.groups,
               splits, part_ml, part_o);
    CUDA_CHECK_LAUNCH();
    if (splits == 1) return false;
    merge_attention_splits(b, a, splits, part_ml, part_o);
    return true;
}

// Calls f with the head_dim as a template constant; false for a head_dim without a kernel.
template <class F>
bool with_head_dim(int head_dim, F&& f) {
    switch (head_dim) {
        case 64:
            f(std::integral_constant<int, 64>{});
            return true;
        case 128:
            f(std::integral_constant<int, 128>{});
            return true;
        case 256:
            f(std::integral_constant<int, 256>{});
            return true;
        case 512:
            f(std::integral_constant<int, 512>{});
            return true;
        default:
            return false;  // the f32 kernel takes any other head_dim
    }
}

}  // namespace

bool attention_tc_serves(const CudaBackend& b, const AttentionArgs& a) {
    // The tile kernel shares each KV tile between a block's queries: per-query sources are the f32 kernel's.
    if (b.gemm_precision() != GemmPrecision::BF16 || a.n <= 0 || a.n_heads <= 0 || !rows_aligned16(a) ||
        a.kv_win_rows || a.kv_comp_rows)
        return false;
    bool fits = false;
    const bool has = with_head_dim(a.head_dim, [&](auto hd) { fits = TcLaunch<decltype(hd)::value>(a).fits(b, a); });
    return has && fits;
}

bool launch_attention_tc(CudaBackend& b, const AttentionArgs& a) {
    DSV4_CHECK(attention_tc_serves(b, a));
    bool merged = false;
    with_head_dim(a.head_dim, [&](auto hd) { merged = launch_tc<decltype(hd)::value>(b, a); });
    return merged;
}

}  // namespace dsv4::cuda
