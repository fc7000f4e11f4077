// The previous CUDA lightning-indexer top-k (bitonic lists merged serially), kept selectable with
// DSV4_INDEXER=v1 for A/B runs and as a fallback: score(t) = sum_h relu(q_h . k_t) w_h over the visible keys, then the
// top_k entries in (score desc, index asc) order, the CPU's tie rule.
//
// Two passes with no array of the context's size: each query's keys are split over `splits` blocks; a
// block scores its keys a tile at a time (a warp per key, heads spread over the lanes so one reduction per
// key) and keeps its running best k2 = pow2 >= top_k in shared memory, merging each sorted tile with a
// bitonic merge. A second kernel merges the blocks' sorted lists the same way. Scratch: n x splits x k2.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kNoIndex = 0x7fffffff;  // with score -inf: an empty slot, after every real entry

// Entry a comes before entry b: higher score first, then lower index.
__device__ __forceinline__ bool precedes(float sa, int ia, float sb, int ib) {
    return sa > sb || (sa == sb && ia < ib);
}

__device__ __forceinline__ void swap_entries(float* key, int* idx, int a, int b) {
    const float k = key[a];
    key[a] = key[b];
    key[b] = k;
    const int i = idx[a];
    idx[a] = idx[b];
    idx[b] = i;
}

// Sort n (a power of two) entries into precedence order: the full bitonic network.
__device__ void bitonic_sort(float* key, int* idx, int n) {
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < n; t += blockDim.x) {
                const int u = t ^ j;
                if (u > t) {
                    const bool forward = (t & k) == 0;
                    if (forward ? precedes(key[u], idx[u], key[t], idx[t]) : precedes(key[t], idx[t], key[u], idx[u]))
                        swap_entries(key, idx, t, u);
                }
            }
            __syncthreads();
        }
    }
}

// key/idx[0, k2) and [k2, 2 k2) each sorted in precedence order: leave the best k2 of both, sorted, in
// [0, k2). Pairing t with 2 k2 - 1 - t makes one bitonic sequence of the two; one half-cleaner keeps the
// better half, and log2(k2) more stages sort it.
__device__ void merge_best(float* key, int* idx, int k2) {
    for (int t = threadIdx.x; t < k2; t += blockDim.x) {
        const int u = 2 * k2 - 1 - t;
        if (precedes(key[u], idx[u], key[t], idx[t])) swap_entries(key, idx, t, u);
    }
    __syncthreads();
    for (int j = k2 >> 1; j > 0; j >>= 1) {
        for (int t = threadIdx.x; t < k2; t += blockDim.x) {
            const int u = t ^ j;
            if (u > t && precedes(key[u], idx[u], key[t], idx[t])) swap_entries(key, idx, t, u);
        }
        __syncthreads();
    }
}

// Shared memory: key[2 k2], idx[2 k2], q[H][hd + 1] (padded: lanes read different heads' rows without bank
// conflicts), w[H], one staged key row per warp.
struct TopkSmem {
    float* key;
    int* idx;
    float* q;
    float* w;
    float* krow;
};

__device__ TopkSmem topk_smem(unsigned char* base, int k2, int H, int hd) {
    TopkSmem s;
    s.key = reinterpret_cast<float*>(base);
    s.idx = reinterpret_cast<int*>(s.key + 2 * k2);
    s.q = reinterpret_cast<float*>(s.idx + 2 * k2);
    s.w = s.q + (size_t)H * (hd + 1);
    s.krow = s.w + H;
    return s;
}

size_t topk_smem_bytes(int k2, int H, int hd) {
    return (size_t)4 * k2 * sizeof(float) + ((size_t)H * (hd + 1) + H + (size_t)kWarps * hd) * sizeof(float);
}

