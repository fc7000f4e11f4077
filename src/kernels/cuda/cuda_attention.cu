// CUDA sparse attention with sinks over per-query KV index lists. K = V and one KV row serves every head of
// its query (MQA), so the unit of work is a group of heads of one query, not a (query, head) pair: a block
// of kWarps warps takes kWarps * HPW heads (HPW = 1, 2 or 4 heads per warp, see attention()) and each KV row
// it gathers is read from global memory once for all of them.
//
// Entries go in tiles of 32 (= lanes). A tile's rows are copied into shared memory with cp.async (16-byte
// copies when head_dim % 4 == 0 and every pointer is 16-byte aligned, 4-byte otherwise: head_dim 83), so no
// registers hold data in transit; each warp then runs its HPW heads over the tile with an online softmax.
// A lane keeps its heads' q slice and output accumulators in registers (lanes over dims: 4 consecutive
// dims per 128 in the 16-byte layout, one per 32 in the scalar one), so a row's dot product is a partial
// per lane. The 32 rows' partials are summed with a transposing butterfly (reduce-scatter, 31 shuffles per
// tile instead of 5 per row) that leaves each lane the full score of one row, row_of_lane(lane); the tile's
// max and sum are then warp reductions, and the PV update broadcasts each row's weight from its lane.
// Skipped (-1) entries and the tail past the last entry are bits cleared in the tile's ballot mask, which
// is the same in every warp, so skipping them is a uniform branch and their shared rows are never read.
// Packed compressed rows (AttentionArgs::comp_packed; the PACKED instances) are copied as their bytes into
// their f32 tile rows and unpacked in place once the copies land (cuda_attention_rows.cuh), before the barrier
// that precedes the math: the math reads f32 rows either way, and the shared memory is the same.
//
// Few queries (decode) give too few blocks to fill the GPU, so each query's entries are also split over
// `splits` blocks (flash-decoding): a block writes its partial running max, denominator and unnormalized
// output per head to scratch and attention_merge_kernel combines the splits, adds the sink and normalizes.
// With one split (prefill) the block finishes the output itself. The sink joins the denominator only, at
// the max of the scores (the CPU's rule); a query with no valid entry gets zeros.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_attention_rows.cuh"
#include "kernels/cuda/cuda_attention_tc.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_select.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kTile = kWarp;          // entries per tile: the butterfly leaves one row's score per lane
constexpr int kMaxHeadDim = 1024;     // 32 values per lane per head
constexpr int kMaxSplits = kAttentionMaxSplits;
constexpr int kMinSplitEntries = 16;  // fewer entries per split would be mostly fixed cost
constexpr int kDeepEntries = 2048;    // from this many entries an HCA layer's decode takes four heads a warp
constexpr int64_t kDecodeQueries = kAttentionDecodeQueries;  // one query's shape (see attention_f32)
constexpr int kMergeThreads = 128;

