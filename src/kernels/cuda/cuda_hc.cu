// CUDA hyper-connection ops (mHC): hc_pre (RMS-scaled mix projection, Sinkhorn split, stream collapse),
// hc_post (expand the sublayer output into the streams) and hc_head (final collapse). One block per token;
// the Sinkhorn projection is a few hundred flops, run by one thread with the shared ops/numerics.h code.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxHc = 16;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

// mixes[m] = (H_flat . fn_m) * rsqrt(mean(H_flat^2) + eps) for m < n_mix, into shared memory.
__device__ void hc_mixes(float* mixes, const float* Hi, const float* fn, int n_mix, int64_t flat, float eps) {
    __shared__ double scratch[32];
    double ss = 0;
    for (int64_t j = threadIdx.x; j < flat; j += blockDim.x) ss += (double)Hi[j] * Hi[j];
    ss = block_sum(ss, scratch);
    const float r = 1.0f / sqrtf((float)(ss / (double)flat) + eps);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
    for (int m = warp; m < n_mix; m += n_warps) {
        const float* f = fn + m * flat;
        float d = 0;
        for (int64_t j = lane; j < flat; j += kWarp) d = fmaf(Hi[j], f[j], d);
        d = warp_sum(d);
        if (lane == 0) mixes[m] = d * r;
    }
    __syncthreads();
}

// x[d] = sum_j pre[j] H_j[d], summed in the CPU's order with its roundings.
__device__ void hc_collapse(float* x, const float* Hi, const float* pre, int hc, int64_t D) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(pre[j], Hi[j * D + d]));
        x[d] = s;
    }
}

__global__ void hc_pre_kernel(float* x, float* post, float* comb, const float* H, const float* fn, const float* scale,
                              const float* base, HcParams p) {
    __shared__ float mixes[kMaxMix];
    __shared__ float pre[kMaxHc];
    const int hc = p.hc;
    const int64_t i = blockIdx.x, D = p.dim, flat = hc * D;
    const float* Hi = H + i * flat;
    hc_mixes(mixes, Hi, fn, (2 + hc) * hc, flat, p.norm_eps);
    if (threadIdx.x == 0)
        hc_split_sinkhorn(mixes, scale, base, hc, p.sinkhorn_iters, p.hc_eps, pre, post + i * hc, comb + i * hc * hc);
    __syncthreads();
    hc_collapse(x + i * D, Hi, pre, hc, D);
}

__global__ void hc_head_kernel(float* y, const float* H, const float* fn, const float* scale, const float* base,
                               HcParams p) {
    __shared__ float mixes[kMaxHc];
    __shared__ float pre[kMaxHc];
    const int hc = p.hc;
    const int64_t i = blockIdx.x, D = p.dim, flat = hc * D;
    const float* Hi = H + i * flat;
    hc_mixes(mixes, Hi, fn, hc, flat, p.norm_eps);
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf_(mixes[threadIdx.x] * scale[0] + base[threadIdx.x]) + p.hc_eps;
    __syncthreads();
    hc_collapse(y + i * D, Hi, pre, hc, D);
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
    DSV4_CHECK(fn.rows == (2 + p.hc) * p.hc && fn.cols == p.hc * p.dim);
    if (n <= 0) return;
    Scratch s(*this);
    const float* fnw = weight_f32(fn, s);
    hc_pre_kernel<<<(unsigned)n, kThreads, 0, stream_>>>(x, post, comb, H, fnw, scale, base, p);
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
    if (n <= 0) return;
    Scratch s(*this);
    const float* fnw = weight_f32(fn, s);
    hc_head_kernel<<<(unsigned)n, kThreads, 0, stream_>>>(y, H, fnw, scale, base, p);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
