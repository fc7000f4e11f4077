// The token draw on the device (Backend::sample, ops/sample_args.h). One cluster of kCluster blocks per row:
// each block holds a contiguous slice of the row in shared memory, so every pass after the load reads shared
// memory, and the blocks combine their partial results through distributed shared memory (a cluster barrier
// per exchange). Selections are radix selects over order-preserving keys (4 digits of 8 bits) measured in
// counts (top-k, top_logprobs) or integer weights (top-p), so every sum is exact and the result is the CPU
// oracle's bit for bit; the draw walks the kept set in id order.
#include <cooperative_groups.h>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "ops/sample_args.h"

namespace dsv4::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = 8;  // blocks per row (the portable cluster size)
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

// What a block publishes to the cluster in one exchange.
struct Pub {
    u64 v[256];
    float f;
    int32_t i[3];
    int32_t top_ids[kSampleMaxTop];
    float top_l[kSampleMaxTop];
    int32_t top_n;
};

struct Shared {
    Pub pub[2];                      // alternating, so a slot is rewritten only two barriers after it was read
    u64 sub[kWarps / 2][256];        // radix histograms, one per pair of warps
    u64 hist[256];
    u64 warp_u64[kWarps];
    float warp_f[kWarps];
    int32_t warp_i[kWarps];
    u64 bu64;
    uint32_t bu32[2];
    float bf;
    int32_t top_count;
};

// The block's slice of the row and the cluster around it.
struct Row {
    const float* x;     // shared: the slice (raw, then adjusted)
    int64_t lo, n;      // token ids [lo, lo + n)
    int rank;
    Shared& sh;
    int turn = 0;

    // Cluster exchange: `fill` writes this block's Pub (called by thread 0 unless all_threads), a barrier,
    // then `read(q, pub)` for every rank q in order, by thread 0 (or all threads); then a block barrier.
    template <class Fill, class Read>
    __device__ void exchange(Fill&& fill, Read&& read, bool all_threads = false) {
        cg::cluster_group cluster = cg::this_cluster();
        Pub& mine = sh.pub[turn];
        if (all_threads || threadIdx.x == 0) fill(mine);
        cluster.sync();
        if (all_threads || threadIdx.x == 0)
            for (int q = 0; q < kCluster; ++q) read(q, *cluster.map_shared_rank(&mine, q));
        __syncthreads();
        turn ^= 1;
    }
};

// Block reductions through shared memory (every thread gets the result).
__device__ u64 block_sum(u64 v, Shared& sh) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(~0u, v, off);
    if (threadIdx.x % 32 == 0) sh.warp_u64[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t = 0;
        for (int w = 0; w < kWarps; ++w) t += sh.warp_u64[w];
        sh.bu64 = t;
    }
    __syncthreads();
    const u64 r = sh.bu64;
    __syncthreads();
    return r;
}
__device__ int32_t block_min(int32_t v, Shared& sh) {
    for (int off = 16; off > 0; off /= 2) v = min(v, __shfl_xor_sync(~0u, v, off));
    if (threadIdx.x % 32 == 0) sh.warp_i[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t t = INT32_MAX;
        for (int w = 0; w < kWarps; ++w) t = min(t, sh.warp_i[w]);
        sh.bu32[0] = (uint32_t)t;
    }
    __syncthreads();
    const int32_t r = (int32_t)sh.bu32[0];
    __syncthreads();
    return r;
}
__device__ float block_max(float v, Shared& sh) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(~0u, v, off));
    if (threadIdx.x % 32 == 0) sh.warp_f[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = -kInf;
        for (int w = 0; w < kWarps; ++w) t = fmaxf(t, sh.warp_f[w]);
        sh.bf = t;
    }
    __syncthreads();
    const float r = sh.bf;
    __syncthreads();
    return r;
}

struct Scan {
    float max;
    int32_t first_max;  // first token holding the max
    int32_t first_bad;  // first NaN / +inf, or INT32_MAX
    int32_t n_finite;
};

