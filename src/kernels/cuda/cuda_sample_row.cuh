// The device draw's machinery (cuda_sample.cu): a block's slice of the row and the cluster around it, the
// exchanges between the blocks, the scans, sums, walks and radix selections over the row. Included by
// cuda_sample.cu alone.
//
// What keeps it fast: histograms take 32-bit shared atomics only (a 64-bit add is a compare-and-swap loop that
// a peaked row's few hot bins turn into long retries): a weight is split in two 20-bit halves whose per-copy
// sums stay exact in 32 bits, and the 32 lanes of a warp add to 16 copies, so a warp's atomics collide at most
// in pairs. The last digit's histogram gives the tie counts, so a selection makes no counting pass of its own.
// The scalars of an exchange are read by one lane per rank at once, not one rank after another; the walk to a
// token (and to the n-th tie) picks its warp and lane by warp scans; the row's scan is one block reduction; the
// log-sum-exp and the top-p mass share a pass when no adjustment separates the raw row from the adjusted one. A draw
// runs on the 8 (or 16) SMs of one cluster, so every pass over the row is bound by those SMs' issue: passes keep four
// tokens in flight per thread (for_slice), the row is scanned as it is loaded, the top-p selection's first digit is
// added up in the log-sum-exp's pass, the draw sums each thread's run once and walks only the chosen run, shuffle-heavy
// finishing work runs in one warp (the SM has one shuffle unit for all 32), and the block that finds the token reports
// it (no exchange after the draw). Rows of few values: a selection stops at the digit whose tokens all hold one key
// (each pass finds the range of the keys it counts), and a draw whose cut falls inside a tie places the ties in
// its own pass (draw_cut) instead of walking to the cut's last tie first.
//
// Every decision that steers a barrier (an error, a truncation, the loop over digits) is taken on values every
// thread of the cluster holds alike, so every block passes the same cluster barriers; work that only one block
// does (the walk to a token) has block barriers only.
#pragma once

#include <cooperative_groups.h>

#include <cstddef>
#include <cstdint>

#include "ops/sample_args.h"

namespace dsv4::cuda::draw {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kMaxCluster = 16;  // blocks per row at most (select_sample)
constexpr int kWarps = kThreads / 32;
// Radix histograms per block: lane l adds to copy l % 16, padded to 257 bins so that lanes adding to one bin
// hit different banks (bank = copy + bin mod 32): when a whole warp adds to one bin, its atomics take two
// rounds, not 32. (One copy per lane would take one, but a digit's combine reads every copy: 16 halve that.)
constexpr int kCopies = 16;
constexpr int kBinStride = 257;
// Tokens per block at most. A thread takes ceil(n / kThreads) <= 32 tokens, so a histogram copy (two lanes of
// each of the 32 warps) sums at most 2048 weight halves of at most 2^20 each: 2^31, exact in 32 bits.
constexpr int64_t kMaxSlice = 32768;
constexpr int kHalfBits = 20;  // a weight (<= 2^40) = hi * 2^20 + lo
constexpr float kInf = __builtin_huge_valf();
using u64 = unsigned long long;

// A prefix of the order "higher key, then lower id": token i belongs iff key > b.key or (key == b.key and
// i <= b.last).
struct Bound {
    uint32_t key;
    int32_t last;
};
__device__ __forceinline__ bool in_bound(const Bound& b, uint32_t k, int32_t i) {
    return k > b.key || (k == b.key && i <= b.last);
}

// A prefix that ends inside a tie, left unresolved for the draw (draw_cut): every token with a key above `key`,
// then the first m tokens of `within` with key `key`, in id order.
struct TieCut {
    bool active = false;
    uint32_t key = 0;
    unsigned long long m = 0;
    Bound within{0u, -1};
};

// What a block publishes to the cluster in one exchange.
constexpr int kFinish = 32;  // a selection whose chosen bin holds at most this many tokens finishes in one warp

struct Pub {
    u64 v[256];         // a digit's histogram: the measure per bin
    uint32_t cnt[256];  // and the tokens per bin
    uint32_t cand_key[kFinish];
    int32_t cand_id[kFinish];
    int32_t cand_n;
    float f;
    int32_t i[3];
    int32_t top_ids[kSampleMaxTop];
    float top_l[kSampleMaxTop];
    int32_t top_n;
    uint32_t kmin, kmax;  // the range of the keys a digit's pass counted (kmin > kmax: none)
};

struct Scan {
    float max;
    int32_t first_max;  // first token holding the max
    int32_t first_bad;  // first NaN / +inf, or INT32_MAX
    int32_t n_finite;
};

struct alignas(16) Shared {                // 16: the histograms are cleared with 16-byte stores
    Pub pub[2];                            // alternating, so a slot is rewritten only two barriers after it was read
    uint32_t sub[3][kCopies][kBinStride];  // radix histograms: [0] low, [1] high halves of the measure, [2] tokens
    u64 hist[256];                         // the cluster's histogram of the current digit
    u64 warp_u64[2][kWarps];
    float warp_f[kWarps];
    int32_t warp_i[3][kWarps];
    u64 walk_left;
    uint32_t walk_warp;
    int32_t walk_found;
    uint32_t sel_bin;
    u64 sel_need;
    uint32_t kmin, kmax;  // the block's key range of the current digit (UINT32_MAX, 0 between digits)
    TieCut cut;           // a selection's unresolved tie (radix_select's cut), inactive from the kernel's start
    int32_t cand_n;
    int32_t top_count;
    Bound fin;                       // finish_small's answer
    int32_t top_ids[kSampleMaxTop];  // rank 0: the row's top alternatives, in order
    float top_l[kSampleMaxTop];
    int32_t all_ids[kMaxCluster * kSampleMaxTop];  // rank 0: every rank's members (-1: none), gather_top's copy
    float all_l[kMaxCluster * kSampleMaxTop];
};

static_assert(offsetof(Shared, sub) % 16 == 0 && sizeof(Shared::sub) % 16 == 0, "sub is cleared in 16-byte stores");

// The block's slice of the row and the cluster around it. An exchange: this block writes slot(), publish()
// (the cluster barrier: every write before it is visible to every rank after it), reads remote(q), then done().
// A slot is rewritten two exchanges later, after every rank has passed the barrier that follows its reads.
// A cluster barrier is also a block barrier.
template <int CL>
struct Row {
    const float* x;  // shared: the slice (raw, then adjusted)
    int64_t lo, n;   // token ids [lo, lo + n)
    int rank;
    Shared& sh;
    int turn = 0;

