// CUDA lightning-indexer top-k: score(t) = sum_h relu(q_h . k_t) w_h over the visible keys, then the
// top_k entries in (score desc, index asc) order, the CPU's tie rule.
//
// Every entry is one 64-bit key: the score's bits made order-preserving as an unsigned integer (high half)
// and 0x7fffffff - index (low half), so "larger key" is exactly the CPU's order and keys are unique; 0 marks
// an empty slot. Selection is a radix select on these keys (11-bit digits from the top; stop as soon as the
// digit holding the k-th key is taken whole): it yields a threshold with exactly k keys >= it, and only
// those k are then sorted (bitonic, descending).
//
// Scoring kernel: a block per (query, split), each split a contiguous range of the query's keys. The
// query's heads (padded to 64 with zero rows) and head weights sit in shared memory; keys stream through
// cp.async stages, 32 dims of a 32-, 64- or 128-key tile at a time (kStageBufs of them in flight). Warp w
// owns heads 8w..8w+7 of each 64-head chunk and lane l keys l, l + 32, ... of the tile: a register tile of 8
// heads x RK keys, four dims per shared load, so f32 FMAs rather than shared-memory loads bound the rate. Per key the warps'
// sums of relu(dot) w meet in shared memory. The host knows n but not n_visible (it lives on the device),
// so the split count fills the GPU from n alone and each block derives its range from n_visible:
//   - one split (many queries, prefill): the block keeps a buffer of candidates, appending a tile's keys
//     that reach the running threshold; when the buffer could overflow it radix-selects its top k, compacts
//     and raises the threshold. At the end it selects, sorts and writes the query's list itself.
//   - several splits, ranges of at most top_k keys ("raw", decode): the block writes each key's score
//     (32 bits; the index is the position) to scratch and the merge kernel selects over all of them.
//   - several splits, longer ranges: each block keeps its best top_k as above and writes them (unsorted)
//     to its slot of scratch.
// Merge kernel (several splits): a 1024-thread block per query stages the candidates in shared memory when
// they fit (else reads them from global memory at every pass), radix-selects the top k, sorts and writes;
// for one or two queries (decode) raw scores of at most kRankMax keys, or the histogram path's gathered candidates
// when they are at most that many, are ranked instead, by kRankMax / 32 blocks per query (rank_keys).
// Scratch: n x splits x top_k keys (and on the histogram path twice that for the gathered candidates plus a
// histogram per query), nothing of the context's size beyond that. The selection machinery (radix select,
// gather, compaction, the running buffer, the sort) is cuda_indexer_select.cuh; the packed keys' scoring
// cuda_indexer_fp4.cuh.
#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_indexer_fp4.cuh"
#include "kernels/cuda/cuda_indexer_select.cuh"