// A lane's NE values of a head_dim vector (dims past hd read as 0, never touched): with VEC, value e is dim
// 128 (e / 4) + 4 lane + e % 4, so a warp reads 512 contiguous bytes per float4; otherwise dim 32 e + lane.
template <int NE, bool VEC>
__device__ __forceinline__ void load_slice(float (&x)[NE], const float* v, int lane, int hd) {
    if constexpr (VEC) {
#pragma unroll
        for (int j = 0; j < NE / 4; ++j) {
            const int d = 128 * j + 4 * lane;
            const float4 t = d < hd ? *reinterpret_cast<const float4*>(v + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            x[4 * j] = t.x;
            x[4 * j + 1] = t.y;
            x[4 * j + 2] = t.z;
            x[4 * j + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < NE; ++e) {
            const int d = 32 * e + lane;
            x[e] = d < hd ? v[d] : 0.0f;
        }
    }
}

template <int NE, bool VEC>
__device__ __forceinline__ void store_slice(float* v, const float (&x)[NE], float scale, int lane, int hd) {
    if constexpr (VEC) {
#pragma unroll
        for (int j = 0; j < NE / 4; ++j) {
            const int d = 128 * j + 4 * lane;
            if (d < hd)
                *reinterpret_cast<float4*>(v + d) =
                    make_float4(x[4 * j] * scale, x[4 * j + 1] * scale, x[4 * j + 2] * scale, x[4 * j + 3] * scale);
        }
    } else {
#pragma unroll
        for (int e = 0; e < NE; ++e) {
            const int d = 32 * e + lane;
            if (d < hd) v[d] = x[e] * scale;
        }
    }
}

// store_slice with the output's inverse RoPE (AttentionArgs::out_rope at position pos) on the scaled values of the
// last rope_dim dims. head_dim - rope_dim is even (CudaBackend::attention sees to it): in the 16-byte layout a pair
// is in one float4 (rope_float4); in the scalar one it is dim 32 e + lane of two neighbouring lanes (rope_lanes,
// whose shuffle every lane takes part in: the caller's branches around it are warp-uniform).
template <int NE, bool VEC>
__device__ __forceinline__ void store_slice_rope(float* v, const float (&x)[NE], float scale, int lane, int hd,
                                                 const RopeParams& r, int32_t pos) {
    const int off = hd - r.rope_dim;
    if constexpr (VEC) {
#pragma unroll
        for (int j = 0; j < NE / 4; ++j) {
            const int d = 128 * j + 4 * lane;
            if (d >= hd) continue;
            float4 o = make_float4(x[4 * j] * scale, x[4 * j + 1] * scale, x[4 * j + 2] * scale, x[4 * j + 3] * scale);
            rope_float4(o, d, off, pos, r.freqs, true);
            *reinterpret_cast<float4*>(v + d) = o;
        }
    } else {
#pragma unroll
        for (int e = 0; e < NE; ++e) {
            const int d = 32 * e + lane;
            const float o = rope_lanes(x[e] * scale, d, off, hd, pos, r.freqs, true);
            if (d < hd) v[d] = o;
        }
    }
}

// First half of the tile's butterfly. v[k] is this lane's partial dot of row 8c + k of chunk c; each step
// keeps half of the values (the rows named by one more bit of the lane) and adds the partner's copy of
// them. Returns row 8c + (lane >> 2), summed over the 8 lanes that differ in bits 2..4.
__device__ __forceinline__ float reduce_chunk(const float (&v)[8], int lane) {
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float w[4], u[2];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        w[j] = (b4 ? v[4 + j] : v[j]) + __shfl_xor_sync(0xffffffffu, b4 ? v[j] : v[4 + j], 16);
#pragma unroll
    for (int j = 0; j < 2; ++j)
        u[j] = (b3 ? w[2 + j] : w[j]) + __shfl_xor_sync(0xffffffffu, b3 ? w[j] : w[2 + j], 8);
    return (b2 ? u[1] : u[0]) + __shfl_xor_sync(0xffffffffu, b2 ? u[0] : u[1], 4);
}

// Second half: r[c] from reduce_chunk for the 4 chunks; scatters the chunks over lane bits 0..1, so the
// lane ends with the full sum of row row_of_lane(lane).
__device__ __forceinline__ float reduce_chunks(const float (&r)[4], int lane) {
    const bool b1 = lane & 2, b0 = lane & 1;
    float y[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
        y[j] = (b1 ? r[2 + j] : r[j]) + __shfl_xor_sync(0xffffffffu, b1 ? r[j] : r[2 + j], 2);
    return (b0 ? y[1] : y[0]) + __shfl_xor_sync(0xffffffffu, b0 ? y[0] : y[1], 1);
}

__device__ __forceinline__ int row_of_lane(int lane) { return 8 * (lane & 3) + (lane >> 2); }
__host__ __device__ constexpr int lane_of_row(int r) { return 4 * (r & 7) + (r >> 3); }

// Copies a tile's valid rows (row: lane r's entry, from entry_row) into dst [kTile][hd] by cp.async; warp w takes
// rows w, w + kWarps, ... Not committed.
template <bool VEC>
__device__ __forceinline__ void stage_rows(float* dst_tile, const float* row, unsigned valid, int warp, int lane,
                                           int hd) {
    for (int r = warp; r < kTile; r += kWarps) {
        const float* src = (const float*)__shfl_sync(0xffffffffu, (unsigned long long)row, r);
        if (valid >> r & 1) {
            float* dst = dst_tile + r * hd;
            if constexpr (VEC) {
                for (int c = 4 * lane; c < hd; c += 4 * kWarp) cp_async16(dst + c, src + c);
            } else {
                for (int c = lane; c < hd; c += kWarp) cp_async4(dst + c, src + c);
            }
        }
    }
}

// stage_rows in the PACKED instances: the rows of `packed` (valid compressed rows) are packed rows, staged for
// unpack_rows (p), which then takes the same rows in the same warps. Not committed.
template <bool VEC>
__device__ __forceinline__ void stage_rows_packed(float* dst_tile, const float* row, unsigned valid, unsigned packed,
                                                  const PackedRows& p, int warp, int lane, int hd) {
    for (int r = warp; r < kTile; r += kWarps) {
        const float* src = (const float*)__shfl_sync(0xffffffffu, (unsigned long long)row, r);
        if (!(valid >> r & 1)) continue;
        float* dst = dst_tile + r * hd;
        if (packed >> r & 1) {
            stage_packed_row(dst, src, p, lane);
        } else if constexpr (VEC) {
            for (int c = 4 * lane; c < hd; c += 4 * kWarp) cp_async16(dst + c, src + c);
        } else {
            for (int c = lane; c < hd; c += kWarp) cp_async4(dst + c, src + c);
        }
    }
}

// Block (query i, head group g, split): heads g G + warp + kWarps k (k < HPW, G = kWarps HPW) over the
// split's share of the query's entries. splits == 1: writes out; otherwise the partial (m, l) and the
// unnormalized output of each head, part_o only where the split had a valid entry (m finite).
// DB: two tile buffers, the next tile's copies in flight during this tile's math (deep calls of one block an SM).
// PACKED: a.comp_packed (its compressed rows are packed rows, unpacked in the tile; see the top).
template <int NE, int HPW, bool VEC, bool DB = false, bool PACKED = false>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a, int splits, float2* part_ml,
                                                             float* part_o, int gate) {
    pdl_begin();
    extern __shared__ __align__(16) float tile[];  // [DB ? 2 : 1][kTile][head_dim]
    const int H = a.n_heads, hd = a.head_dim;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    constexpr int G = kWarps * HPW;
    const int n_groups = (H + G - 1) / G;
    const int split = (int)(blockIdx.x % (unsigned)splits);
    const int64_t qg = blockIdx.x / (unsigned)splits;
    const int64_t i = qg / n_groups;
    const int g = (int)(qg % n_groups);

    int h[HPW];
#pragma unroll
    for (int k = 0; k < HPW; ++k) h[k] = g * G + warp + kWarps * k;
    const bool active = h[0] < H;  // h[0] is the warp's lowest head

    // Splits past what the query's entries need (kMinSplitEntries each; with comp_count the count is only known
    // here) get no entries and write an empty partial.
    const int total = entry_count(a, i);
    // gate > 0: only the queries of at least gate entries; gate < 0: only those of fewer than -gate (attention_f32).
    if (gate > 0 ? total < gate : gate < 0 && total >= -gate) return;
    const int used = max(1, min(splits, (total + kMinSplitEntries - 1) / kMinSplitEntries));
    const int per = (total + used - 1) / used;
    const int begin = (int)min((int64_t)total, (int64_t)split * per);
    const int end = min(total, begin + per);

    // Heads past H compute on q = 0 and are never written.
    float q[HPW][NE], acc[HPW][NE], m[HPW], l[HPW];
#pragma unroll
    for (int k = 0; k < HPW; ++k) {
        if (h[k] < H) {
            load_slice<NE, VEC>(q[k], a.q + (i * H + h[k]) * hd, lane, hd);
        } else {
#pragma unroll
            for (int e = 0; e < NE; ++e) q[k][e] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < NE; ++e) acc[k][e] = 0.0f;
        m[k] = -INFINITY;
        l[k] = 0.0f;
    }

    const int my_row = row_of_lane(lane);
    // One tile's math (cur: its rows in shared memory, cur_valid: which of them are entries).
    auto tile_math = [&](const float* cur, unsigned cur_valid) {
        // Scores: chunks of 8 rows keep the partials at 8 per head; one row's slice serves all HPW heads. The
        // chunk loop stays rolled (its result lands in rc by selects, not a run-time register index): unrolled,
        // the kernel's code outgrew the instruction cache and "no instruction" was its main stall (189 KB of
        // SASS for the decode instance).
        float sc[HPW];
        {
            float rc[HPW][4];
#pragma unroll 1
            for (int c = 0; c < 4; ++c) {
                float v[HPW][8];
#pragma unroll
                for (int k = 0; k < 8; ++k) {
#pragma unroll
                    for (int hh = 0; hh < HPW; ++hh) v[hh][k] = 0.0f;
                    if (cur_valid >> (8 * c + k) & 1) {
                        float x[NE];
                        load_slice<NE, VEC>(x, cur + (8 * c + k) * hd, lane, hd);
#pragma unroll
                        for (int hh = 0; hh < HPW; ++hh)
#pragma unroll
                            for (int e = 0; e < NE; ++e) v[hh][k] = fmaf(q[hh][e], x[e], v[hh][k]);
                    }
                }
#pragma unroll
                for (int hh = 0; hh < HPW; ++hh) {
                    const float r = reduce_chunk(v[hh], lane);
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc) rc[hh][cc] = c == cc ? r : rc[hh][cc];
                }
            }
#pragma unroll
            for (int hh = 0; hh < HPW; ++hh) sc[hh] = reduce_chunks(rc[hh], lane);
        }

        // Online softmax: the tile has a valid row, so its max is finite; on the first valid tile m = -inf
        // and alpha = exp(-inf) = 0 clears the (zero) state.
        const bool mine = cur_valid >> my_row & 1;
        float p[HPW];
#pragma unroll
        for (int hh = 0; hh < HPW; ++hh) {
            const float s = mine ? sc[hh] * a.scale : -INFINITY;
            const float m_new = fmaxf(m[hh], warp_max(s));
            const float alpha = expf(m[hh] - m_new);
            p[hh] = mine ? expf(s - m_new) : 0.0f;
            l[hh] = l[hh] * alpha + warp_sum(p[hh]);
            m[hh] = m_new;
#pragma unroll
            for (int e = 0; e < NE; ++e) acc[hh][e] *= alpha;
        }

#pragma unroll 4
        for (int r = 0; r < kTile; ++r) {
            if (cur_valid >> r & 1) {
                float x[NE], pr[HPW];
#pragma unroll
                for (int hh = 0; hh < HPW; ++hh) pr[hh] = __shfl_sync(0xffffffffu, p[hh], lane_of_row(r));
                load_slice<NE, VEC>(x, cur + r * hd, lane, hd);
#pragma unroll
                for (int hh = 0; hh < HPW; ++hh)
#pragma unroll
                    for (int e = 0; e < NE; ++e) acc[hh][e] = fmaf(pr[hh], x[e], acc[hh][e]);
            }
        }
    };

    // Every warp resolves the tile's 32 entries itself (lane r: entry r), so the valid mask is a ballot in
    // a register, identical in all warps, and no shared memory or barrier is needed to publish it. The next
    // tile's entries are resolved before this tile's math, which hides the index loads behind it.
    // PACKED: a tile's packed rows are its valid compressed ones (valid & comp_lanes), each unpacked by the warp
    // that staged it, after that warp's copies landed and before the barrier that opens the tile to every warp's
    // math. (The f32 instances keep their calls of stage_rows as they were, so their machine code is unchanged.)
    PackedRows pk{};
    if constexpr (PACKED) pk = packed_rows(a, VEC);
    const float* row = entry_row<PACKED>(a, i, begin + lane, end);
    if constexpr (DB) {  // tile 0 into buffer 0; tile t + 1's copies then fly during tile t's math
        unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
        if (begin < end) {
            if constexpr (PACKED)
                stage_rows_packed<VEC>(tile, row, valid, valid & comp_lanes(a, begin), pk, warp, lane, hd);
            else
                stage_rows<VEC>(tile, row, valid, warp, lane, hd);
        }
        cp_async_commit();
        for (int base = begin, t = 0; base < end; base += kTile, ++t) {
            const float* next = entry_row<PACKED>(a, i, base + kTile + lane, end);
            const unsigned next_valid = __ballot_sync(0xffffffffu, next != nullptr);
            __syncthreads();  // every warp is done with the other buffer (tile t - 1's math)
            if constexpr (PACKED) {
                if (next_valid)
                    stage_rows_packed<VEC>(tile + ((t + 1) & 1) * kTile * hd, next, next_valid,
                                           next_valid & comp_lanes(a, base + kTile), pk, warp, lane, hd);
            } else {
                if (next_valid) stage_rows<VEC>(tile + ((t + 1) & 1) * kTile * hd, next, next_valid, warp, lane, hd);
            }
            cp_async_commit();
            cp_async_wait<1>();  // tile t's copies landed
            if constexpr (PACKED)
                unpack_rows<NE / 4, VEC>(tile + (t & 1) * kTile * hd, hd, valid & comp_lanes(a, base), pk, warp,
                                         kWarps, lane);
            __syncthreads();
            if (active && valid) tile_math(tile + (t & 1) * kTile * hd, valid);
            valid = next_valid;
        }
    } else {
        for (int base = begin; base < end; base += kTile) {
            const unsigned valid = __ballot_sync(0xffffffffu, row != nullptr);
            const float* next = entry_row<PACKED>(a, i, base + kTile + lane, end);
            if (valid == 0) {  // the same in every warp, so the whole block skips the barriers together
                row = next;
                continue;
            }
            __syncthreads();  // every warp is done reading the previous tile
            if constexpr (PACKED)
                stage_rows_packed<VEC>(tile, row, valid, valid & comp_lanes(a, base), pk, warp, lane, hd);
            else
                stage_rows<VEC>(tile, row, valid, warp, lane, hd);
            cp_async_wait_all();
            if constexpr (PACKED)
                unpack_rows<NE / 4, VEC>(tile, hd, valid & comp_lanes(a, base), pk, warp, kWarps, lane);
            __syncthreads();
            row = next;
            if (active) tile_math(tile, valid);
        }
    }

#pragma unroll
    for (int hh = 0; hh < HPW; ++hh) {
        if (h[hh] >= H) continue;
        if (splits == 1) {
            float inv = 0.0f;  // no valid entry: acc is zero and so is the output, as on the CPU
            if (m[hh] != -INFINITY) inv = 1.0f / (l[hh] + (a.sinks ? expf(a.sinks[h[hh]] - m[hh]) : 0.0f));
            float* o = a.out + (i * H + h[hh]) * hd;
            if (a.out_rope.freqs) {
                store_slice_rope<NE, VEC>(o, acc[hh], inv, lane, hd, a.out_rope, a.pos[i]);
            } else {
                store_slice<NE, VEC>(o, acc[hh], inv, lane, hd);
            }
        } else {
            const int64_t slot = (i * splits + split) * H + h[hh];
            if (lane == 0) part_ml[slot] = make_float2(m[hh], l[hh]);
            if (m[hh] != -INFINITY) store_slice<NE, VEC>(part_o + slot * hd, acc[hh], 1.0f, lane, hd);
        }
    }
}

// Block (query-head ih = i H + h, dims [blockIdx.y kMergeThreads, +kMergeThreads)): out = sum_s w_s O_s /
// (sum_s w_s l_s + exp(sink - M)), w_s = exp(m_s - M), M = max_s m_s. Splits without a valid entry (m_s =
// -inf, O_s never written) get w_s = 0 and are left out; all of them: M = -inf and the output is zero. With
// out_rope, the inverse RoPE of the last rope_dim dims: head_dim - rope_dim is even, so dim d's pair partner d ^ 1
// is thread threadIdx.x ^ 1 of the same warp (a shuffle; no thread returns before it). kS: the most splits the
// instance takes (a multiple of 32; lane s of the first warp reduces splits s, s + 32, ...).
template <int kS>
__global__ void __launch_bounds__(kMergeThreads) attention_merge_kernel(AttentionArgs a, int splits,
                                                                        const float2* part_ml,
                                                                        const float* part_o) {
    constexpr int kPerLane = kS / kWarp;
    __shared__ float w_s[kS];
    __shared__ float inv_s;
    const int H = a.n_heads, hd = a.head_dim;
    const int64_t ih = blockIdx.x, i = ih / H;
    const int h = (int)(ih % H);
    const int d = blockIdx.y * kMergeThreads + threadIdx.x;
    // The sink and the inverse RoPE's frequency of dim d are model data: read before the wait.
    const float sink = a.sinks ? a.sinks[h] : 0.0f;
    const int rope_off = hd - a.out_rope.rope_dim;
    const float freq = a.out_rope.freqs && d >= rope_off && d < hd ? a.out_rope.freqs[(d - rope_off) / 2] : 0.0f;
    pdl_begin();
    const int32_t pos = a.out_rope.freqs ? a.pos[i] : 0;
    if (threadIdx.x < kWarp) {
        float2 ml[kPerLane];
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int s = threadIdx.x + kWarp * j;
            ml[j] = s < splits ? part_ml[(i * splits + s) * H + h] : make_float2(-INFINITY, 0.0f);
            mx = fmaxf(mx, ml[j].x);
        }
        const float M = warp_max(mx);
        float wl = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const float w = ml[j].x == -INFINITY ? 0.0f : expf(ml[j].x - M);
            w_s[threadIdx.x + kWarp * j] = w;
            wl = j == 0 ? w * ml[j].y : fmaf(w, ml[j].y, wl);
        }
        const float L = warp_sum(wl);
        if (threadIdx.x == 0) inv_s = M == -INFINITY ? 0.0f : 1.0f / (L + (a.sinks ? expf(sink - M) : 0.0f));
    }
    __syncthreads();
    float o = 0.0f;
    if (d < hd) {
        // All the splits' loads are issued before the sum (unrolled to the cap), so one L2 round trip.
        float x[kS];
#pragma unroll
        for (int s = 0; s < kS; ++s)
            x[s] = s < splits && w_s[s] != 0.0f ? part_o[((i * splits + s) * H + h) * hd + d] : 0.0f;
#pragma unroll
        for (int s = 0; s < kS; ++s) o = fmaf(w_s[s], x[s], o);
        o = o * inv_s;
    }
    if (a.out_rope.freqs) o = rope_lanes(o, d, rope_off, hd, pos, [=] { return freq; }, true);  // block-uniform
    if (d < hd) a.out[ih * hd + d] = o;
}