__device__ Scan scan_row(Row& r) {
    float mx = -kInf;
    int32_t bad = INT32_MAX, finite = 0, first = INT32_MAX;
    for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
        const float x = r.x[j];
        if (!(x < kInf) && bad == INT32_MAX) bad = (int32_t)(r.lo + j);
        if (x > mx) {
            mx = x;
            first = (int32_t)(r.lo + j);
        }
        finite += x > -kInf && x < kInf;
    }
    const float bmx = block_max(mx, r.sh);
    first = block_min(mx == bmx ? first : INT32_MAX, r.sh);
    bad = block_min(bad, r.sh);
    const u64 fin = block_sum((u64)finite, r.sh);
    Scan s{-kInf, INT32_MAX, INT32_MAX, 0};
    __shared__ Scan out;
    r.exchange(
        [&](Pub& p) {
            p.f = bmx;
            p.i[0] = first;
            p.i[1] = bad;
            p.i[2] = (int32_t)fin;
        },
        [&](int, const Pub& p) {
            if (p.f > s.max || (p.f == s.max && p.i[0] < s.first_max)) {
                s.max = p.f;
                s.first_max = p.i[0];
            }
            s.first_bad = min(s.first_bad, p.i[1]);
            s.n_finite += p.i[2];
            out = s;
        });
    s = out;
    __syncthreads();
    if (s.first_max == INT32_MAX) s.first_max = 0;  // every token -inf
    return s;
}

// The measure of a token: 1 (counts) or its integer weight.
struct Measure {
    bool by_weight;
    float max, scale;
    __device__ u64 operator()(float x) const { return by_weight ? (u64)sample_weight(x, max, scale) : 1ull; }
};

// The measure summed over the tokens of `within`, over the row.
__device__ u64 sum_within(Row& r, const Bound& within, const Measure& m) {
    u64 acc = 0;
    for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
        const float x = r.x[j];
        if (in_bound(within, sample_key(x), (int32_t)(r.lo + j))) acc += m(x);
    }
    const u64 mine = block_sum(acc, r.sh);
    u64 total = 0;
    r.exchange([&](Pub& p) { p.v[0] = mine; }, [&](int, const Pub& p) { total += p.v[0]; });
    if (threadIdx.x == 0) r.sh.bu64 = total;
    __syncthreads();
    total = r.sh.bu64;
    __syncthreads();
    return total;
}

// Warp w of the block owns the slice's ids [w * C, (w + 1) * C), lane-strided inside.
__device__ __forceinline__ int64_t warp_chunk(int64_t n) { return (n + kWarps * 32 - 1) / (kWarps * 32) * 32; }

// The `want`-th (1-based) token of the slice for which pred(j) holds, in id order, given that the slice holds
// at least that many; its id. Runs on the whole block.
template <class Pred>
__device__ int32_t nth_in_slice(Row& r, u64 want, Pred&& pred) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t C = warp_chunk(r.n), b0 = warp * C, e0 = min(r.n, b0 + C);
    int32_t cnt = 0;
    for (int64_t base = b0; base < e0; base += 32) cnt += __popc(__ballot_sync(~0u, base + lane < e0 && pred(base + lane)));
    if (lane == 0) r.sh.warp_i[warp] = cnt;
    __syncthreads();
    if (threadIdx.x == 0) {
        int w = 0;
        u64 left = want;
        for (; w < kWarps - 1; ++w) {
            if (left <= (u64)r.sh.warp_i[w]) break;
            left -= (u64)r.sh.warp_i[w];
        }
        r.sh.bu32[0] = (uint32_t)w;
        r.sh.bu64 = left;
    }
    __syncthreads();
    const int tw = (int)r.sh.bu32[0];
    const u64 left = r.sh.bu64;
    __syncthreads();
    if (warp == tw) {
        u64 seen = 0;
        int32_t last = -1;
        for (int64_t base = b0; base < e0; base += 32) {
            const unsigned bits = __ballot_sync(~0u, base + lane < e0 && pred(base + lane));
            const unsigned c = __popc(bits);
            if (c && seen + c >= left) {
                unsigned bb = bits;
                for (u64 j = 1; j < left - seen; ++j) bb &= bb - 1;
                last = (int32_t)(base + __ffs(bb) - 1);
                break;
            }
            if (c) last = (int32_t)(base + 31 - __clz(bits));
            seen += c;
        }
        if (lane == 0) r.sh.bu32[1] = (uint32_t)last;
    }
    __syncthreads();
    const int32_t j = (int32_t)r.sh.bu32[1];
    __syncthreads();
    return j < 0 ? -1 : (int32_t)(r.lo + j);
}