    __device__ Pub& slot() { return sh.pub[turn]; }
    __device__ void publish() { cg::this_cluster().sync(); }
    __device__ const Pub& remote(int q) { return *cg::this_cluster().map_shared_rank(&sh.pub[turn], q); }
    __device__ void done() { turn ^= 1; }
};

// f(j, x) for this thread's slice indices j = threadIdx.x + i * kThreads in ascending order, four loads in
// flight at a time: a pass over the slice is bound by the latency of each token's chain (load, key, weight),
// so independent tokens are interleaved.
template <class F>
__device__ __forceinline__ void for_slice(const float* x, int64_t n64, F&& f) {
    const int n = (int)n64;
    int j = threadIdx.x;
    for (; j + 3 * kThreads < n; j += 4 * kThreads) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = x[j + u * kThreads];
#pragma unroll
        for (int u = 0; u < 4; ++u) f(j + u * kThreads, v[u]);
    }
    for (; j < n; j += kThreads) f(j, x[j]);
}

__device__ __forceinline__ u64 warp_sum(u64 v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(~0u, v, off);
    return v;
}

// Sums of two values over the block (every thread gets both; two block barriers).
__device__ void block_sum2(u64& a, u64& b, Shared& sh) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) {
        sh.warp_u64[0][warp] = a;
        sh.warp_u64[1][warp] = b;
    }
    __syncthreads();
    a = warp_sum(sh.warp_u64[0][lane]);
    b = warp_sum(sh.warp_u64[1][lane]);
    __syncthreads();
}

// One exchange of two values per block: the sums over the ranks before this one and over all ranks. Every warp
// reads the CL slots itself (one lane per rank), so no block barrier follows.
struct Sums {
    u64 before, total;
};
template <int CL>
__device__ void cluster_sum2(Row<CL>& r, u64 a, u64 b, Sums& sa, Sums& sb) {
    static_assert(CL <= 32, "one lane per rank");
    if (threadIdx.x == 0) {
        r.slot().v[0] = a;
        r.slot().v[1] = b;
    }
    r.publish();
    const int lane = threadIdx.x % 32;
    u64 va = 0, vb = 0;
    if (lane < CL) {
        const Pub& p = r.remote(lane);
        va = p.v[0];
        vb = p.v[1];
    }
    sa = {warp_sum(lane < r.rank ? va : 0), warp_sum(va)};
    sb = {warp_sum(lane < r.rank ? vb : 0), warp_sum(vb)};
    r.done();
}

// The largest of one int per block, over the cluster.
template <int CL>
__device__ int32_t cluster_max(Row<CL>& r, int32_t v) {
    if (threadIdx.x == 0) r.slot().i[0] = v;
    r.publish();
    const int lane = threadIdx.x % 32;
    int32_t m = lane < CL ? r.remote(lane).i[0] : INT32_MIN;
    for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(~0u, m, off));
    r.done();
    return m;
}

// Scan merge: the larger maximum (on a tie the lower first id), the lower first bad id, the finite counts added.
__device__ __forceinline__ void merge(Scan& s, const Scan& o) {
    if (o.max > s.max || (o.max == s.max && o.first_max < s.first_max)) {
        s.max = o.max;
        s.first_max = o.first_max;
    }
    s.first_bad = min(s.first_bad, o.first_bad);
    s.n_finite += o.n_finite;
}
__device__ __forceinline__ Scan warp_merge(Scan s) {
    for (int off = 16; off > 0; off /= 2) {
        const Scan o{__shfl_xor_sync(~0u, s.max, off), __shfl_xor_sync(~0u, s.first_max, off),
                     __shfl_xor_sync(~0u, s.first_bad, off), __shfl_xor_sync(~0u, s.n_finite, off)};
        merge(s, o);
    }
    return s;
}

