// CUDA sparse attention with sinks over per-query KV index lists, and the lightning indexer's top-k.
// Attention: one block per (query, head), KV rows in tiles of 32 with an online softmax, so scratch is a
// few shared-memory values whatever the context. Indexer: one block per query keeps its running top-k in
// shared memory and merges each tile of new scores with a bitonic sort, so no score array of the context's
// size is ever stored and selection is O(n log^2 k) per query, not a full sort.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kAttnThreads = 128;
constexpr int kAttnTile = 32;
constexpr int kAttnMaxPerThread = 8;  // head_dim <= kAttnThreads * 8 = 1024

// The KV row behind logical entry r of query i (window entries first, then compressed), or null.
__device__ __forceinline__ const float* attn_row(const AttentionArgs& a, int64_t i, int r) {
    if (r < a.n_win) {
        const int32_t w = a.win_idx[i * a.n_win + r];
        return w >= 0 ? a.kv_win + (int64_t)w * a.head_dim : nullptr;
    }
    const int c = r - a.n_win;
    if (a.comp_idx) {
        const int32_t w = a.comp_idx[i * a.n_comp + c];
        return w >= 0 ? a.kv_comp + (int64_t)w * a.head_dim : nullptr;
    }
    return a.kv_comp + (int64_t)c * a.head_dim;
}

__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttentionArgs a) {
    extern __shared__ float q[];  // [head_dim]
    __shared__ const float* rows[kAttnTile];
    __shared__ float p[kAttnTile];
    __shared__ float m_s, alpha_s;
    const int H = a.n_heads, hd = a.head_dim;
    const int64_t i = blockIdx.x / H;
    const int h = (int)(blockIdx.x % H);
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const float* qi = a.q + (i * H + h) * hd;
    for (int d = tid; d < hd; d += kAttnThreads) q[d] = qi[d];
    const int n_comp = a.kv_comp ? (a.comp_idx ? a.n_comp : a.comp_count[i]) : 0;
    const int total = a.n_win + n_comp;

    float acc[kAttnMaxPerThread];
#pragma unroll
    for (int c = 0; c < kAttnMaxPerThread; ++c) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // running max and denominator (thread 0's copy is the one used)
    bool any = false;
    if (tid == 0) m_s = -INFINITY;
    __syncthreads();

    for (int base = 0; base < total; base += kAttnTile) {
        // Scores of this tile: a warp per row, lanes over head_dim.
        for (int s = warp; s < kAttnTile; s += kAttnThreads / kWarp) {
            const int r = base + s;
            const float* kv = r < total ? attn_row(a, i, r) : nullptr;
            float d = 0.0f;
            if (kv)
                for (int k = lane; k < hd; k += kWarp) d = fmaf(q[k], kv[k], d);
            d = warp_sum(d);
            if (lane == 0) {
                rows[s] = kv;
                p[s] = kv ? d * a.scale : -INFINITY;
            }
        }
        __syncthreads();
        // The first warp turns scores into weights against the updated running max.
        if (warp == 0) {
            const float sc = p[lane];
            const float tile_max = warp_max(sc);
            const float m_old = m_s;
            const float m_new = fmaxf(m_old, tile_max);
            const float e = rows[lane] ? expf(sc - m_new) : 0.0f;
            const float tile_sum = warp_sum(e);
            p[lane] = e;
            if (lane == 0) {
                const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
                if (tile_max != -INFINITY) {
                    l = l * alpha + tile_sum;
                    m_s = m_new;
                    alpha_s = alpha;
                } else {
                    alpha_s = 1.0f;  // nothing valid in this tile: leave the state alone
                }
            }
        }
        __syncthreads();
        const float alpha = alpha_s;
#pragma unroll
        for (int c = 0; c < kAttnMaxPerThread; ++c) {
            const int d = tid + c * kAttnThreads;
            if (d < hd) {
                float v = acc[c] * alpha;
                for (int s = 0; s < kAttnTile; ++s)
                    if (rows[s]) v = fmaf(p[s], rows[s][d], v);
                acc[c] = v;
            }
        }
        if (!any)
            for (int s = 0; s < kAttnTile; ++s) any |= rows[s] != nullptr;
        __syncthreads();
    }
    m = m_s;
    // The sink joins the denominator only, against the same max as the scores. Thread 0 holds l.
    __shared__ float inv_s;
    if (tid == 0) {
        if (a.sinks) l += expf(a.sinks[h] - m);
        inv_s = 1.0f / l;
    }
    __syncthreads();
    const float inv = inv_s;
    float* o = a.out + (i * H + h) * hd;
#pragma unroll
    for (int c = 0; c < kAttnMaxPerThread; ++c) {
        const int d = tid + c * kAttnThreads;
        if (d < hd) o[d] = any ? acc[c] * inv : 0.0f;  // no rows: zero output, as the CPU
    }
}