// The n-th (1-based) token of `within` with key `key`, in id order over the row (the last one if fewer).
__device__ int32_t nth_tie(Row& r, const Bound& within, uint32_t key, u64 n) {
    auto is_tie = [&](int64_t j) {
        const uint32_t k = sample_key(r.x[j]);
        return k == key && in_bound(within, k, (int32_t)(r.lo + j));
    };
    int32_t cnt = 0;
    for (int64_t j = threadIdx.x; j < r.n; j += kThreads) cnt += is_tie(j);
    const u64 mine = block_sum((u64)cnt, r.sh);
    // Ranks before this one, and the total.
    u64 before = 0, total = 0;
    r.exchange([&](Pub& p) { p.v[0] = mine; },
               [&](int q, const Pub& p) {
                   if (q < r.rank) before += p.v[0];
                   total += p.v[0];
                   r.sh.warp_u64[0] = before;
                   r.sh.warp_u64[1] = total;
               });
    before = r.sh.warp_u64[0];
    total = r.sh.warp_u64[1];
    __syncthreads();
    if (n > total) n = total;
    const bool here = mine > 0 && n > before && n <= before + mine;
    const int32_t id = here ? nth_in_slice(r, n - before, is_tie) : -1;
    int32_t found = -1;
    r.exchange([&](Pub& p) { p.i[0] = id; }, [&](int, const Pub& p) { found = max(found, p.i[0]); });
    if (threadIdx.x == 0) r.sh.bu32[0] = (uint32_t)found;
    __syncthreads();
    found = (int32_t)r.sh.bu32[0];
    __syncthreads();
    return found;
}

