// CUDA hyper-connection ops (mHC): hc_pre (RMS-scaled mix projection, Sinkhorn split, stream collapse),
// hc_post (expand the sublayer output into the streams) and hc_head (final collapse).
//
// hc_pre and hc_head run as three launches, each spread over many blocks even for one decode token (a block
// per token is latency-bound: one SM walking 16384 values several times took ~50 us per call):
//   1. partial square sums of each token's flattened streams over P chunks (double, as the CPU);
//   2. the mix projection raw[i, m] = H_i . fn_m as a plain matmul over the weight in its own type (F16,
//      Q8_0, ...), through the decode GEMV for few tokens;
//   3. per (token, slice of D): the RMS factor from the partials (fixed order), the Sinkhorn split (computed
//      by every slice's block, so none waits for another) and the collapse of the slice. The Sinkhorn keeps
//      comb in registers, a lane per element, when hc * hc <= 32 (row and column sums gathered by shuffles in
//      the serial order: bit for bit numerics.h); larger hc use the shared-memory lane-per-row steps.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxHc = 16;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

// ss[i, p] = sum of H_i[j]^2 over chunk p of P (double). Grid (n, P).
__global__ void __launch_bounds__(kThreads) hc_ss_kernel(double* ss, const float* H, int64_t flat, int P) {
    __shared__ double scratch[32];
    const int64_t i = blockIdx.x;
    const int p = blockIdx.y;
    const int64_t chunk = (flat + P - 1) / P, lo = p * chunk, hi = min(flat, lo + chunk);
    const float* Hi = H + i * flat;
    double a0 = 0, a1 = 0;
    int64_t j = lo + threadIdx.x;
    for (; j + kThreads < hi; j += 2 * kThreads) {
        const float u = Hi[j], v = Hi[j + kThreads];
        a0 += (double)u * u;
        a1 += (double)v * v;
    }
    if (j < hi) a0 += (double)Hi[j] * Hi[j];
    const double t = block_sum(a0 + a1, scratch);
    if (threadIdx.x == 0) ss[i * P + p] = t;
}

// The mixes of token i (raw dots times the RMS factor from the P partial square sums) into shared memory.
__device__ void load_mixes(float* mixes, const float* raw, const double* ss, int P, int64_t i, int n_mix, int64_t flat,
                           float eps) {
    double t = 0;
    for (int p = 0; p < P; ++p) t += ss[i * P + p];
    const float rms = 1.0f / sqrtf((float)(t / (double)flat) + eps);
    for (int m = threadIdx.x; m < n_mix; m += blockDim.x) mixes[m] = raw[i * n_mix + m] * rms;
    __syncthreads();
}

// Sum over t < hc of lane (base + t)'s v, in t order (all 32 lanes call it).
__device__ __forceinline__ float ordered_sum(float v, int base, int stride, int hc) {
    float s = 0.0f;
    for (int t = 0; t < hc; ++t) s += __shfl_sync(0xffffffffu, v, (base + t * stride) & (kWarp - 1));
    return s;
}

// The Sinkhorn-normalized comb into comb_s (and pre/post), on the first warp: register path when hc*hc <= 32.
__device__ void hc_sinkhorn(const float* mixes, const float* scale, const float* base, const HcParams& p, float* pre_s,
                            float* post_s, float* comb_s) {
    if (threadIdx.x >= kWarp) return;
    const int l = threadIdx.x, hc = p.hc;
    const float eps = p.hc_eps;
    if (l < hc) hc_pre_post(mixes, scale, base, hc, eps, l, pre_s, post_s);
    if (hc * hc <= kWarp) {
        const bool own = l < hc * hc;
        const int j = own ? l / hc : 0, k = own ? l % hc : 0;
        // hc_comb_init: row softmax plus eps.
        float v = own ? mixes[2 * hc + l] * scale[2] + base[2 * hc + l] : 0.0f;
        float m = -INFINITY;
        for (int t = 0; t < hc; ++t) m = fmaxf(m, __shfl_sync(0xffffffffu, v, (j * hc + t) & (kWarp - 1)));
        const float e = expf(v - m);
        v = e / ordered_sum(e, j * hc, 1, hc) + eps;
        v /= (ordered_sum(v, k, hc, hc) + eps);  // hc_comb_col_norm
        for (int it = 1; it < p.sinkhorn_iters; ++it) {
            v /= (ordered_sum(v, j * hc, 1, hc) + eps);  // hc_comb_row_norm
            v /= (ordered_sum(v, k, hc, hc) + eps);      // hc_comb_col_norm
        }
        if (own) comb_s[l] = v;
        return;
    }
    if (l < hc) hc_comb_init(comb_s, mixes, scale, base, hc, eps, l);
    __syncwarp();
    if (l < hc) hc_comb_col_norm(comb_s, hc, eps, l);
    __syncwarp();
    for (int it = 1; it < p.sinkhorn_iters; ++it) {
        if (l < hc) hc_comb_row_norm(comb_s, hc, eps, l);
        __syncwarp();
        if (l < hc) hc_comb_col_norm(comb_s, hc, eps, l);
        __syncwarp();
    }
}

// x[d] = sum_j pre[j] H_j[d] over this block's slice of D, summed in the CPU's order with its roundings.
__device__ void hc_collapse(float* x, const float* Hi, const float* pre, int hc, int64_t D) {
    const int64_t chunk = (D + gridDim.y - 1) / gridDim.y, lo = blockIdx.y * chunk, hi = min(D, lo + chunk);
    for (int64_t d = lo + threadIdx.x; d < hi; d += blockDim.x) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(pre[j], Hi[j * D + d]));
        x[d] = s;
    }
}