// One token into a thread's scan. A thread's maximum is held by its first token of that value (strict >, ids
// ascending), so the merges give the row's first token holding the maximum. A maximum is never NaN (NaN
// compares false).
__device__ __forceinline__ void scan_add(Scan& s, float x, int32_t id) {
    if (!(x < kInf) && s.first_bad == INT32_MAX) s.first_bad = id;
    if (x > s.max) {
        s.max = x;
        s.first_max = id;
    }
    s.n_finite += x > -kInf && x < kInf;
}
constexpr Scan kScanEmpty{-kInf, INT32_MAX, INT32_MAX, 0};

// The threads' scans merged over the cluster (every thread gets the row's).
template <int CL>
__device__ Scan scan_merge(Row<CL>& r, Scan s) {
    Shared& sh = r.sh;
    s = warp_merge(s);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sh.warp_f[warp] = s.max;
        sh.warp_i[0][warp] = s.first_max;
        sh.warp_i[1][warp] = s.first_bad;
        sh.warp_i[2][warp] = s.n_finite;
    }
    __syncthreads();
    if (warp == 0) {
        s = warp_merge(Scan{sh.warp_f[lane], sh.warp_i[0][lane], sh.warp_i[1][lane], sh.warp_i[2][lane]});
        if (lane == 0) {
            Pub& p = r.slot();
            p.f = s.max;
            p.i[0] = s.first_max;
            p.i[1] = s.first_bad;
            p.i[2] = s.n_finite;
        }
    }
    r.publish();  // also the block barrier before sh.warp_* is written again
    s = kScanEmpty;
    if (lane < CL) {
        const Pub& p = r.remote(lane);
        s = Scan{p.f, p.i[0], p.i[1], p.i[2]};
    }
    s = warp_merge(s);
    r.done();
    if (s.first_max == INT32_MAX) s.first_max = 0;  // every token -inf
    return s;
}

template <int CL>
__device__ Scan scan_row(Row<CL>& r) {
    Scan s = kScanEmpty;
    for_slice(r.x, r.n, [&](int j, float x) { scan_add(s, x, (int32_t)(r.lo + j)); });
    return scan_merge(r, s);
}

// The measure of a token: 1 (counts) or its integer weight.
struct Measure {
    bool by_weight;
    float max, scale;
    __device__ u64 operator()(float x) const { return by_weight ? (u64)sample_weight(x, max, scale) : 1ull; }
};

// Two sums over the row: f(j, x) gives slice index j's (value x's) two terms.
template <int CL, class F>
__device__ void sum_row2(Row<CL>& r, F&& f, u64& a, u64& b) {
    a = 0;
    b = 0;
    for_slice(r.x, r.n, [&](int j, float x) {
        u64 ta, tb;
        f(j, x, ta, tb);
        a += ta;
        b += tb;
    });
    block_sum2(a, b, r.sh);
    Sums sa, sb;
    cluster_sum2(r, a, b, sa, sb);
    a = sa.total;
    b = sb.total;
}

// The measure summed over the tokens of `within`, over the row.
template <int CL>
__device__ u64 sum_within(Row<CL>& r, const Bound& within, const Measure& m) {
    u64 a, b;
    sum_row2(
        r,
        [&](int j, float x, u64& ta, u64& tb) {
            ta = in_bound(within, sample_key(x), (int32_t)(r.lo + j)) ? m(x) : 0;
            tb = 0;
        },
        a, b);
    return a;
}

// Inclusive prefix sum over the lanes of a warp.
__device__ __forceinline__ u64 warp_scan(u64 v) {
    const int lane = threadIdx.x % 32;
    for (int off = 1; off < 32; off *= 2) {
        const u64 y = __shfl_up_sync(~0u, v, off);
        if (lane >= off) v += y;
    }
    return v;
}

// The lane holding the t-th unit (0-based) of the lanes' sums s in lane order, and the units before it (every
// lane gets both); past the total, the last lane with units and t clamped into its share; -1 if none has any.
__device__ __forceinline__ int warp_pick(u64 s, u64& t) {
    const u64 incl = warp_scan(s);
    const unsigned hit = __ballot_sync(~0u, s > 0 && incl > t);
    const unsigned any = __ballot_sync(~0u, s > 0);
    const int l = hit ? __ffs(hit) - 1 : any ? 31 - __clz(any) : -1;
    if (l < 0) return -1;
    const u64 before = __shfl_sync(~0u, incl - s, l), share = __shfl_sync(~0u, s, l);
    t = hit ? t - before : share - 1;
    return l;
}