using AttentionFn = void (*)(AttentionArgs, int, float2*, float*, int);

// NE values per lane per head: head_dim <= 32 NE.
template <bool VEC, int HPW, bool DB, bool PACKED>
AttentionFn kernel_for(int ne) {
    if (ne <= 4) return attention_kernel<4, HPW, VEC, DB, PACKED>;
    if (ne <= 8) return attention_kernel<8, HPW, VEC, DB, PACKED>;
    return attention_kernel<16, HPW, VEC, DB, PACKED>;
}

// The f32 kernels (attention_kernel, then attention_merge_kernel over the splits), with the output's RoPE if asked.
// PACKED: a.comp_packed; the shapes are chosen as for f32 rows (the tiles in shared memory are the same).
template <bool PACKED>
void attention_f32(CudaBackend& b, const AttentionArgs& a) {
    const int H = a.n_heads, hd = a.head_dim;
    const bool vec = hd % 4 == 0 && rows_aligned16(a);
    // Heads per warp: each row slice read from shared memory feeds HPW heads' FMAs, so 4 keep the shared
    // reads level with the FMAs where 2 leave them the bound, but 4 take about 220 registers (one block per
    // SM) and make half as many blocks: used when the blocks still fill the GPU twice over (prefill). Past
    // head_dim 512 one head's registers are all that fit. Where even two heads per warp leave SMs idle (decode,
    // whose entries are then split over blocks), one head per warp makes twice the blocks, each with half the
    // work to wait for (a few percent of the V4-Flash decode step at 4K on the H200).
    const int ne = (hd + kWarp - 1) / kWarp;
    const int64_t sms = b.props().multiProcessorCount;
    // The (query, head group) blocks with hpw heads per warp. The shape decisions below (heads per warp,
    // splits) are made as for one query up to kDecodeQueries queries, so that a query's arithmetic (which
    // entries each split sums, the merge's order) is the same whether it is decoded alone or verified with
    // a speculative step's others: a token's logits do not depend on the step it ran in.
    const int64_t nq = a.n <= kDecodeQueries ? 1 : a.n;
    auto blocks_for = [&](int hpw) { return nq * ceil_div(H, kWarps * hpw); };
    int hpw = 2;
    AttentionFn kernel = nullptr;
    if (ne > 16) {
        hpw = 1;
        kernel = vec ? attention_kernel<32, 1, true, false, PACKED> : attention_kernel<32, 1, false, false, PACKED>;
    } else if (vec && blocks_for(4) >= 2 * sms) {
        hpw = 4;
        kernel = kernel_for<true, 4, false, PACKED>(ne);
    } else if (blocks_for(2) < sms) {
        hpw = 1;
        kernel = vec ? kernel_for<true, 1, false, PACKED>(ne) : kernel_for<false, 1, false, PACKED>(ne);
    } else {
        kernel = vec ? kernel_for<true, 2, false, PACKED>(ne) : kernel_for<false, 2, false, PACKED>(ne);
    }
    // An HCA layer's decode (every compressed entry, counted on the device: up to ~8K rows deep in a context): four
    // heads a warp make four FMAs of each row value read from shared memory where one head makes one, and the
    // 254 registers that takes (one block an SM) leave the tile copies nothing to overlap with but the next
    // tile's math: two tile buffers. Its blocks are a quarter as many, which loses where the entries are few
    // (H100, 30-layer V4-Flash decode at 4K: 177.2 -> 169.4 tokens/s with it for every count), so the count
    // decides, on the device: both kernels are launched with the same splits, and each returns at once for the
    // queries of the other (gate: the one-head kernel takes fewer than kDeepEntries entries, this one the rest).
    AttentionFn deep = nullptr;
    if (vec && ne <= 16 && nq == 1 && a.kv_comp && !a.comp_idx) deep = kernel_for<true, 4, true, PACKED>(ne);

    // Split each query's entries only when the (query, head group) blocks leave SMs idle. Where the entry count is
    // known here (index lists, the window alone) the splits fill the SMs once, never below kMinSplitEntries
    // entries each. With comp_count (an HCA layer's every compressed entry) the count is on the device and grows
    // with the context under one step graph: kMaxSplits splits, of which each query uses as many as its entries
    // need (attention_kernel), so that deep in a context the blocks fill the SMs several times over (H100, 64
    // heads of 512 over 128 + 8,192 entries: 192.7 us a call with 17 splits, 133.7 with 64).
    const int64_t shape_blocks = blocks_for(hpw), blocks = a.n * ceil_div(H, kWarps * hpw);
    int splits = 1;
    if (shape_blocks < sms) {
        int64_t s = kMaxSplits;
        if (!a.kv_comp || a.comp_idx) {
            const int64_t entries = a.n_win + (a.kv_comp ? a.n_comp : 0);
            s = std::min<int64_t>((sms + shape_blocks - 1) / shape_blocks,
                                  (entries + kMinSplitEntries - 1) / kMinSplitEntries);
            s = std::min<int64_t>(s, kMaxSplits);
        }
        splits = (int)std::max<int64_t>(s, 1);
    }
    DSV4_CHECK(blocks * splits <= INT32_MAX && a.n * H <= INT32_MAX);

    const size_t smem = (size_t)kTile * hd * sizeof(float), deep_smem = 2 * smem;
    DSV4_CHECK_MSG(smem <= (size_t)b.props().sharedMemPerBlockOptin,
                   "attention: head_dim %d needs %zu bytes of shared memory per block", hd, smem);
    if (deep_smem > (size_t)b.props().sharedMemPerBlockOptin) deep = nullptr;
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (deep && deep_smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(deep, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)deep_smem));
    // The deep kernel's blocks, launched after the other (whose completion its blocks wait for, through PDL, before
    // they return: what follows waits for both).
    const int64_t deep_blocks = a.n * ceil_div(H, kWarps * 4);
    DSV4_CHECK(deep_blocks * splits <= INT32_MAX);
    const int gate = deep ? kDeepEntries : 0;

    // One split: the kernels write out themselves, no partials.
    CudaBackend::Scratch s(b);
    const int64_t slots = splits > 1 ? a.n * splits * H : 0;
    float2* part_ml = splits > 1 ? s.get<float2>(slots) : nullptr;
    float* part_o = splits > 1 ? s.get<float>(slots * hd) : nullptr;
    launch_pdl(kernel, (unsigned)(blocks * splits), kThreads, smem, b.stream(), a, splits, part_ml, part_o, -gate);
    CUDA_CHECK_LAUNCH();
    if (deep) {
        launch_pdl(deep, (unsigned)(deep_blocks * splits), kThreads, deep_smem, b.stream(), a, splits, part_ml, part_o,
                   gate);
        CUDA_CHECK_LAUNCH();
    }
    if (splits > 1) merge_attention_splits(b, a, splits, part_ml, part_o);
}

}  // namespace