namespace dsv4::cuda {

namespace {

using namespace indexer_select;

constexpr int kThreads = 256;  // scoring kernel
constexpr int kWarps = kThreads / kWarp;
constexpr int kHeadsPerWarp = 8;
constexpr int kHeadChunk = kWarps * kHeadsPerWarp;  // heads per pass over a key tile
constexpr int kSlice = 32;                          // dims per staged key slice
constexpr int kSliceStride = kSlice + 4;            // padded rows: conflict-free float4 loads across lanes
constexpr int kMaxTile = kWarp * 4;                 // keys per tile with 4 keys per lane
constexpr int kMinChunk = kWarp;                    // fewest keys a split gets (one 32-key tile)
constexpr int kMergeThreads = 1024;
// Per-split key range of query i: `chunk` keys per split, `act` splits non-empty. Both kernels derive the
// same values from n_visible.
// With `wide` (decode: few queries), every split's raw scores fit the query's scratch up to 2 splits top_k keys
// (it holds splits x top_k 64-bit keys); past kRankMax keys such a query takes the histogram path (`hist`): the
// splits also count their keys' top digits into a global histogram, a gather kernel takes the keys of the digits
// that hold the top k, and the merge selects among those.
constexpr int kRankMax = 4096;
struct SplitRange {
    int chunk, act;
    bool raw;   // several splits, raw scores in scratch (ranges of <= top_k keys, or wide)
    bool hist;  // raw, wide and more than kRankMax keys: the histogram path
};
__device__ __forceinline__ SplitRange split_range(int nv, int splits, int top_k, bool wide) {
    SplitRange r;
    r.chunk = max((nv + splits - 1) / splits, kMinChunk);
    r.act = (nv + r.chunk - 1) / r.chunk;
    r.raw = splits > 1 && (r.chunk <= top_k || (wide && nv <= 2 * splits * top_k));
    r.hist = r.raw && wide && nv > kRankMax;
    return r;
}

struct ScoreArgs {
    int32_t* out;    // final lists (one split)
    uint64_t* part;  // scratch (several splits): n x splits x top_k keys, or raw score bits
    const float* q;
    const float* w;
    const float* keys;
    const float* const* key_rows;  // per-query keys (indexer_topk's key_rows), or null
    const int32_t* n_visible;
    int H, hd;
    int H_pad, hd_pad;  // heads padded to kHeadChunk, dims to kSlice (zeros)
    int top_k;
    int buf_cap;  // candidate buffer entries: >= the power of two >= top_k, and >= top_k + kMaxTile
    int splits;
    bool wide;     // few queries: raw scores up to 2 splits top_k keys, the histogram path past kRankMax
    int* hist_g;   // wide: [n][kBins] the top digits' counts of the histogram path's queries (zeroed)
    bool vec;  // q and keys 16-byte aligned with head_dim % 4 == 0: cp.async staging
    // Packed FP4 keys (cuda_indexer_fp4.cuh): rows of rb bytes, staged kFp4Keys at a time in stage_bytes; the
    // queries as int8 rows [n][H_pad][q8_stride] and block scales [n][H_pad][hd / 32] (indexer_queries_kernel).
    bool fp4;
    int rb, stage_bytes;
    const int8_t* q8;
    const float* qscale;
};

constexpr int kFp4Keys = kWarps * fp4_index::kMaxTileKeys;  // the most keys per tile of the FP4 scoring
constexpr int kFp4Stages = 3;

// q in shared memory: per group of kHeadsPerWarp heads, per 4 dims, the group's heads' 4 dims in a row, so
// a warp's loads of its heads are one run at fixed offsets (all lanes read the same address: a broadcast).
__device__ __forceinline__ int q_offset(int h, int d, int hd_pad) {
    return ((h / kHeadsPerWarp * (hd_pad / 4) + d / 4) * kHeadsPerWarp + h % kHeadsPerWarp) * 4 + d % 4;
}

// Shared memory of the scoring kernel: q[H_pad][hd_pad] (laid out by q_offset), w[H_pad], two key slices
// [kMaxTile][kSliceStride], the warps' partial scores [kWarps][kMaxTile], the candidate buffer [buf_cap] and
// the histogram [kBins].
// With FP4 keys: the queries' int8 rows [H_pad][q8_stride] and block scales [H_pad][hd / 32], w[H_pad], the
// staged key bytes [kFp4Stages][stage_bytes], the tile's scores [kFp4Keys], the buffer and the histogram.
struct ScoreSmem {
    float* q;
    float* w;
    float* kt;
    float* red;
    uint64_t* buf;
    int* hist;
    int8_t* q8;
    float* qscale;
    uint8_t* kbytes;
};

__host__ __device__ constexpr size_t fp4_q_bytes(int H_pad, int hd) {
    return ((size_t)H_pad * fp4_index::q8_stride(hd) + 15) / 16 * 16;
}

template <bool kFp4>
__device__ ScoreSmem score_smem(unsigned char* base, const ScoreArgs& a) {
    ScoreSmem s;
    if constexpr (kFp4) {
        s.q8 = reinterpret_cast<int8_t*>(base);
        s.kbytes = base + fp4_q_bytes(a.H_pad, a.hd);
        s.qscale = reinterpret_cast<float*>(s.kbytes + (size_t)kFp4Stages * a.stage_bytes);
        s.w = s.qscale + (size_t)a.H_pad * (a.hd / kFp4Block);
        s.red = s.w + a.H_pad;
        s.buf = reinterpret_cast<uint64_t*>(s.red + kFp4Keys);  // 8-byte aligned: H_pad and kFp4Keys are even
        s.hist = reinterpret_cast<int*>(s.buf + a.buf_cap);
        s.q = s.kt = nullptr;
        return s;
    }
    s.q8 = nullptr;
    s.qscale = nullptr;
    s.kbytes = nullptr;
    s.q = reinterpret_cast<float*>(base);
    s.w = s.q + (size_t)a.H_pad * a.hd_pad;
    s.kt = s.w + a.H_pad;
    s.red = s.kt + 2 * kMaxTile * kSliceStride;
    s.buf = reinterpret_cast<uint64_t*>(s.red + kWarps * kMaxTile);
    s.hist = reinterpret_cast<int*>(s.buf + a.buf_cap);
    return s;
}

size_t score_smem_bytes_fp4(int H_pad, int hd, int stage_bytes, int buf_cap) {
    const size_t floats = (size_t)H_pad * (hd / kFp4Block) + H_pad + kFp4Keys;
    return fp4_q_bytes(H_pad, hd) + (size_t)kFp4Stages * stage_bytes + floats * sizeof(float) +
           (size_t)buf_cap * sizeof(uint64_t) + kBins * sizeof(int);
}

size_t score_smem_bytes(int H_pad, int hd_pad, int buf_cap) {
    return ((size_t)H_pad * hd_pad + H_pad + 2 * kMaxTile * kSliceStride + kWarps * kMaxTile) * sizeof(float) +
           (size_t)buf_cap * sizeof(uint64_t) + kBins * sizeof(int);
}

// The key slices' staging area holds two slices of the largest tile: kStageBufs<RK> slices of a 32 RK-key
// tile, so smaller tiles keep more slices in flight (a 32-key tile's four 32-dim slices at once: a decode
// split then waits for its keys once, not once per slice).
template <int RK>
constexpr int kStageBufs = 2 * kMaxTile / (kWarp * RK);

// Stage step g's key slice (tile g / steps, dims (g % steps % n_sl) * kSlice) into buffer g % kStageBufs;
// keys past hi and dims past hd read as zeros.
template <int RK>
__device__ __forceinline__ void stage_slice(const ScoreArgs& a, float* kt, int lo, int hi, int g, int steps, int n_sl) {
    constexpr int TK = kWarp * RK;
    const int t0 = lo + (g / steps) * TK, k0 = (g % steps % n_sl) * kSlice;
    const float* keys = a.key_rows ? a.key_rows[blockIdx.x] : a.keys;  // the scoring kernel's block x: query i
    float* dst = kt + (g % kStageBufs<RK>) * TK * kSliceStride;
    if (a.vec) {
#pragma unroll
        for (int m = 0; m < RK; ++m) {  // TK rows x 8 chunks of 16 bytes
            const int c = (int)threadIdx.x + kThreads * m, row = c / (kSlice / 4), part = c % (kSlice / 4);
            const int t = t0 + row, d = k0 + 4 * part;
            const bool valid = t < hi && d < a.hd;
            cp_async16_zfill(dst + row * kSliceStride + 4 * part, valid ? keys + (int64_t)t * a.hd + d : keys, valid);
        }
    } else {
        for (int e = threadIdx.x; e < TK * kSlice; e += kThreads) {
            const int row = e / kSlice, d = e % kSlice, t = t0 + row;
            dst[row * kSliceStride + d] = t < hi && k0 + d < a.hd ? keys[(int64_t)t * a.hd + k0 + d] : 0.0f;
        }
    }
    cp_async_commit();
}

// A finished tile's scores (thread tid holds key t0 + tid's when valid) to scratch (raw) or into the candidate
// buffer. `filled` is the buffer's fill as every thread read it before the barrier that ended the tile's
// scoring (a read after it would race with other warps' appends, and threads could disagree on calling
// keep_top, whose barriers all must reach).
__device__ __forceinline__ void emit_tile(const ScoreArgs& a, const ScoreSmem& s, SelShared& sh, int filled, int t0,
                                          int TK, bool valid, float score, bool raw, uint32_t* raw_out, int k,
                                          bool count_digits) {
    const uint32_t bits = valid ? score_bits(score) : 0;
    if (raw) {
        if (valid) raw_out[t0 + threadIdx.x] = bits;
        if (count_digits) hist_add(s.hist, bits >> (32 - kSelBits), valid);  // a key's top digit: its score's
    } else {
        // Room for a whole tile; keep_top leaves at most k <= buf_cap - kMaxTile entries.
        if (filled + TK > a.buf_cap) keep_top(s.buf, k, s.hist, sh);
        const uint64_t key = valid ? make_key(bits, t0 + threadIdx.x) : 0;
        append(s.buf, &sh.count, key, valid && key >= sh.theta);
    }
}

// Score keys [lo, hi) of query i in tiles of 32 RK keys; each finished tile's keys go to scratch (raw) or
// into the candidate buffer.
template <int RK>
__device__ void score_keys(const ScoreArgs& a, const ScoreSmem& s, SelShared& sh, int lo, int hi, bool raw,
                           uint32_t* raw_out, int k, bool count_digits) {
    constexpr int TK = kWarp * RK;
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const int n_sl = a.hd_pad / kSlice, steps = (a.H_pad / kHeadChunk) * n_sl;
    const int total = (hi - lo + TK - 1) / TK * steps;
    constexpr int NB = kStageBufs<RK>;
    float acc[kHeadsPerWarp][RK], part[RK];
    // NB - 1 slices ahead; every step commits a group (empty past the last slice), so waiting for all but
    // the last NB - 1 groups means slice g has landed.
    auto stage = [&](int j) {
        if (j < total)
            stage_slice<RK>(a, s.kt, lo, hi, j, steps, n_sl);
        else
            cp_async_commit();
    };
    for (int j = 0; j < NB - 1; ++j) stage(j);
#pragma unroll 1
    for (int g = 0; g < total; ++g) {
        stage(g + NB - 1);
        cp_async_wait<NB - 1>();
        __syncthreads();
        const int step = g % steps, hc = step / n_sl, sl = step % n_sl;
        if (step == 0)
#pragma unroll
            for (int j = 0; j < RK; ++j) part[j] = 0.0f;
        if (sl == 0)
#pragma unroll
            for (int r = 0; r < kHeadsPerWarp; ++r)
#pragma unroll
                for (int j = 0; j < RK; ++j) acc[r][j] = 0.0f;
        const int h0 = hc * kHeadChunk + warp * kHeadsPerWarp;
        const float* qb = s.q + q_offset(h0, sl * kSlice, a.hd_pad);
        const float* kb = s.kt + (g % NB) * TK * kSliceStride + lane * kSliceStride;
#pragma unroll
        for (int kk = 0; kk < kSlice; kk += 4) {
            float4 kv[RK];
#pragma unroll
            for (int j = 0; j < RK; ++j) kv[j] = *reinterpret_cast<const float4*>(kb + j * kWarp * kSliceStride + kk);
#pragma unroll
            for (int r = 0; r < kHeadsPerWarp; ++r) {
                const float4 qv = *reinterpret_cast<const float4*>(qb + (kk / 4 * kHeadsPerWarp + r) * 4);
#pragma unroll
                for (int j = 0; j < RK; ++j) {
                    acc[r][j] = fmaf(qv.x, kv[j].x, acc[r][j]);
                    acc[r][j] = fmaf(qv.y, kv[j].y, acc[r][j]);
                    acc[r][j] = fmaf(qv.z, kv[j].z, acc[r][j]);
                    acc[r][j] = fmaf(qv.w, kv[j].w, acc[r][j]);
                }
            }
        }
        if (sl == n_sl - 1)
#pragma unroll
            for (int r = 0; r < kHeadsPerWarp; ++r) {
                const float wh = s.w[h0 + r];
#pragma unroll
                for (int j = 0; j < RK; ++j) part[j] += fmaxf(acc[r][j], 0.0f) * wh;
            }
        if (step == steps - 1) {  // the tile's scores are complete
            const int t0 = lo + (g / steps) * TK;
#pragma unroll
            for (int j = 0; j < RK; ++j) s.red[warp * kMaxTile + lane + j * kWarp] = part[j];
            const int filled = sh.count;  // as the previous step's closing barrier settled it (emit_tile)
            __syncthreads();
            const bool valid = tid < TK && t0 + tid < hi;
            float score = 0.0f;
            if (valid)
#pragma unroll
                for (int w = 0; w < kWarps; ++w) score += s.red[w * kMaxTile + tid];
            emit_tile(a, s, sh, filled, t0, TK, valid, score, raw, raw_out, k, count_digits);
        }
        __syncthreads();  // the buffer read by this step is restaged next; counts settle
    }
}

// score_keys over packed FP4 keys (cuda_indexer_fp4.cuh): tiles of 64 kN keys, a warp's 8 kN of them (kN
// n-tiles, which share each query fragment read from shared memory; two where the split has at least two such
// tiles, one where it has fewer: a split of one tile gets no overlap of its copies and math, and its math then
// is the whole wait); a tile's rows are one run of bytes, staged in 16-byte pieces from the aligned address at or
// before its first (the cache keeps 16 bytes of slack after its last row) through kFp4Stages buffers.
template <int kN>
__device__ void score_keys_fp4(const ScoreArgs& a, const ScoreSmem& s, SelShared& sh, int lo, int hi, bool raw,
                               uint32_t* raw_out, int k, bool count_digits) {
    constexpr int WK = 8 * kN, TK = kWarps * WK;
    const uint8_t* keys = reinterpret_cast<const uint8_t*>(a.key_rows ? a.key_rows[blockIdx.x] : a.keys);
    const int rb = a.rb, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int tiles = (hi - lo + TK - 1) / TK;
    auto stage = [&](int j) {  // every call commits a group (empty past the last tile)
        if (j < tiles) {
            const int64_t t0 = lo + (int64_t)j * TK, first = t0 * rb, start = first & ~(int64_t)15;
            const int64_t end = (int64_t)min(hi, (int)t0 + TK) * rb;
            const int pieces = (int)((end - start + 15) / 16);
            uint8_t* dst = s.kbytes + (j % kFp4Stages) * a.stage_bytes;
            for (int c = threadIdx.x; c < a.stage_bytes / 16; c += kThreads)
                cp_async16_zfill(dst + 16 * c, keys + start + 16 * c, c < pieces);
        }
        cp_async_commit();
    };
    for (int j = 0; j < kFp4Stages - 1; ++j) stage(j);
#pragma unroll 1
    for (int g = 0; g < tiles; ++g) {
        stage(g + kFp4Stages - 1);
        cp_async_wait<kFp4Stages - 1>();
        __syncthreads();
        const int t0 = lo + g * TK;
        const uint8_t* tile = s.kbytes + (g % kFp4Stages) * a.stage_bytes + (((int64_t)t0 * rb) & 15);
        if (t0 + warp * WK < hi) {  // warp-uniform
            const float4 sc =
                fp4_index::warp_tile_scores<kN>(s.q8, s.qscale, s.w, a.H_pad, a.hd, tile + warp * WK * rb, rb);
            if (lane < 4) {
                float* r = s.red + warp * WK + 2 * lane;
                r[0] = sc.x;
                r[1] = sc.y;
                if constexpr (kN == 2) {
                    r[8] = sc.z;
                    r[9] = sc.w;
                }
            }
        }
        const int filled = sh.count;  // as the previous tile's closing barrier settled it (emit_tile)
        __syncthreads();
        const bool valid = (int)threadIdx.x < TK && t0 + (int)threadIdx.x < hi;
        emit_tile(a, s, sh, filled, t0, TK, valid, valid ? s.red[threadIdx.x] : 0.0f, raw, raw_out, k, count_digits);
        __syncthreads();  // the stage read by this tile is restaged next; counts settle
    }
}

// kFp4: packed FP4 keys (a.fp4), scored on int8 tensor cores; else f32 keys.
template <bool kFp4>
__global__ void __launch_bounds__(kThreads, 2) indexer_score_kernel(ScoreArgs a) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ SelShared sh;
    const ScoreSmem s = score_smem<kFp4>(smem_raw, a);
    const int64_t i = blockIdx.x;
    const int split = blockIdx.y;
    const int nv = max(a.n_visible[i], 0), k = min(a.top_k, nv);
    const SplitRange r = split_range(nv, a.splits, a.top_k, a.wide);
    const bool final = a.splits == 1;
    if (!final && split >= r.act) return;  // nothing to score; the merge reads only the act splits
    const int lo = split * r.chunk, hi = min(nv, lo + r.chunk);
    if constexpr (kFp4) {  // the query's int8 rows and scales, as indexer_queries_kernel wrote them
        const int q_bytes = a.H_pad * fp4_index::q8_stride(a.hd), sc_bytes = a.H_pad * (a.hd / kFp4Block) * 4;
        const int8_t* q8 = a.q8 + i * q_bytes;
        const unsigned char* sc = reinterpret_cast<const unsigned char*>(a.qscale) + i * sc_bytes;
        for (int c = threadIdx.x; c < q_bytes / 16; c += kThreads) cp_async16(s.q8 + 16 * c, q8 + 16 * c);
        for (int c = threadIdx.x; c < sc_bytes / 16; c += kThreads)
            cp_async16(reinterpret_cast<unsigned char*>(s.qscale) + 16 * c, sc + 16 * c);
        cp_async_commit();  // the first tile's wait covers it (groups complete in order)
    } else {
        // q: 4 dims of a head are 16 contiguous bytes on both sides (q_offset), one cp.async each; padding
        // heads and dims are zero-filled. The copies land before the first key slice is used.
        const float* qi = a.q + i * a.H * a.hd;
        const int n_d4 = a.hd_pad / 4;
        if (a.vec) {
            for (int c = threadIdx.x; c < a.H_pad * n_d4; c += kThreads) {
                const int h = c / n_d4, d = c % n_d4 * 4;
                const bool valid = h < a.H && d < a.hd;
                cp_async16_zfill(s.q + q_offset(h, d, a.hd_pad), valid ? qi + (int64_t)h * a.hd + d : qi, valid);
            }
            cp_async_commit();
        } else {
            const int lane = threadIdx.x % kWarp;
            for (int hg = threadIdx.x / kWarp; hg < a.H_pad / kHeadsPerWarp; hg += kWarps) {
                const int h = hg * kHeadsPerWarp + lane / 4;  // lane = 4 (h % 8) + d % 4: q_offset's order
                for (int d4 = 0; d4 < n_d4; ++d4) {
                    const int d = d4 * 4 + lane % 4;
                    s.q[(hg * n_d4 + d4) * kWarp + lane] = h < a.H && d < a.hd ? qi[(int64_t)h * a.hd + d] : 0.0f;
                }
            }
        }
    }
    for (int h = threadIdx.x; h < a.H_pad; h += kThreads) s.w[h] = h < a.H ? a.w[i * a.H + h] : 0.0f;
    if (threadIdx.x == 0) {
        sh.count = 0;
        sh.theta = 1;
    }
    if (r.hist)  // the raw path's histogram of top digits (the selection's buffer is unused there)
        for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    // This query's scratch (several splits): raw score bits by key index, or top_k keys per split.
    uint64_t* region = final ? nullptr : a.part + i * a.splits * a.top_k;
    uint32_t* raw_out = reinterpret_cast<uint32_t*>(region);
    if constexpr (kFp4) {
        if (hi - lo >= 2 * kFp4Keys)
            score_keys_fp4<2>(a, s, sh, lo, hi, r.raw, raw_out, k, r.hist);
        else if (hi > lo)
            score_keys_fp4<1>(a, s, sh, lo, hi, r.raw, raw_out, k, r.hist);
    } else if (hi > lo) {
        if (hi - lo <= kWarp)
            score_keys<1>(a, s, sh, lo, hi, r.raw, raw_out, k, r.hist);
        else if (hi - lo <= 2 * kWarp)
            score_keys<2>(a, s, sh, lo, hi, r.raw, raw_out, k, r.hist);
        else
            score_keys<4>(a, s, sh, lo, hi, r.raw, raw_out, k, r.hist);
    }
    cp_async_wait<0>();  // (no keys: the q copies are still owed a wait)
    if (r.hist) {  // this split's digit counts into the query's
        __syncthreads();
        for (int b = threadIdx.x; b < kBins; b += kThreads)
            if (s.hist[b]) atomicAdd(a.hist_g + i * kBins + b, s.hist[b]);
    }
    if (r.raw) return;
    keep_top(s.buf, k, s.hist, sh);
    if (final) {
        write_sorted(s.buf, sh, a.out + i * a.top_k, a.top_k);
        return;
    }
    uint64_t* slot = region + (int64_t)split * a.top_k;
    const int count = sh.count;
    for (int j = threadIdx.x; j < a.top_k; j += kThreads) slot[j] = j < count ? s.buf[j] : 0;
}

// At most kWarp gridDim.y candidates (decode of one or two queries: the raw scores of contexts up to 4 kRankMax
// tokens, or the histogram path's gathered keys when they are that few): the list by ranks, spread over the
// query's blocks. Block y takes candidates [kWarp y, + kWarp), lane l of every warp candidate kWarp y + l; each
// warp counts, for its lane's key, the larger keys among its share of all nc (a warp's kWarp candidates at a
// time, broadcast by shuffles); the warps' counts meet in shared memory as integers, so the rank (the number of
// larger keys: keys are unique, ranks a permutation) is exact, and a key ranked below top_k is written to its
// place. With every key of the top k among the candidates (the gathered ones hold them all, and every candidate
// outside the top k has those k above it) the ranks are the ranks among all keys. Block 0 writes -1 past nc.
constexpr int kRankQueries = 2;  // queries per call that get kRankMax / kWarp blocks each
template <class Src>
__device__ void rank_keys(Src src, int nc, int32_t* o, int top_k) {
    __shared__ int above_s[kWarp];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    const int e = kWarp * (int)blockIdx.y + lane;
    if (threadIdx.x < kWarp) above_s[threadIdx.x] = 0;
    __syncthreads();
    const uint64_t mine = e < nc ? src(e) : 0;
    int above = 0;
    for (int c0 = kWarp * warp; c0 < nc; c0 += kWarp * n_warps) {
        const int c = c0 + lane;
        const uint64_t cand = c < nc ? src(c) : 0;
#pragma unroll 8
        for (int t = 0; t < kWarp; ++t) above += __shfl_sync(kFullMask, cand, t) > mine ? 1 : 0;
    }
    atomicAdd(&above_s[lane], above);
    __syncthreads();
    if (warp == 0 && e < nc && above_s[lane] < top_k) o[above_s[lane]] = key_index(mine);
    if (blockIdx.y == 0)
        for (int j = nc + threadIdx.x; j < top_k; j += blockDim.x) o[j] = -1;
}

// Packed keys: each query's heads as int8 rows and block scales, once per call (fp4_index::load_queries) for all
// of its splits to copy; on the histogram path also the query's digit counts and candidate count zeroed (this
// kernel runs before the scoring). Block (i, y) converts heads [y hpb, y hpb + hpb) of query i: hpb heads of at
// most 4 kThreads values, so that each thread converts one group of 4 values (one block converting a query's 64
// heads of 128, 8 values after another per thread, took 17 us on an H100).
__global__ void __launch_bounds__(kThreads)
    indexer_queries_kernel(const float* q, int H, int hd, int H_pad, int hpb, int8_t* q8, float* qscale, int* hist_g,
                           int* cand_count) {
    pdl_begin();
    const int64_t i = blockIdx.x;
    const int h0 = blockIdx.y * hpb;
    fp4_index::load_queries<kThreads>(q + (i * H + h0) * hd, max(0, min(hpb, H - h0)), hd, hpb,
                                      q8 + (i * H_pad + h0) * fp4_index::q8_stride(hd),
                                      qscale + (i * H_pad + h0) * (hd / kFp4Block));
    if (hist_g && blockIdx.y == 0) {
        for (int b = threadIdx.x; b < kBins; b += kThreads) hist_g[i * kBins + b] = 0;
        if (threadIdx.x == 0) cand_count[i] = 0;
    }
}

// The histogram path's gather, block (query, y) of the query's gridDim.y: the digit that holds the query's k-th
// key, from the splits' counts of top digits, then every key of the block's share of the raw scores whose top
// digit is that one or higher, appended to the query's candidates (at least k, all of the top k among them).
__global__ void __launch_bounds__(kThreads)
    indexer_gather_kernel(const uint64_t* part, const int* hist_g, uint64_t* cand, int* cand_count,
                          const int32_t* n_visible, int top_k, int splits) {
    pdl_begin();
    __shared__ SelShared sh;
    const int64_t i = blockIdx.x;
    const int nv = max(n_visible[i], 0), k = min(top_k, nv);
    if (!split_range(nv, splits, top_k, true).hist) return;
    find_digit(hist_g + i * kBins, kBins, k, sh);
    const uint32_t digit = (uint32_t)sh.digit;
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(part + i * splits * top_k);
    uint64_t* out = cand + i * 2 * (int64_t)splits * top_k;
    const int per = (nv + (int)gridDim.y - 1) / (int)gridDim.y, lo = (int)blockIdx.y * per, hi = min(nv, lo + per);
    constexpr int U = 4;
    for (int base = lo; base < hi; base += kThreads * U) {
        uint32_t v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int t = base + u * kThreads + (int)threadIdx.x;
            v[u] = t < hi ? bits[t] : 0;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int t = base + u * kThreads + (int)threadIdx.x;
            append(out, cand_count + i, make_key(v[u], t), t < hi && (v[u] >> (32 - kSelBits)) >= digit);
        }
    }
}