// Entry a comes before entry b: higher score first, then lower index (the CPU's deterministic tie rule).
__device__ __forceinline__ bool precedes(float sa, int ia, float sb, int ib) {
    return sa > sb || (sa == sb && ia < ib);
}

// Sort n (a power of two) entries into precedence order with a bitonic network over the whole block.
__device__ void bitonic_sort(float* key, int* idx, int n) {
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < n; t += blockDim.x) {
                const int u = t ^ j;
                if (u > t) {
                    const bool forward = (t & k) == 0;
                    const float ka = key[t], kb = key[u];
                    const int ia = idx[t], ib = idx[u];
                    if (forward ? precedes(kb, ib, ka, ia) : precedes(ka, ia, kb, ib)) {
                        key[t] = kb;
                        key[u] = ka;
                        idx[t] = ib;
                        idx[u] = ia;
                    }
                }
            }
            __syncthreads();
        }
    }
}

constexpr int kTopkThreads = 256;
constexpr int kNoIndex = 0x7fffffff;  // sorts after every real entry of equal (-inf) score

__global__ void __launch_bounds__(kTopkThreads) indexer_topk_kernel(int32_t* out, const float* q, const float* w,
                                                                    const float* keys, const int32_t* n_visible,
                                                                    int n_heads, int head_dim, int top_k, int sort_n) {
    extern __shared__ unsigned char smem[];
    float* key = reinterpret_cast<float*>(smem);
    int* idx = reinterpret_cast<int*>(key + sort_n);
    const int64_t i = blockIdx.x;
    const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
    const int nv = n_visible[i];
    const int tile = sort_n - top_k;  // new entries merged per pass
    for (int s = tid; s < sort_n; s += kTopkThreads) {
        key[s] = -INFINITY;
        idx[s] = kNoIndex;
    }
    __syncthreads();
    const float* qi = q + i * (int64_t)n_heads * head_dim;
    const float* wi = w + i * (int64_t)n_heads;
    for (int base = 0; base < nv; base += tile) {
        // score(t) = sum_h relu(q_h . k_t) * w_h: a warp per key, lanes over head_dim.
        for (int s = warp; s < tile; s += kTopkThreads / kWarp) {
            const int t = base + s;
            float score = -INFINITY;
            int id = kNoIndex;
            if (t < nv) {
                const float* kt = keys + (int64_t)t * head_dim;
                score = 0.0f;
                for (int h = 0; h < n_heads; ++h) {
                    const float* qh = qi + (int64_t)h * head_dim;
                    float d = 0.0f;
                    for (int k = lane; k < head_dim; k += kWarp) d = fmaf(qh[k], kt[k], d);
                    d = warp_sum(d);
                    score += fmaxf(d, 0.0f) * wi[h];
                }
                id = t;
            }
            if (lane == 0) {
                key[top_k + s] = score;
                idx[top_k + s] = id;
            }
        }
        __syncthreads();
        bitonic_sort(key, idx, sort_n);
    }
    const int k = min(top_k, nv);
    for (int j = tid; j < top_k; j += kTopkThreads) out[i * top_k + j] = j < k ? idx[j] : -1;
}

}  // namespace

void CudaBackend::attention(const AttentionArgs& a) {
    if (a.n <= 0 || a.n_heads <= 0) return;
    DSV4_CHECK_MSG(a.head_dim > 0 && a.head_dim <= kAttnThreads * kAttnMaxPerThread,
                   "attention: head_dim %d is outside (0, %d]", a.head_dim, kAttnThreads * kAttnMaxPerThread);
    DSV4_CHECK(a.n * a.n_heads <= INT32_MAX);
    const size_t smem = (size_t)a.head_dim * sizeof(float);
    attention_kernel<<<(unsigned)(a.n * a.n_heads), kAttnThreads, smem, stream_>>>(a);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys,
                               const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k) {
    if (n <= 0 || top_k <= 0) return;
    // The sort buffer holds the running top-k plus at least as many new entries, a power of two.
    int sort_n = 64;
    while (sort_n < 2 * top_k) sort_n <<= 1;
    const size_t smem = (size_t)sort_n * (sizeof(float) + sizeof(int));
    DSV4_CHECK_MSG(smem <= (size_t)props_.sharedMemPerBlockOptin, "indexer_topk: top_k %d needs %zu bytes of shared memory",
                   top_k, smem);
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    indexer_topk_kernel<<<(unsigned)n, kTopkThreads, smem, stream_>>>(idx, q, w, keys, n_visible, n_heads, head_dim,
                                                                      top_k, sort_n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