// A block's walks by running sums (the draw, the n-th tie): thread i owns the run of P = ceil(n / kThreads)
// slice indices from i * P (P <= 32, kMaxSlice), so runs, warps and ranks are all in id order.
struct RunSums {
    int P;
    u64 mine;   // this thread's run
    u64 warps;  // warp `lane`'s, the same in every warp
    u64 block;
};

// Every thread's run summed once (from a start rotated by its lane, so the lanes of a warp read different banks),
// the warps' sums and the block's. Block-wide: every thread of the block calls it.
template <int CL, class Val>
__device__ RunSums run_sums(Row<CL>& r, Val&& val) {
    Shared& sh = r.sh;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = (int)r.n, P = max(1, (n + kThreads - 1) / kThreads), rb = threadIdx.x * P;
    u64 mine = 0;
    int o = lane % P;
#pragma unroll 4
    for (int i = 0; i < P; ++i) {
        if (rb + o < n) mine += (u64)val(rb + o);
        o = o + 1 == P ? 0 : o + 1;
    }
    const u64 wsum = warp_sum(mine);
    if (lane == 0) sh.warp_u64[0][warp] = wsum;
    if (threadIdx.x == 0) sh.walk_found = -1;
    __syncthreads();
    const u64 warps = sh.warp_u64[0][lane];
    return {P, mine, warps, warp_sum(warps)};
}

// The first slice index, in id order, at which the running sum of val exceeds t (t below rs.block; -1 if nothing
// has any): the warps' sums pick the warp, its lanes' sums the lane, and that lane's run is walked by its whole
// warp, a token per lane. Block-wide; walk_found stays as written until the caller's next exchange.
template <int CL, class Val>
__device__ int32_t walk_runs(Row<CL>& r, const RunSums& rs, u64 t, Val&& val) {
    Shared& sh = r.sh;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w = warp_pick(rs.warps, t);  // every warp alike
    if (warp == w) {
        const int l = warp_pick(rs.mine, t);
        const int lb = (w * 32 + (l < 0 ? 0 : l)) * rs.P, j = lb + lane;
        const u64 v = lane < rs.P && j < (int)r.n ? (u64)val(j) : 0;
        const int f = warp_pick(v, t);
        if (lane == 0) sh.walk_found = f < 0 ? -1 : lb + f;
    }
    __syncthreads();
    return sh.walk_found;
}

// The draw over the kept weights val(j): with t = min(floor(u * K), K - 1) for the cluster's total K, the first
// token in id order whose running kept weight exceeds t (-1 if nothing is kept). No exchange follows: one block
// learns it and sets `report` (the block whose slice holds t; rank 0 when nothing is kept).
template <int CL, class Val>
__device__ int32_t draw_kept(Row<CL>& r, double u, Val&& val, bool& report) {
    const RunSums rs = run_sums(r, val);
    Sums ks, unused;
    cluster_sum2(r, rs.block, 0, ks, unused);
    const u64 K = ks.total;
    report = K == 0 && r.rank == 0;
    if (K == 0) return -1;
    u64 t = (u64)(u * (double)K);
    if (t >= K) t = K - 1;
    if (t < ks.before || t >= ks.before + rs.block) return -1;  // block-uniform
    report = true;
    const int32_t j = walk_runs(r, rs, t - ks.before, val);
    return j < 0 ? -1 : (int32_t)(r.lo + j);
}