// Block (query, y): the top k of the query's splits' candidates, sorted: by ranks over the query's blocks
// (rank_keys) where the grid has them for its raw scores or its gathered candidates (the histogram path), else
// by block y = 0 alone (a radix select over the candidates, then a sort). Shared memory: the output buffer [k2 = power of two >= top_k], the histogram
// [kBins], then `area_bytes` to stage the candidates in.
__global__ void __launch_bounds__(kMergeThreads)
    indexer_merge_kernel(int32_t* out, const uint64_t* part, const int32_t* n_visible, int top_k, int k2, int splits,
                         int area_bytes, bool wide, const uint64_t* cand, const int* cand_count) {
    pdl_begin();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ SelShared sh;
    uint64_t* sorted = reinterpret_cast<uint64_t*>(smem_raw);
    int* hist = reinterpret_cast<int*>(sorted + k2);
    unsigned char* area = reinterpret_cast<unsigned char*>(hist + kBins);
    const int64_t i = blockIdx.x;
    const int nv = max(n_visible[i], 0), k = min(top_k, nv);
    int32_t* o = out + i * top_k;
    const SplitRange r = split_range(nv, splits, top_k, wide);
    const uint64_t* region = part + i * splits * top_k;
    if (k > 0 && r.raw && nv <= kWarp * (int)gridDim.y) {  // uniform over the block
        if (kWarp * (int)blockIdx.y < nv) rank_keys(ScoreBitsSrc{reinterpret_cast<const uint32_t*>(region)}, nv, o, top_k);
        return;
    }
    // The histogram path's gathered candidates (at least k; deep in a context a few thousand of several hundred
    // thousand keys): ranked over the query's blocks when they fit them, which needs no sort (one block's radix
    // select and sort of them took 22.8 us at 262,144 keys on an H100).
    const uint64_t* gathered = r.hist ? cand + i * 2 * (int64_t)splits * top_k : nullptr;
    const int n_gathered = r.hist ? cand_count[i] : 0;
    if (k > 0 && r.hist && n_gathered <= kWarp * (int)gridDim.y) {  // uniform over the block
        if (kWarp * (int)blockIdx.y < n_gathered) rank_keys(KeySrc{gathered}, n_gathered, o, top_k);
        return;
    }
    if (blockIdx.y > 0) return;
    if (k == 0) {
        for (int j = threadIdx.x; j < top_k; j += kMergeThreads) o[j] = -1;
        return;
    }
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    if (r.hist)  // the gathered candidates
        select_staged<KeySrc>(gathered, n_gathered, area, area_bytes, k, hist, sorted, sh);
    else if (r.raw)  // raw score bits by key index
        select_staged<ScoreBitsSrc>(reinterpret_cast<const uint32_t*>(region), nv, area, area_bytes, k, hist, sorted, sh);
    else  // each active split's best top_k keys
        select_staged<KeySrc>(region, r.act * top_k, area, area_bytes, k, hist, sorted, sh);
    write_sorted(sorted, sh, o, top_k);
}

}  // namespace