// Grid (n, slices of D).
__global__ void __launch_bounds__(kThreads) hc_pre_finish_kernel(float* x, float* post, float* comb, const float* H,
                                                                 const float* raw, const double* ss, int P,
                                                                 const float* scale, const float* base, HcParams p) {
    __shared__ float mixes[kMaxMix];
    __shared__ float pre_s[kMaxHc], post_s[kMaxHc], comb_s[kMaxHc * kMaxHc];
    const int hc = p.hc, n_mix = (2 + hc) * hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, raw, ss, P, i, n_mix, hc * D, p.norm_eps);
    hc_sinkhorn(mixes, scale, base, p, pre_s, post_s, comb_s);
    __syncthreads();
    if (blockIdx.y == 0) {
        for (int t = threadIdx.x; t < hc * hc; t += blockDim.x) comb[i * hc * hc + t] = comb_s[t];
        for (int t = threadIdx.x; t < hc; t += blockDim.x) post[i * hc + t] = post_s[t];
    }
    hc_collapse(x + i * D, H + i * hc * D, pre_s, hc, D);
}

__global__ void __launch_bounds__(kThreads) hc_head_finish_kernel(float* y, const float* H, const float* raw,
                                                                  const double* ss, int P, const float* scale,
                                                                  const float* base, HcParams p) {
    __shared__ float mixes[kMaxHc];
    __shared__ float pre[kMaxHc];
    const int hc = p.hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, raw, ss, P, i, hc, hc * D, p.norm_eps);
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf_(mixes[threadIdx.x] * scale[0] + base[threadIdx.x]) + p.hc_eps;
    __syncthreads();
    hc_collapse(y + i * D, H + i * hc * D, pre, hc, D);
}

__global__ void hc_post_kernel(float* H_out, const float* x, const float* H_res, const float* post, const float* comb,
                               int64_t n, int hc, int64_t D) {
    const int64_t total = n * hc * D;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = t % D, i = t / (hc * D);
        const int k = (int)((t / D) % hc);
        const float* R = H_res + i * hc * D;
        const float* c = comb + i * hc * hc;
        float s = 0;  // the j-sum first, then the post term (reference order)
        for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(c[j * hc + k], R[j * D + d]));
        H_out[t] = __fadd_rn(__fmul_rn(post[i * hc + k], x[i * D + d]), s);
    }
}

}  // namespace

void CudaBackend::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                         const float* base, int64_t n, const HcParams& p) {
    DSV4_CHECK(p.hc > 0 && p.hc <= kMaxHc);
    const int n_mix = (2 + p.hc) * p.hc;
    DSV4_CHECK(fn.rows == n_mix && fn.cols == p.hc * p.dim);
    DSV4_CHECK(n <= INT32_MAX);
    if (n <= 0) return;
    Scratch s(*this);
    const HcSplit sp = hc_split(n, p);
    float* raw = s.get<float>(n * n_mix);
    double* ss = s.get<double>(n * sp.P);
    hc_dots(raw, ss, sp.P, H, fn, n, p);
    hc_pre_finish_kernel<<<dim3((unsigned)n, (unsigned)sp.slices), kThreads, 0, stream_>>>(x, post, comb, H, raw, ss,
                                                                                          sp.P, scale, base, p);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hc_post(float* H_out, const float* x, const float* H_res, const float* post, const float* comb,
                          int64_t n, const HcParams& p) {
    const int64_t total = n * p.hc * p.dim;
    if (total <= 0) return;
    hc_post_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_>>>(H_out, x, H_res, post, comb, n, p.hc, p.dim);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                          const HcParams& p) {
    DSV4_CHECK(p.hc > 0 && p.hc <= kMaxHc);
    DSV4_CHECK(fn.rows == p.hc && fn.cols == p.hc * p.dim);
    DSV4_CHECK(n <= INT32_MAX);
    if (n <= 0) return;
    Scratch s(*this);
    const HcSplit sp = hc_split(n, p);
    float* raw = s.get<float>(n * p.hc);
    double* ss = s.get<double>(n * sp.P);
    hc_dots(raw, ss, sp.P, H, fn, n, p);
    hc_head_finish_kernel<<<dim3((unsigned)n, (unsigned)sp.slices), kThreads, 0, stream_>>>(y, H, raw, ss, sp.P, scale,
                                                                                           base, p);
    CUDA_CHECK_LAUNCH();
}

CudaBackend::HcSplit CudaBackend::hc_split(int64_t n, const HcParams& p) const {
    // Enough blocks for about two per SM when few tokens come; one chunk / slice per token when many do.
    const int64_t want = 2 * (int64_t)props_.multiProcessorCount;
    const int64_t per_token = std::clamp<int64_t>((want + n - 1) / n, 1, 32);
    HcSplit sp;
    sp.P = (int)std::min<int64_t>(per_token, std::max<int64_t>(1, p.hc * p.dim / (2 * kThreads)));
    sp.slices = (int)std::min<int64_t>(per_token, std::max<int64_t>(1, p.dim / kThreads));
    return sp;
}

void CudaBackend::hc_dots(float* raw, double* ss, int P, const float* H, const Weight& fn, int64_t n,
                          const HcParams& p) {
    hc_ss_kernel<<<dim3((unsigned)n, (unsigned)P), kThreads, 0, stream_>>>(ss, H, p.hc * p.dim, P);
    CUDA_CHECK_LAUNCH();
    // Always the f32 kernels (never the bf16 tensor-core mode): the mixes feed a Sinkhorn and sigmoids.
    launch_matmul(plain_matmul(fn, raw, fn.rows, H, fn.cols, n), tables_, stream_);
}

}  // namespace dsv4::cuda