// The float of an order-preserving key (sample_key's inverse).
__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// draw_kept's draw when the kept prefix ends inside a tie (cut): weight(x) is a kept token's weight (zero where
// min-p drops it); the tokens above cut.key weigh weight(x), the first cut.m ties in id order the tie value's
// weight, the other ties nothing. One pass sums each thread's run above the key and counts its ties; scans over
// the lanes, the warps and the ranks give every run its ties' places, so no earlier pass has to find the m-th
// tie (nth_tie's pass, walk and exchange). Same token as nth_tie followed by draw_kept.
template <int CL, class Weight>
__device__ int32_t draw_cut(Row<CL>& r, double u, const TieCut& cut, Weight&& weight, bool& report) {
    Shared& sh = r.sh;
    const TieCut c = cut;  // out of shared memory once
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = (int)r.n, P = max(1, (n + kThreads - 1) / kThreads), rb = threadIdx.x * P;
    auto is_tie = [&](int j, uint32_t k) { return k == c.key && in_bound(c.within, k, (int32_t)(r.lo + j)); };
    auto umin = [](u64 a, u64 b) { return a < b ? a : b; };
    // This thread's run (from a start rotated by its lane, as run_sums): the weight above the key, the ties.
    u64 above = 0;
    uint32_t ties = 0;
    int o = lane % P;
#pragma unroll 4
    for (int i = 0; i < P; ++i) {
        const int j = rb + o;
        if (j < n) {
            const float x = r.x[j];
            const uint32_t k = sample_key(x);
            if (k > c.key)
                above += (u64)weight(x);
            else
                ties += is_tie(j, k);
        }
        o = o + 1 == P ? 0 : o + 1;
    }
    // The ties before this thread's run in the block: a scan over the lanes, then one over the warps.
    uint32_t incl = ties;
    for (int off = 1; off < 32; off *= 2) {
        const uint32_t y = __shfl_up_sync(~0u, incl, off);
        if (lane >= off) incl += y;
    }
    const u64 above_warp = warp_sum(above);
    if (lane == 31) sh.warp_i[0][warp] = (int32_t)incl;
    if (lane == 0) sh.warp_u64[0][warp] = above_warp;
    __syncthreads();
    const uint32_t wt = (uint32_t)sh.warp_i[0][lane];  // warp `lane`'s ties
    uint32_t wincl = wt;
    for (int off = 1; off < 32; off *= 2) {
        const uint32_t y = __shfl_up_sync(~0u, wincl, off);
        if (lane >= off) wincl += y;
    }
    const uint32_t block_ties = __shfl_sync(~0u, wincl, 31);
    const uint32_t warp_before = __shfl_sync(~0u, wincl - wt, warp);
    const u64 block_above = warp_sum(sh.warp_u64[0][lane]);
    Sums sa, st;
    cluster_sum2(r, block_above, block_ties, sa, st);
    const u64 m = umin(c.m, st.total);
    const u64 w_tie = (u64)weight(key_value(c.key));
    auto kept_ties = [&](u64 first, u64 count) { return umin(m, first + count) - umin(m, first); };
    const u64 K = sa.total + w_tie * m;
    report = K == 0 && r.rank == 0;
    if (K == 0) return -1;
    u64 t = (u64)(u * (double)K);
    if (t >= K) t = K - 1;
    const u64 before = sa.before + w_tie * umin(m, st.before);
    const u64 block = block_above + w_tie * kept_ties(st.before, block_ties);
    if (t < before || t >= before + block) return -1;  // block-uniform
    report = true;
    t -= before;
    // The walk of walk_runs over the kept weights: warp, lane, then the lane's run a token per lane, each tie's
    // place counted by a ballot over the run.
    const u64 first_tie = st.before + warp_before + (incl - ties);  // the place of this run's first tie
    const u64 mine = above + w_tie * kept_ties(first_tie, ties);
    const u64 mine_warp = warp_sum(mine);
    if (lane == 0) sh.warp_u64[1][warp] = mine_warp;
    if (threadIdx.x == 0) sh.walk_found = -1;
    __syncthreads();
    const int w = warp_pick(sh.warp_u64[1][lane], t);  // every warp alike
    if (warp == w) {
        const int l = warp_pick(mine, t);
        const int src = l < 0 ? 0 : l;
        const u64 run_first_tie = __shfl_sync(~0u, first_tie, src);
        const int lb = (w * 32 + src) * P, j = lb + lane;
        const bool in = lane < P && j < n;
        const float x = in ? r.x[j] : 0.0f;
        const uint32_t k = sample_key(x);
        const bool tie = in && is_tie(j, k);
        const u64 place = run_first_tie + __popc(__ballot_sync(~0u, tie) & ((1u << lane) - 1u));
        u64 v = 0;
        if (in && k > c.key)
            v = (u64)weight(x);
        else if (tie && place < m)
            v = w_tie;
        const int f = warp_pick(v, t);
        if (lane == 0) sh.walk_found = f < 0 ? -1 : lb + f;
    }
    __syncthreads();
    const int32_t jf = sh.walk_found;
    return jf < 0 ? -1 : (int32_t)(r.lo + jf);
}

// The n-th (1-based) token of `within` with key `key`, in id order over the row (the last one if fewer), given
// every rank's count of them (lane q < CL holds rank q's in `count`; the same in every warp).
template <int CL>
__device__ int32_t nth_tie(Row<CL>& r, const Bound& within, uint32_t key, u64 n, u64 count) {
    auto is_tie = [&](int j) -> uint32_t {
        const uint32_t k = sample_key(r.x[j]);
        return k == key && in_bound(within, k, (int32_t)(r.lo + j));
    };
    const int lane = threadIdx.x % 32;
    const u64 before = warp_sum(lane < r.rank ? count : 0), total = warp_sum(count);
    const u64 mine = __shfl_sync(~0u, count, r.rank);
    if (n > total) n = total;
    // Block-uniform: every thread holds the same counts.
    int32_t id = -1;
    if (mine > 0 && n > before && n <= before + mine) {
        const int32_t j = walk_runs(r, run_sums(r, is_tie), n - before - 1, is_tie);
        id = j < 0 ? -1 : (int32_t)(r.lo + j);
    }
    return cluster_max(r, id);
}