__global__ void __launch_bounds__(kThreads) indexer_partial_kernel(float* part_key, int* part_idx, const float* q,
                                                                   const float* w, const float* keys,
                                                                   const int32_t* n_visible, int H, int hd, int k2,
                                                                   int splits) {
    extern __shared__ unsigned char smem_raw[];
    const TopkSmem sm = topk_smem(smem_raw, k2, H, hd);
    const int64_t i = blockIdx.x;
    const int split = blockIdx.y, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int nv = n_visible[i];
    const int chunk = (nv + splits - 1) / splits;
    const int lo = min(nv, split * chunk), hi = min(nv, lo + chunk);
    for (int s = threadIdx.x; s < k2; s += kThreads) {
        sm.key[s] = -INFINITY;
        sm.idx[s] = kNoIndex;
    }
    for (int e = threadIdx.x; e < H * hd; e += kThreads) sm.q[(e / hd) * (hd + 1) + e % hd] = q[i * H * hd + e];
    for (int h = threadIdx.x; h < H; h += kThreads) sm.w[h] = w[i * H + h];
    __syncthreads();
    float* krow = sm.krow + warp * hd;
    for (int base = lo; base < hi; base += k2) {
        for (int slot = warp; slot < k2; slot += kWarps) {
            const int t = base + slot;
            float score = -INFINITY;
            int id = kNoIndex;
            if (t < hi) {
                const float* kt = keys + (int64_t)t * hd;
                for (int k = lane; k < hd; k += kWarp) krow[k] = kt[k];
                __syncwarp();
                float part = 0.0f;
                for (int h = lane; h < H; h += kWarp) {
                    const float* qh = sm.q + h * (hd + 1);
                    float d = 0.0f;
                    for (int k = 0; k < hd; ++k) d = fmaf(qh[k], krow[k], d);
                    part += fmaxf(d, 0.0f) * sm.w[h];
                }
                score = warp_sum(part);
                id = t;
                __syncwarp();  // krow is rewritten for the next key
            }
            if (lane == 0) {
                sm.key[k2 + slot] = score;
                sm.idx[k2 + slot] = id;
            }
        }
        __syncthreads();
        bitonic_sort(sm.key + k2, sm.idx + k2, k2);
        merge_best(sm.key, sm.idx, k2);
    }
    float* ok = part_key + (i * splits + split) * (int64_t)k2;
    int* oi = part_idx + (i * splits + split) * (int64_t)k2;
    for (int s = threadIdx.x; s < k2; s += kThreads) {
        ok[s] = sm.key[s];
        oi[s] = sm.idx[s];
    }
}

__global__ void __launch_bounds__(kThreads) indexer_merge_kernel(int32_t* out, const float* part_key,
                                                                 const int* part_idx, const int32_t* n_visible,
                                                                 int top_k, int k2, int splits) {
    extern __shared__ unsigned char smem_raw[];
    float* key = reinterpret_cast<float*>(smem_raw);
    int* idx = reinterpret_cast<int*>(key + 2 * k2);
    const int64_t i = blockIdx.x;
    for (int split = 0; split < splits; ++split) {
        const float* pk = part_key + (i * splits + split) * (int64_t)k2;
        const int* pi = part_idx + (i * splits + split) * (int64_t)k2;
        const int off = split == 0 ? 0 : k2;  // the first list seeds the result; later ones merge into it
        for (int s = threadIdx.x; s < k2; s += kThreads) {
            key[off + s] = pk[s];
            idx[off + s] = pi[s];
        }
        __syncthreads();
        if (split > 0) merge_best(key, idx, k2);
    }
    const int k = min(top_k, (int)n_visible[i]);
    for (int j = threadIdx.x; j < top_k; j += kThreads) out[i * top_k + j] = j < k ? idx[j] : -1;
}

}  // namespace

void CudaBackend::indexer_topk_v1(int32_t* idx, const float* q, const float* w, const float* keys,
                               const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k) {
    if (n <= 0 || top_k <= 0) return;
    DSV4_CHECK(n <= INT32_MAX && n_heads > 0 && head_dim > 0);
    int k2 = 32;
    while (k2 < top_k) k2 <<= 1;
    // Enough blocks to fill the GPU when few queries come (decode), one per query when many do.
    const int splits = (int)std::clamp<int64_t>((props_.multiProcessorCount + n - 1) / n, 1, 32);
    const size_t smem = topk_smem_bytes(k2, n_heads, head_dim);
    DSV4_CHECK_MSG(smem <= (size_t)props_.sharedMemPerBlockOptin,
                   "indexer_topk: top_k %d with %d heads of %d needs %zu bytes of shared memory", top_k, n_heads,
                   head_dim, smem);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(indexer_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const size_t merge_smem = (size_t)4 * k2 * sizeof(float);
    if (merge_smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(indexer_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)merge_smem));
    Scratch s(*this);
    float* part_key = s.get<float>(n * splits * k2);
    int* part_idx = s.get<int>(n * splits * k2);
    indexer_partial_kernel<<<dim3((unsigned)n, (unsigned)splits), kThreads, smem, stream_>>>(
        part_key, part_idx, q, w, keys, n_visible, n_heads, head_dim, k2, splits);
    CUDA_CHECK_LAUNCH();
    indexer_merge_kernel<<<(unsigned)n, kThreads, merge_smem, stream_>>>(idx, part_key, part_idx, n_visible, top_k, k2,
                                                                         splits);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
