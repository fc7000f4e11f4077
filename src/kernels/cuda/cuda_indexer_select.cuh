// The lightning indexer's top-k selection machinery (cuda_indexer.cu): 64-bit candidate keys (order-preserving
// score bits, then 0x7fffffff - index; 0 is an empty slot), block-wide radix select on them (11-bit digits from
// the top, stopping when the digit holding the k-th key is taken whole), gather, in-place compaction, the
// running top-k buffer and the bitonic sort that writes a list. Every function is block-wide unless it says so.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda::indexer_select {

constexpr int kSelBits = 11;  // radix digit
constexpr int kBins = 1 << kSelBits;

constexpr uint32_t kFullMask = 0xffffffffu;

// Candidate sources: item c's key (0: empty slot).
struct ScoreBitsSrc {  // raw scores, the index is the position
    const uint32_t* p;
    __device__ uint64_t operator()(int c) const { return make_key(p[c], c); }
};
struct KeySrc {
    const uint64_t* p;
    __device__ uint64_t operator()(int c) const { return p[c]; }
};

// Per-block scalars of the selection (static shared memory).
struct SelShared {
    uint64_t theta;  // the scoring kernel's running threshold: keys below it cannot make the top k
    int count;       // entries in the candidate / output buffer
    int digit, above, in_digit;
    int warp_total[32];
};

// Histogram add, aggregated over the lanes of a warp that hit the same bin (score distributions are
// narrow: many lanes share the top digits). Call from all 32 lanes.
__device__ __forceinline__ void hist_add(int* hist, uint32_t bin, bool active) {
    if (__ballot_sync(kFullMask, active) == 0) return;
    const uint32_t peers = __match_any_sync(kFullMask, active ? bin : 0xffffffffu);
    if (active && (int)(threadIdx.x % kWarp) == __ffs(peers) - 1) atomicAdd(hist + bin, __popc(peers));
}

// Append `key` (where `take`) at the next free slots of out[*count]; one atomic per warp. Call from all
// 32 lanes.
__device__ __forceinline__ void append(uint64_t* out, int* count, uint64_t key, bool take) {
    const uint32_t bal = __ballot_sync(kFullMask, take);
    if (bal == 0) return;
    const int lane = threadIdx.x % kWarp, leader = __ffs(bal) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(count, __popc(bal));
    base = __shfl_sync(kFullMask, base, leader);
    if (take) out[base + __popc(bal & ((1u << lane) - 1))] = key;
}

// Exclusive prefix sum over the block in thread order.
__device__ int block_excl_scan(int v, SelShared& sh) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    int x = v;
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
        const int y = __shfl_up_sync(kFullMask, x, o);
        if (lane >= o) x += y;
    }
    if (lane == kWarp - 1) sh.warp_total[warp] = x;
    __syncthreads();
    int before = 0;
    for (int w = 0; w < warp; ++w) before += sh.warp_total[w];
    return before + x - v;
}

// The bin holding the need-th largest entry (bins counted from the top): sets sh.digit, sh.above (entries
// in higher bins) and sh.in_digit. Thread t owns a run of bins from the top, so a scan finds the owner.
__device__ void find_digit(const int* hist, int n_bins, int need, SelShared& sh) {
    const int per = (n_bins + blockDim.x - 1) / blockDim.x;
    const int hi = max(n_bins - (int)threadIdx.x * per, 0), lo = max(hi - per, 0);
    int s = 0;
    for (int b = lo; b < hi; ++b) s += hist[b];
    const int before = block_excl_scan(s, sh);
    if (before < need && need <= before + s) {
        int run = before;
        for (int b = hi - 1; b >= lo; --b) {
            const int h = hist[b];
            if (run + h >= need) {
                sh.digit = b;
                sh.above = run;
                sh.in_digit = h;
                break;
            }
            run += h;
        }
    }
    __syncthreads();
}

// Radix select over n_items candidates holding at least k non-empty keys: returns T with exactly k keys
// >= T. MSD digits of kSelBits; a pass histograms the keys that match the digits fixed so far, then fixes
// the digit holding the k-th; when that digit's keys are all needed, T is its lower bound and we stop.
// U items per thread per round are loaded before use (latency of global sources).
template <int U, class Src>
__device__ uint64_t radix_select(Src src, int n_items, int k, int* hist, SelShared& sh) {
    const int T = blockDim.x, tid = threadIdx.x;
    uint64_t prefix = 0;
    int need = k, hi_shift = 64;
    for (;;) {
        const int width = min(kSelBits, hi_shift), shift = hi_shift - width, n_bins = 1 << width;
        for (int b = tid; b < n_bins; b += T) hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < n_items; base += T * U) {
            uint64_t key[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = base + u * T + tid;
                key[u] = c < n_items ? src(c) : 0;
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const bool active = key[u] != 0 && (hi_shift == 64 || (key[u] >> hi_shift) == (prefix >> hi_shift));
                hist_add(hist, (uint32_t)(key[u] >> shift) & (n_bins - 1), active);
            }
        }
        __syncthreads();
        find_digit(hist, n_bins, need, sh);
        const int digit = sh.digit, above = sh.above, in_digit = sh.in_digit;
        prefix |= (uint64_t)digit << shift;
        need -= above;
        // Keys are unique: the last digit always ends it. No real key is 0 (empty slots are), so a zero
        // prefix (only NaN scores with the sign bit reach it) becomes 1: the same real keys, and empty slots
        // stay out of gather/compact.
        if (in_digit == need || shift == 0) return prefix != 0 ? prefix : 1;
        hi_shift = shift;
    }
}