// The end of the shortest prefix of `within` that reaches `need` when what is left to decide is the order of
// the few tokens (<= kFinish over the cluster) of `within` whose keys match `prefix` under `mask`, and `need`
// is what they must add. Each block publishes its candidates; every warp then puts them in order itself (a
// lane per candidate: its place is the number of candidates ahead of it, (key, id) pairs being distinct), adds
// up the measures in that order, and takes the first place that reaches need.
template <int CL>
__device__ Bound finish_small(Row<CL>& r, const Bound& within, const Measure& m, uint32_t prefix, uint32_t mask,
                              u64 need) {
    Shared& sh = r.sh;
    Pub& mine = r.slot();
    for_slice(r.x, r.n, [&](int j, float x) {
        const uint32_t k = sample_key(x);
        if ((k & mask) != prefix || !in_bound(within, k, (int32_t)(r.lo + j))) return;
        const int s = atomicAdd(&sh.cand_n, 1);
        if (s < kFinish) {
            mine.cand_key[s] = k;
            mine.cand_id[s] = (int32_t)(r.lo + j);
        }
    });
    __syncthreads();
    if (threadIdx.x == 0) mine.cand_n = min(sh.cand_n, kFinish);
    r.publish();
    // One warp gathers and orders the candidates (every warp doing it would queue ~200 shuffles per warp on the
    // SM's shuffle unit); the others wait at the block barrier for its answer.
    if (threadIdx.x < 32) {
        // Lane q reads rank q's count; a scan over them gives every lane the rank and place of its candidate, so
        // the remote reads are two rounds, not one per rank.
        const int lane = threadIdx.x % 32;
        const int nq = lane < CL ? r.remote(lane).cand_n : 0;
        int incl = nq;
        for (int off = 1; off < 32; off *= 2) {
            const int y = __shfl_up_sync(~0u, incl, off);
            if (lane >= off) incl += y;
        }
        const int total = __shfl_sync(~0u, incl, 31);
        int q = 0;  // the rank holding candidate `lane`: the ranks whose candidates all come before it
#pragma unroll
        for (int i = 0; i < CL; ++i) q += __shfl_sync(~0u, incl, i) <= lane;
        const int incl_prev = __shfl_sync(~0u, incl, q > 0 ? q - 1 : 0);  // every lane takes part in the shuffle
        const int before = q > 0 ? incl_prev : 0;
        const bool valid = lane < total;
        uint32_t key = 0;
        int32_t id = 0;
        if (valid) {
            const Pub& p = r.remote(q);
            key = p.cand_key[lane - before];
            id = p.cand_id[lane - before];
        }
        int place = 0;
        for (int i = 0; i < 32; ++i) {
            const uint32_t ki = __shfl_sync(~0u, key, i);
            const int32_t ii = __shfl_sync(~0u, id, i);
            place += i < total && (ki > key || (ki == key && ii < id));
        }
        const u64 mv = valid ? m(key_value(key)) : 0;
        u64 cum = 0;
        for (int i = 0; i < 32; ++i) {
            const u64 mi = __shfl_sync(~0u, mv, i);
            const int pi = __shfl_sync(~0u, place, i);
            if (i < total && pi <= place) cum += mi;
        }
        // The first place that reaches need (past every place, unreachable: the last).
        const bool reach = __any_sync(~0u, valid && cum >= need);
        int pick = reach ? (valid && cum >= need ? place : INT32_MAX) : (valid ? place : -1);
        for (int off = 16; off > 0; off /= 2) {
            const int o = __shfl_xor_sync(~0u, pick, off);
            pick = reach ? min(pick, o) : max(pick, o);
        }
        const unsigned at = __ballot_sync(~0u, valid && place == pick);
        const int src = at ? __ffs(at) - 1 : 0;
        const uint32_t fk = __shfl_sync(~0u, key, src);
        const int32_t fi = __shfl_sync(~0u, id, src);
        if (lane == 0) sh.fin = {fk, fi};
    }
    __syncthreads();  // sh.fin is written again only by a later selection, many barriers on
    r.done();
    return sh.fin;
}

// A thread's additions to a digit's histogram copies. A thread adds up a run of its tokens in one bin before it
// touches shared memory: a peaked row puts most keys in a few bins, and every atomic on one address waits for
// the one before. The halves of a run stay below 32 * 2^20 (a thread holds at most 32 tokens).
struct HistAdd {
    uint32_t* lo;
    uint32_t* hi;
    uint32_t* nt;
    bool by_weight;
    uint32_t cur = 0, run_lo = 0, run_hi = 0, run_n = 0;
    uint32_t kmin = UINT32_MAX, kmax = 0;  // the range of the keys added
    __device__ HistAdd(Shared& sh, bool weighted)
        : lo(sh.sub[0][threadIdx.x % kCopies]),
          hi(sh.sub[1][threadIdx.x % kCopies]),
          nt(sh.sub[2][threadIdx.x % kCopies]),
          by_weight(weighted) {}
    __device__ void flush() {
        if (run_lo) atomicAdd(&lo[cur], run_lo);
        if (run_hi) atomicAdd(&hi[cur], run_hi);
        if (by_weight) atomicAdd(&nt[cur], run_n);  // counts: the measure is the count
        run_lo = run_hi = run_n = 0;
    }
    __device__ void add(uint32_t key, uint32_t bin, u64 w) {
        kmin = min(kmin, key);
        kmax = max(kmax, key);
        if (bin != cur && run_n) flush();
        cur = bin;
        run_lo += (uint32_t)(w & ((1ull << kHalfBits) - 1));
        run_hi += (uint32_t)(w >> kHalfBits);
        ++run_n;
    }
    __device__ void finish() {
        if (run_n) flush();
    }
};
constexpr int kFirstShift = 24;  // the first digit: key bits 24..31