void merge_attention_splits(CudaBackend& b, const AttentionArgs& a, int splits, const float2* part_ml,
                            const float* part_o) {
    DSV4_CHECK(splits > 1 && splits <= kMaxSplits);
    DSV4_CHECK(!a.out_rope.freqs || (a.head_dim - a.out_rope.rope_dim) % 2 == 0);
    const auto merge = splits <= kWarp ? attention_merge_kernel<kWarp> : attention_merge_kernel<kMaxSplits>;
    launch_pdl(merge, dim3((unsigned)(a.n * a.n_heads), ceil_div(a.head_dim, kMergeThreads)), kMergeThreads, 0,
               b.stream(), a, splits, part_ml, part_o);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::attention(const AttentionArgs& a) {
    if (skipped("attention")) return;
    if (a.n <= 0 || a.n_heads <= 0) return;
    const int H = a.n_heads, hd = a.head_dim;
    DSV4_CHECK_MSG(hd > 0 && hd <= kMaxHeadDim, "attention: head_dim %d is outside (0, %d]", hd, kMaxHeadDim);
    const RopeParams& r = a.out_rope;
    DSV4_CHECK_MSG(!r.freqs || (a.pos && r.rope_dim >= 0 && r.rope_dim <= hd && r.rope_dim % 2 == 0),
                   "attention: the output's RoPE on %d of %d dims needs positions and an even count", r.rope_dim, hd);
    DSV4_CHECK_MSG(!a.comp_packed || (a.comp_rope >= 0 && a.comp_rope < hd),
                   "attention: packed compressed rows with %d RoPE dims of %d", a.comp_rope, hd);
    // The f32 kernels rotate the output where they store it, a RoPE pair in one thread or two neighbouring lanes,
    // which needs the pairs to start at an even dim, and so does the merge of splits (either kernel's). Otherwise,
    // and after the tensor-core kernel's one-split calls (prefill), the attention runs without it and the rope op
    // follows.
    AttentionArgs plain = a;
    plain.out_rope = RopeParams{};
    const AttentionKernel k = select_attention(*this, plain);
    const bool rotate_in_kernel = (hd - r.rope_dim) % 2 == 0;
    const AttentionArgs& args = rotate_in_kernel ? a : plain;
    bool rotated = rotate_in_kernel;  // the tensor-core kernel's output is rotated only by a merge of its splits
    if (k == AttentionKernel::tc_bf16)
        rotated = launch_attention_tc(*this, args) && rotate_in_kernel;
    else if (a.comp_packed)
        attention_f32<true>(*this, args);
    else
        attention_f32<false>(*this, args);
    ran(kernel_name(k));
    if (r.freqs && !rotated) rope(a.out, a.n, H, hd, (int64_t)H * hd, a.pos, r, true);
}

}  // namespace dsv4::cuda
