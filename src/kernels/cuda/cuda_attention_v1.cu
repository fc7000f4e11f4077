// The previous CUDA sparse attention (one block per (query, head)), kept selectable with DSV4_ATTENTION=v1
// for A/B runs and as a fallback: sparse attention with sinks over per-query KV index lists: one block per (query, head), KV rows in
// tiles of 32 with an online softmax, so scratch is a few shared-memory values whatever the context.
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

}  // namespace

void CudaBackend::attention_v1(const AttentionArgs& a) {
    if (a.n <= 0 || a.n_heads <= 0) return;
    DSV4_CHECK_MSG(a.head_dim > 0 && a.head_dim <= kAttnThreads * kAttnMaxPerThread,
                   "attention: head_dim %d is outside (0, %d]", a.head_dim, kAttnThreads * kAttnMaxPerThread);
    DSV4_CHECK(a.n * a.n_heads <= INT32_MAX);
    const size_t smem = (size_t)a.head_dim * sizeof(float);
    attention_kernel<<<(unsigned)(a.n * a.n_heads), kAttnThreads, smem, stream_>>>(a);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