void CudaBackend::indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys,
                               const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k,
                               const float* const* key_rows, bool fp4_keys) {
    if (n <= 0 || top_k <= 0) return;
    if (skipped("indexer_topk")) {  // what-if: no entry selected (all -1), so the attention still reads valid lists
        CUDA_CHECK(cudaMemsetAsync(idx, 0xFF, (size_t)n * top_k * sizeof(int32_t), stream_));
        return;
    }
    DSV4_CHECK(n <= INT32_MAX && n_heads > 0 && head_dim > 0);
    int k2 = 32;
    while (k2 < top_k) k2 <<= 1;
    ScoreArgs a;
    a.out = idx;
    a.part = nullptr;
    a.q = q;
    a.w = w;
    a.keys = keys;
    a.key_rows = key_rows;
    a.n_visible = n_visible;
    a.H = n_heads;
    a.hd = head_dim;
    a.H_pad = (n_heads + kHeadChunk - 1) / kHeadChunk * kHeadChunk;
    a.hd_pad = (head_dim + kSlice - 1) / kSlice * kSlice;
    a.top_k = top_k;
    a.buf_cap = k2 + std::max(kMaxTile, k2 / 2);
    a.vec = head_dim % 4 == 0 && aligned16(key_rows ? nullptr : keys, q);  // a table's rows are aligned by contract
    a.fp4 = fp4_keys;
    a.rb = (int)fp4_row_bytes(head_dim);
    a.stage_bytes = ((kFp4Keys * a.rb + 15) / 16 + 1) * 16;
    if (fp4_keys)
        DSV4_CHECK_MSG(head_dim % kFp4Block == 0 && aligned16(key_rows ? nullptr : keys),
                       "indexer_topk: packed FP4 keys need a head dim that is a multiple of %d (not %d) and 16-byte "
                       "aligned rows",
                       kFp4Block, head_dim);
    const size_t smem = fp4_keys ? score_smem_bytes_fp4(a.H_pad, head_dim, a.stage_bytes, a.buf_cap)
                                 : score_smem_bytes(a.H_pad, a.hd_pad, a.buf_cap);
    DSV4_CHECK_MSG(smem + sizeof(SelShared) <= (size_t)props_.sharedMemPerBlockOptin,
                   "indexer_topk: top_k %d with %d heads of %d needs %zu bytes of shared memory", top_k, n_heads,
                   head_dim, smem);
    const auto score_kernel = fp4_keys ? indexer_score_kernel<true> : indexer_score_kernel<false>;
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    // Enough blocks to fill the GPU (two per SM when shared memory allows) when few queries come (decode);
    // one per query, which then finishes its own list, when many do.
    const int per_sm = 2 * (smem + sizeof(SelShared) + 1024) <= (size_t)props_.sharedMemPerMultiprocessor ? 2 : 1;
    const int64_t slots = (int64_t)props_.multiProcessorCount * per_sm;
    a.splits = n >= slots ? 1 : (int)std::min<int64_t>((slots + n - 1) / n, 1024);
    Scratch s(*this);
    if (a.splits > 1) a.part = s.get<uint64_t>(n * a.splits * top_k);
    // Decode (the queries that get rank blocks): raw scores up to 2 splits top_k keys, and past kRankMax the
    // histogram path (its counts and candidate count zeroed here; its candidates: up to all raw keys).
    a.wide = a.splits > 1 && n <= kRankQueries;
    a.hist_g = nullptr;
    uint64_t* cand = nullptr;
    int* cand_count = nullptr;
    if (a.wide) {
        a.hist_g = s.get<int>(n * (kBins + 1));
        cand_count = a.hist_g + n * kBins;
        cand = s.get<uint64_t>(n * 2 * (int64_t)a.splits * top_k);
        if (!fp4_keys) CUDA_CHECK(cudaMemsetAsync(a.hist_g, 0, (size_t)n * (kBins + 1) * sizeof(int), stream_));
    }
    a.q8 = nullptr;
    a.qscale = nullptr;
    if (fp4_keys) {  // the queries to int8 once (and the histogram path's counts zeroed)
        int8_t* q8 = s.get<int8_t>(n * a.H_pad * fp4_index::q8_stride(head_dim));
        float* qscale = s.get<float>(n * a.H_pad * (head_dim / kFp4Block));
        int hpb = 1;  // heads per block: the largest power of two of at most 4 kThreads values (divides H_pad)
        while (hpb < kHeadChunk && 2 * hpb * head_dim <= 4 * kThreads) hpb *= 2;
        launch_pdl(indexer_queries_kernel, dim3((unsigned)n, (unsigned)(a.H_pad / hpb)), kThreads, 0, stream_, q,
                   n_heads, head_dim, a.H_pad, hpb, q8, qscale, a.hist_g, cand_count);
        CUDA_CHECK_LAUNCH();
        a.q8 = q8;
        a.qscale = qscale;
    }
    launch_pdl(score_kernel, dim3((unsigned)n, (unsigned)a.splits), kThreads, smem, stream_, a);
    CUDA_CHECK_LAUNCH();
    if (a.splits == 1) return;
    // The merge stages candidates in whatever shared memory its output buffer and histogram leave.
    const size_t fixed = (size_t)k2 * sizeof(uint64_t) + kBins * sizeof(int) + sizeof(SelShared) + 256;
    DSV4_CHECK_MSG(fixed <= (size_t)props_.sharedMemPerBlockOptin,
                   "indexer_topk: top_k %d needs %zu bytes of shared memory to merge", top_k, fixed);
    const int area = (int)(((size_t)props_.sharedMemPerBlockOptin - fixed) / 16 * 16);
    const size_t merge_smem = (size_t)k2 * sizeof(uint64_t) + kBins * sizeof(int) + area;
    if (merge_smem > 48 * 1024)
        CUDA_CHECK(
            cudaFuncSetAttribute(indexer_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)merge_smem));
    if (a.wide) {
        launch_pdl(indexer_gather_kernel, dim3((unsigned)n, (unsigned)props_.multiProcessorCount), kThreads, 0, stream_,
                   a.part, a.hist_g, cand, cand_count, n_visible, top_k, a.splits);
        CUDA_CHECK_LAUNCH();
    }
    const unsigned rank_blocks = n <= kRankQueries ? kRankMax / kWarp : 1;
    launch_pdl(indexer_merge_kernel, dim3((unsigned)n, rank_blocks), kMergeThreads, merge_smem, stream_, idx, a.part,
               n_visible, top_k, k2, a.splits, area, a.wide, static_cast<const uint64_t*>(cand),
               static_cast<const int*>(cand_count));
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