// The shortest prefix of `within` (in key-then-id order) whose measure reaches `need` (>= 1, at most the
// measure of `within`).
__device__ Bound radix_select(Row& r, const Bound& within, const Measure& m, u64 need) {
    Shared& sh = r.sh;
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < (kWarps / 2) * 256; b += kThreads) (&sh.sub[0][0])[b] = 0;
        __syncthreads();
        // Each thread adds up a run of its tokens in one bin before it touches shared memory: a peaked row puts
        // most keys in a few bins, and every atomic on one address waits for the one before.
        u64* mine = sh.sub[(threadIdx.x / 32) % (kWarps / 2)];
        uint32_t cur = 0;
        u64 run = 0;
        for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
            const float x = r.x[j];
            const uint32_t k = sample_key(x);
            if ((k & mask) != prefix || !in_bound(within, k, (int32_t)(r.lo + j))) continue;
            const uint32_t bin = (k >> shift) & 255u;
            if (bin != cur && run) {
                atomicAdd(&mine[cur], run);
                run = 0;
            }
            cur = bin;
            run += m(x);
        }
        if (run) atomicAdd(&mine[cur], run);
        __syncthreads();
        r.exchange(
            [&](Pub& p) {
                const int b = threadIdx.x;
                if (b < 256) {
                    u64 t = 0;
                    for (int h = 0; h < kWarps / 2; ++h) t += sh.sub[h][b];
                    p.v[b] = t;
                }
            },
            [&](int q, const Pub& p) {
                const int b = threadIdx.x;
                if (b < 256) sh.hist[b] = (q == 0 ? 0 : sh.hist[b]) + p.v[b];
            },
            true);
        // The bin holding the need-th unit, from the top: warp 0, 8 bins per lane (lane 0 the highest).
        if (threadIdx.x < 32) {
            const int lane = threadIdx.x;
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
                int b = 255 - lane * 8, j = 0;
                for (; j < 8; ++j, --b) {
                    const u64 h = sh.hist[b];
                    if (h > 0 && before + h >= need) break;
                    before += h;
                }
                if (j == 8) {  // unreachable: need never exceeds the group's measure; keep the lowest bin with any
                    b = 255 - lane * 8 - 7;
                    before = excl;
                    for (int jj = 0; jj < 8; ++jj)
                        if (sh.hist[255 - lane * 8 - jj] > 0) b = 255 - lane * 8 - jj;
                    for (int bb = 255 - lane * 8; bb > b; --bb) before += sh.hist[bb];
                    need = before + sh.hist[b];
                }
                sh.bu32[0] = (uint32_t)b;
                sh.bu64 = need - before;
            }
        }
        __syncthreads();
        const uint32_t b = sh.bu32[0];
        need = sh.bu64;
        __syncthreads();
        prefix |= b << shift;
        mask |= 255u << shift;
    }
    // Ties of key `prefix` (a group of positive measure) each weigh the same.
    u64 n = need;
    if (m.by_weight) {
        const u64 w = m(__uint_as_float((prefix & 0x80000000u) ? (prefix & 0x7fffffffu) : ~prefix));
        n = w == 0 ? ~0ull : (need + w - 1) / w;
    }
    return {prefix, nth_tie(r, within, prefix, n)};
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleOut* out, const float* logits, int64_t V,
                                                          const SampleArgs* args, const SampleAdjust* adjust) {
    extern __shared__ float slice[];
    __shared__ Shared sh;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int64_t row_i = blockIdx.x / kCluster;
    const SampleArgs a = args[row_i];
    const float* raw = logits + a.row * V;
    const int64_t S = (V + kCluster - 1) / kCluster;
    const int64_t lo = rank * S, hi = min(V, lo + S), n = hi > lo ? hi - lo : 0;
    // The slice into shared memory, eight loads in flight per thread.
    for (int64_t j0 = threadIdx.x; j0 < n; j0 += 8 * kThreads) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = j0 + u * kThreads < n ? raw[lo + j0 + u * kThreads] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (j0 + u * kThreads < n) slice[j0 + u * kThreads] = v[u];
    }
    __syncthreads();
    Row r{slice, lo, n, rank, sh};
    SampleOut* o = out + row_i;
    auto finish_error = [&](int32_t status, int32_t bad) {
        if (rank == 0 && threadIdx.x == 0) {
            o->status = status;
            o->bad_token = bad;
            o->token = -1;
            o->n_top = 0;
            o->logprob = 0;
        }
        cluster.sync();  // no block leaves while another may still read its shared memory
    };

    // The raw row: its scan, the log-sum-exp, the top alternatives.
    const Scan sr = scan_row(r);
    if (sr.first_bad != INT32_MAX) return finish_error(kSampleBadLogit, sr.first_bad);
    const Measure w1{true, sr.max, sample_scale(1.0f)};
    const Bound all{0u, -1};  // every token that is not NaN
    const u64 S1 = sum_within(r, all, w1);
    int n_top = a.n_top < V ? a.n_top : (int)V;
    if (n_top > kSampleMaxTop) n_top = kSampleMaxTop;
    if (n_top > 0) {
        const Measure count{false, 0, 0};
        const Bound top = radix_select(r, all, count, (u64)n_top);
        if (threadIdx.x == 0) sh.top_count = 0;
        __syncthreads();
        int32_t* ids = sh.pub[r.turn].top_ids;
        float* ls = sh.pub[r.turn].top_l;
        for (int64_t j = threadIdx.x; j < n; j += kThreads)
            if (in_bound(top, sample_key(slice[j]), (int32_t)(lo + j))) {
                const int s = atomicAdd(&sh.top_count, 1);
                if (s < kSampleMaxTop) {
                    ids[s] = (int32_t)(lo + j);
                    ls[s] = slice[j];
                }
            }
        __syncthreads();
        // Rank 0 gathers every rank's members and orders them: higher logit, then lower id.
        r.exchange([&](Pub& p) { p.top_n = min(sh.top_count, kSampleMaxTop); },
                   [&](int q, const Pub& p) {
                       if (rank != 0) return;
                       int& c = sh.top_count;
                       if (q == 0) c = 0;
                       for (int i = 0; i < p.top_n && c < kSampleMaxTop; ++i) {
                           const int32_t id = p.top_ids[i];
                           const float l = p.top_l[i];
                           int j = c - 1;
                           while (j >= 0) {
                               const uint32_t kj = sample_key(o->top_logprobs[j]), k = sample_key(l);
                               if (kj > k || (kj == k && o->top_ids[j] < id)) break;
                               o->top_ids[j + 1] = o->top_ids[j];
                               o->top_logprobs[j + 1] = o->top_logprobs[j];
                               --j;
                           }
                           o->top_ids[j + 1] = id;
                           o->top_logprobs[j + 1] = l;  // the raw logit until the log-sum-exp is subtracted
                           ++c;
                       }
                   });
    }

    // Adjustments, then the adjusted row's scan.
    Scan s = sr;
    if (a.adjust_count > 0) {
        for (int j = threadIdx.x; j < a.adjust_count; j += kThreads) {
            const SampleAdjust e = adjust[a.adjust_begin + j];
            if (e.token >= lo && e.token < lo + n) slice[e.token - lo] = sample_adjust(slice[e.token - lo], e);
        }
        __syncthreads();
        s = scan_row(r);
        if (s.first_bad != INT32_MAX) return finish_error(kSampleBadAdjusted, s.first_bad);
    }
    if (s.n_finite == 0) return finish_error(kSampleAllBanned, -1);

    int32_t token = s.first_max;
    if (a.temperature > 0.0f) {
        const Measure wt{true, s.max, sample_scale(a.temperature)};
        const Bound all_finite{sample_key(-kInf), -1};
        Bound keep = all_finite;
        if (a.top_k > 0 && a.top_k < s.n_finite) keep = radix_select(r, all_finite, Measure{false, 0, 0}, (u64)a.top_k);
        if (a.top_p < 1.0f) {
            const u64 mass = sum_within(r, keep, wt);
            const u64 need = (u64)ceil((double)a.top_p * (double)mass);
            keep = radix_select(r, keep, wt, need > 0 ? need : 1);
        }
        auto kept_w = [&](int64_t j) -> u64 {
            const float x = slice[j];
            if (!in_bound(keep, sample_key(x), (int32_t)(lo + j))) return 0;
            const u64 w = sample_weight(x, s.max, wt.scale);
            return w >= a.min_p_fixed ? w : 0;
        };
        // Kept weight per rank, the rank holding the draw, then the warp of that block holding it.
        u64 acc = 0;
        for (int64_t j = threadIdx.x; j < n; j += kThreads) acc += kept_w(j);
        const u64 mine = block_sum(acc, sh);
        u64 before = 0, K = 0;
        r.exchange([&](Pub& p) { p.v[0] = mine; },
                   [&](int q, const Pub& p) {
                       if (q < rank) before += p.v[0];
                       K += p.v[0];
                       sh.warp_u64[0] = before;
                       sh.warp_u64[1] = K;
                   });
        before = sh.warp_u64[0];
        K = sh.warp_u64[1];
        __syncthreads();
        u64 t = (u64)(a.u * (double)K);
        if (t >= K) t = K - 1;
        int32_t id = -1;
        if (t >= before && t < before + mine) {
            // Within this block: per-warp sums over the warp chunks, then the warp walks its chunk.
            const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
            const int64_t C = warp_chunk(n), b0 = warp * C, e0 = min(n, b0 + C);
            u64 wacc = 0;
            for (int64_t base = b0; base < e0; base += 32) wacc += base + lane < e0 ? kept_w(base + lane) : 0;
            for (int off = 16; off > 0; off /= 2) wacc += __shfl_xor_sync(~0u, wacc, off);
            if (lane == 0) sh.warp_u64[warp] = wacc;
            __syncthreads();
            if (threadIdx.x == 0) {
                u64 left = t - before;
                int w = 0;
                for (; w < kWarps - 1; ++w) {
                    if (left < sh.warp_u64[w]) break;
                    left -= sh.warp_u64[w];
                }
                sh.bu32[0] = (uint32_t)w;
                sh.bu64 = left;
            }
            __syncthreads();
            const int tw = (int)sh.bu32[0];
            const u64 left = sh.bu64;
            __syncthreads();
            if (warp == tw) {
                u64 cum = 0;
                int32_t last = -1;
                for (int64_t base = b0; base < e0; base += 32) {
                    const u64 v = base + lane < e0 ? kept_w(base + lane) : 0;
                    u64 incl = v;
                    for (int off = 1; off < 32; off *= 2) {
                        const u64 y = __shfl_up_sync(~0u, incl, off);
                        if (lane >= off) incl += y;
                    }
                    const unsigned hit = __ballot_sync(~0u, v > 0 && cum + incl > left);
                    const unsigned any = __ballot_sync(~0u, v > 0);
                    if (hit) {
                        last = (int32_t)(base + __ffs(hit) - 1);
                        break;
                    }
                    if (any) last = (int32_t)(base + 31 - __clz(any));
                    cum += __shfl_sync(~0u, incl, 31);
                }
                if (lane == 0) sh.bu32[1] = (uint32_t)last;
            }
            __syncthreads();
            id = (int32_t)(lo + (int32_t)sh.bu32[1]);
            __syncthreads();
        }
        int32_t found = -1;
        r.exchange([&](Pub& p) { p.i[0] = id; }, [&](int, const Pub& p) { found = max(found, p.i[0]); });
        token = found;
    }

    if (rank == 0 && threadIdx.x == 0) {
        const double lse = (double)sr.max + log((double)S1 / kSampleFixedOne);
        o->status = kSampleOk;
        o->bad_token = -1;
        o->token = token;
        o->logprob = (float)((double)raw[token] - lse);
        o->n_top = n_top > 0 ? min(sh.top_count, n_top) : 0;
        for (int i = 0; i < o->n_top; ++i) o->top_logprobs[i] = (float)((double)o->top_logprobs[i] - lse);
    }
    cluster.sync();
}

}  // namespace

void CudaBackend::sample(SampleOut* out, const float* logits, int64_t n_vocab, const SampleArgs* args, int64_t rows,
                         const SampleAdjust* adjust) {
    if (skipped("sample")) return;
    if (rows <= 0) return;
    const size_t smem = (size_t)((n_vocab + kCluster - 1) / kCluster) * sizeof(float);
    DSV4_CHECK_MSG(n_vocab > 0 && n_vocab < INT32_MAX && rows * kCluster <= INT32_MAX &&
                       smem + sizeof(Shared) <= device_limits().smem_optin,
                   "sample: a vocabulary of %lld tokens does not fit the draw's shared memory", (long long)n_vocab);
    static size_t smem_set = 0;  // the kernel's dynamic shared memory limit, raised as vocabularies need
    if (smem > smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(rows * kCluster));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream_;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, sample_kernel, out, logits, n_vocab, args, adjust));
}

}  // namespace dsv4::cuda