// Append every key >= th to out (at sh.count, which the caller zeroed before a barrier).
template <int U, class Src>
__device__ void gather(Src src, int n_items, uint64_t th, uint64_t* out, SelShared& sh) {
    const int T = blockDim.x;
    for (int base = 0; base < n_items; base += T * U) {
        uint64_t key[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = base + u * T + threadIdx.x;
            key[u] = c < n_items ? src(c) : 0;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) append(out, &sh.count, key[u], key[u] >= th);
    }
    __syncthreads();
}

// Keep buf[0, sh.count)'s entries >= th, in order, at its front (stable, in place: a round reads its
// entries before any write, and writes land at or before the positions read); sets sh.count.
__device__ void compact(uint64_t* buf, uint64_t th, SelShared& sh) {
    const int m = sh.count, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int n_warps = blockDim.x / kWarp;
    int out = 0;
    for (int base = 0; base < m; base += blockDim.x) {
        const int c = base + threadIdx.x;
        const uint64_t v = c < m ? buf[c] : 0;
        const bool keep = c < m && v >= th;
        const uint32_t bal = __ballot_sync(kFullMask, keep);
        if (lane == 0) sh.warp_total[warp] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < n_warps; ++w) {
            const int t = sh.warp_total[w];
            before += w < warp ? t : 0;
            total += t;
        }
        if (keep) buf[out + before + __popc(bal & ((1u << lane) - 1))] = v;
        out += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) sh.count = out;
    __syncthreads();
}

// Reduce the candidate buffer to its best k (when it holds more) and raise the threshold to match.
__device__ void keep_top(uint64_t* buf, int k, int* hist, SelShared& sh) {
    __syncthreads();
    const int m = sh.count;
    if (m <= k) return;
    const uint64_t th = radix_select<4>(KeySrc{buf}, m, k, hist, sh);
    compact(buf, th, sh);
    if (threadIdx.x == 0) sh.theta = th;
    __syncthreads();
}

// Sort a[0, m) (m a power of two) descending: the bitonic network, one compare-exchange per pair. A stage of
// distance j < kWarp pairs elements within runs of 2 kWarp, and pairs 32 w .. 32 w + 31 of every round (the
// whole run) are warp w's, so between two such stages the warp's own barrier orders all it reads; only the
// other stages (j >= kWarp: 10 of the 45 for 512 keys) and the last need the block's.
__device__ void sort_desc(uint64_t* a, int m) {
    for (int size = 2; size <= m; size <<= 1) {
        for (int j = size >> 1; j > 0; j >>= 1) {
            for (int p = threadIdx.x; p < m / 2; p += blockDim.x) {
                const int t = ((p & ~(j - 1)) << 1) | (p & (j - 1)), u = t | j;
                const uint64_t x = a[t], y = a[u];
                if ((t & size) == 0 ? x < y : x > y) {
                    a[t] = y;
                    a[u] = x;
                }
            }
            const int next = j > 1 ? j >> 1 : size;  // the next stage's distance
            if (j < kWarp && next < kWarp && !(size == m && j == 1))
                __syncwarp();
            else
                __syncthreads();
        }
    }
}

// buf[0, sh.count) holds the chosen keys (count <= its capacity's power of two): sort, write top_k
// indices, -1 past the count.
__device__ void write_sorted(uint64_t* buf, SelShared& sh, int32_t* out, int top_k) {
    __syncthreads();
    const int count = sh.count;
    int m = 1;
    while (m < count) m <<= 1;
    for (int j = count + threadIdx.x; j < m; j += blockDim.x) buf[j] = 0;
    __syncthreads();
    if (m > 1) sort_desc(buf, m);
    for (int j = threadIdx.x; j < top_k; j += blockDim.x) out[j] = j < count ? key_index(buf[j]) : -1;
}

// Copy n items to shared memory, U loads in flight per thread.
template <class T>
__device__ void stage_items(T* dst, const T* __restrict__ src, int n) {
    constexpr int U = 16;
    const int T_ = blockDim.x;
    for (int base = 0; base < n; base += T_ * U) {
        T v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = base + u * T_ + threadIdx.x;
            if (c < n) v[u] = src[c];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = base + u * T_ + threadIdx.x;
            if (c < n) dst[c] = v[u];
        }
    }
}

// The top k of n_items candidates (at least k non-empty) into `sorted`, unsorted; sh.count was zeroed
// before a barrier.
template <class Src>
__device__ void select_into(Src src, int n_items, int k, int* hist, uint64_t* sorted, SelShared& sh) {
    const uint64_t th = n_items > k ? radix_select<8>(src, n_items, k, hist, sh) : 1;
    gather<8>(src, n_items, th, sorted, sh);
}

// select_into over n items in global memory, staged in shared memory first when they fit in `area`.
template <class Src, class T>
__device__ void select_staged(const T* items, int n, unsigned char* area, int area_bytes, int k, int* hist,
                              uint64_t* sorted, SelShared& sh) {
    if ((int64_t)n * sizeof(T) <= (size_t)area_bytes) {
        T* staged = reinterpret_cast<T*>(area);
        stage_items(staged, items, n);
        __syncthreads();
        select_into(Src{staged}, n, k, hist, sorted, sh);
    } else {
        select_into(Src{items}, n, k, hist, sorted, sh);
    }
}

}  // namespace dsv4::cuda::indexer_select