// The shortest prefix of `within` (in key-then-id order) whose measure reaches `need` (>= 1, at most the
// measure of `within`). On entry and on return every histogram copy is zero (cleared at the kernel's start,
// then by the threads that read a digit's histogram, before the exchange barrier that precedes the next
// digit's atomics). A digit whose chosen bin holds few tokens ends the selection (finish_small); a spread row
// gets there after three digits, a row of ties picks the tie by count: after the last digit, or as soon as the
// tokens a digit counted all hold one key (each pass also finds the range of the keys it counts, so an all-equal
// row goes to its tie after the first digit and a row of few values one digit after the values separate).
// first: the caller's pass already added every token of `within` to the first digit's copies (HistAdd,
// kFirstShift), and this thread's range of their keys is first->kmin..kmax. cut: a selection that ends inside
// a tie of more than kFinish tokens is returned there unresolved (for draw_cut, which finds the tie in the
// draw's own pass) and the Bound is then only its key. `cut` is in shared memory (sh.cut): the block's threads
// share one copy, and it holds no registers while other work runs.
template <int CL>
__device__ Bound radix_select(Row<CL>& r, const Bound& within, const Measure& m, u64 need,
                              const HistAdd* first = nullptr, TieCut* cut = nullptr) {
    Shared& sh = r.sh;
    const int lane = threadIdx.x % 32;
    uint32_t prefix = 0, mask = 0;
    for (int shift = kFirstShift; shift >= 0; shift -= 8) {
        uint32_t kmin, kmax;
        if (first && shift == kFirstShift) {
            kmin = first->kmin;
            kmax = first->kmax;
        } else {
            HistAdd h(sh, m.by_weight);
            for_slice(r.x, r.n, [&](int j, float x) {
                const uint32_t k = sample_key(x);
                if ((k & mask) != prefix || !in_bound(within, k, (int32_t)(r.lo + j))) return;
                h.add(k, (k >> shift) & 255u, m(x));
            });
            h.finish();
            kmin = h.kmin;
            kmax = h.kmax;
        }
        kmin = __reduce_min_sync(~0u, kmin);
        kmax = __reduce_max_sync(~0u, kmax);
        if (lane == 0) {
            atomicMin(&sh.kmin, kmin);
            atomicMax(&sh.kmax, kmax);
        }
        __syncthreads();
        const int b = threadIdx.x;
        if (b == 0) {  // the block's range out, and reset for the next digit (its atomics follow the exchange)
            r.slot().kmin = sh.kmin;
            r.slot().kmax = sh.kmax;
            sh.kmin = UINT32_MAX;
            sh.kmax = 0;
        }
        if (b < 256) {
            u64 t = 0;
            uint32_t c = 0;
            for (int h = 0; h < kCopies; ++h) {
                const uint32_t l = sh.sub[0][h][b], u = sh.sub[1][h][b], nn = sh.sub[2][h][b];
                t += ((u64)u << kHalfBits) + l;
                c += nn;
                if (l) sh.sub[0][h][b] = 0;  // a digit touches few bins: store only where it did
                if (u) sh.sub[1][h][b] = 0;
                if (nn) sh.sub[2][h][b] = 0;
            }
            r.slot().v[b] = t;
            r.slot().cnt[b] = m.by_weight ? c : (uint32_t)t;
        }
        r.publish();
        if (b < 256) {
            u64 t = 0;
#pragma unroll
            for (int q = 0; q < CL; ++q) t += r.remote(q).v[b];  // no store between: the loads overlap
            sh.hist[b] = t;
        }
        __syncthreads();
        // The bin holding the need-th unit, from the top: warp 0, 8 bins per lane (lane 0 the highest).
        if (threadIdx.x < 32) {
            u64 s = 0;
            for (int j = 0; j < 8; ++j) s += sh.hist[255 - lane * 8 - j];
            u64 incl = s;
            for (int off = 1; off < 32; off *= 2) {
                const u64 y = __shfl_up_sync(~0u, incl, off);
                if (lane >= off) incl += y;
            }
            const u64 excl = incl - s;
            const unsigned hit = __ballot_sync(~0u, incl >= need && s > 0);
            const int hl = hit ? __ffs(hit) - 1 : 31;
            if (lane == hl) {
                u64 before = excl;
                int bb = 255 - lane * 8, j = 0;
                for (; j < 8; ++j, --bb) {
                    const u64 h = sh.hist[bb];
                    if (h > 0 && before + h >= need) break;
                    before += h;
                }
                if (j == 8) {  // unreachable: need never exceeds the group's measure; keep the lowest bin with any
                    bb = 255 - lane * 8 - 7;
                    before = excl;
                    for (int jj = 0; jj < 8; ++jj)
                        if (sh.hist[255 - lane * 8 - jj] > 0) bb = 255 - lane * 8 - jj;
                    for (int c = 255 - lane * 8; c > bb; --c) before += sh.hist[c];
                    need = before + sh.hist[bb];
                }
                sh.sel_bin = (uint32_t)bb;
                sh.sel_need = need - before;
            }
            if (lane == 0) sh.cand_n = 0;  // finish_small's counter; its last user passed barriers since
        }
        __syncthreads();  // the next writes of hist and sel_* come after the next exchange barrier
        const uint32_t bin = sh.sel_bin;
        prefix |= bin << shift;
        mask |= 255u << shift;
        need = sh.sel_need;
        // Every rank's tokens in the chosen bin (lane q < CL: rank q's; the same in every warp). The slots stay
        // unwritten until two exchanges on.
        const u64 count_q = lane < CL ? r.remote(lane).cnt[bin] : 0;
        const uint32_t kmin_q = lane < CL ? r.remote(lane).kmin : UINT32_MAX;
        const uint32_t kmax_q = lane < CL ? r.remote(lane).kmax : 0;
        r.done();
        const u64 count = warp_sum(count_q);
        if (count <= kFinish) return finish_small(r, within, m, prefix, mask, need);
        // The last digit's bins are whole keys; and when every token this digit counted holds one key, the
        // chosen bin holds them all. Either way ties of one key, each of the same weight w (positive, since
        // their bin's measure is): the tie that reaches need, found by count.
        const uint32_t lo_key = __reduce_min_sync(~0u, kmin_q), hi_key = __reduce_max_sync(~0u, kmax_q);
        if (shift == 0 || lo_key == hi_key) {
            const uint32_t key = shift == 0 ? prefix : lo_key;
            u64 w = 1;
            if (m.by_weight) {
                w = m(key_value(key));
                if (w == 0) w = 1;  // unreachable (a chosen bin has positive measure); keeps the division defined
            }
            if (cut) {
                if (threadIdx.x == 0) *cut = TieCut{true, key, (need + w - 1) / w, within};
                __syncthreads();  // every thread reads it from here on
                return {key, -1};
            }
            return {key, nth_tie(r, within, key, (need + w - 1) / w, count_q)};
        }
    }
    return {prefix, -1};  // not reached: the last digit returns
}

