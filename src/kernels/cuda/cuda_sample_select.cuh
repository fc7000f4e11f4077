// The device draw's radix selections (cuda_sample_row.cuh has the overview): the shortest prefix of a row, in
// key-then-id order, whose measure reaches a need (radix_select, its histograms HistAdd and its finish in one warp
// finish_small), and the row's top alternatives (gather_top).
#pragma once

#include "kernels/cuda/cuda_sample_walk.cuh"

namespace dsv4::cuda::draw {

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
            sh.warp_kmin[threadIdx.x / 32] = kmin;
            sh.warp_kmax[threadIdx.x / 32] = kmax;
        }
        __syncthreads();
        const int b = threadIdx.x;
        if (b >= 256 && b < 256 + 32) {  // a warp the histograms' combine below leaves idle: the block's range out
            const uint32_t lo = __reduce_min_sync(~0u, sh.warp_kmin[lane]);
            const uint32_t hi = __reduce_max_sync(~0u, sh.warp_kmax[lane]);
            if (lane == 0) {
                r.slot().kmin = lo;
                r.slot().kmax = hi;
            }
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
