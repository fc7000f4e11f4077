// The device draw's machinery (cuda_sample.cu): a block's slice of the row and the cluster around it, the
// exchanges between the blocks, the scans and sums over the row (here); the walks by running sums, the draw and
// the n-th tie (cuda_sample_walk.cuh); the radix selections and the top alternatives (cuda_sample_select.cuh).
// Included by cuda_sample.cu alone, through cuda_sample_select.cuh.
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
static_assert(kWarps == 32, "a warp's lanes cover the block's warps (scans over warps, radix_select's key range)");
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

// The float of an order-preserving key (sample_key's inverse).
__device__ __forceinline__ float key_value(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
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
    uint32_t warp_kmin[kWarps], warp_kmax[kWarps];  // the warps' key ranges of the current digit
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

}  // namespace dsv4::cuda::draw