// The row's top alternatives (`top`: exactly the n_top best tokens, n_top <= kSampleMaxTop): each block
// publishes its members, rank 0 gathers them in parallel and puts each at its place in the order "higher
// logit, then lower id" (its place = the members ahead of it; (key, id) pairs are distinct).
template <int CL>
__device__ void gather_top(Row<CL>& r, const Bound& top) {
    Shared& sh = r.sh;
    if (threadIdx.x == 0) sh.top_count = 0;
    __syncthreads();
    Pub& mine = r.slot();
    for_slice(r.x, r.n, [&](int j, float x) {
        if (!in_bound(top, sample_key(x), (int32_t)(r.lo + j))) return;
        const int s = atomicAdd(&sh.top_count, 1);
        if (s < kSampleMaxTop) {
            mine.top_ids[s] = (int32_t)(r.lo + j);
            mine.top_l[s] = x;
        }
    });
    __syncthreads();
    if (threadIdx.x == 0) mine.top_n = min(sh.top_count, kSampleMaxTop);
    r.publish();
    if (r.rank == 0) {
        // Every member into this block's shared memory at once (thread t: member t % kSampleMaxTop of rank
        // t / kSampleMaxTop), then each member's place among them.
        static_assert(CL * kSampleMaxTop <= kThreads && CL <= kMaxCluster, "a thread per member");
        const int t = threadIdx.x, q = t / kSampleMaxTop, i = t % kSampleMaxTop;
        constexpr int kMembers = CL * kSampleMaxTop;
        if (t < kMembers) {
            const Pub& p = r.remote(q);
            const bool has = i < p.top_n;
            sh.all_ids[t] = has ? p.top_ids[i] : -1;
            sh.all_l[t] = has ? p.top_l[i] : 0.0f;
        }
        __syncthreads();
        const int32_t id = t < kMembers ? sh.all_ids[t] : -1;
        const float l = t < kMembers ? sh.all_l[t] : 0.0f;
        int place = 0, total = 0;
        if (id >= 0) {
            const uint32_t k = sample_key(l);
            for (int o = 0; o < kMembers; ++o) {
                const int32_t io = sh.all_ids[o];
                if (io < 0) continue;
                ++total;
                const uint32_t ko = sample_key(sh.all_l[o]);
                place += ko > k || (ko == k && io < id);
            }
            if (place < kSampleMaxTop) {
                sh.top_ids[place] = id;
                sh.top_l[place] = l;  // the raw logit until the log-sum-exp is subtracted
            }
            if (place == 0) sh.top_count = min(total, kSampleMaxTop);
        }
    }
    r.done();
    __syncthreads();
}

}  // namespace dsv4::cuda::draw
