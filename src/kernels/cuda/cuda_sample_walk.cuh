// The device draw's walks by running sums (cuda_sample_row.cuh has the overview): each thread's run of consecutive
// tokens summed once, then the rank, warp, lane and token picked from those sums; the draw over the kept weights
// (draw_kept), the draw whose cut falls inside a tie (draw_cut) and the n-th tie of a key (nth_tie).
#pragma once

#include "kernels/cuda/cuda_sample_row.cuh"

namespace dsv4::cuda::draw {

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

}  // namespace dsv4::cuda::draw
