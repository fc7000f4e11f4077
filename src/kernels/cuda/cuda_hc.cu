// CUDA hyper-connection ops (mHC): hc_pre (RMS-scaled mix projection, Sinkhorn split, stream collapse),
// hc_post (expand the sublayer output into the streams) and hc_head (final collapse).
//
// hc_pre and hc_head run as two launches. The first is the mix projection raw[i, m] = H_i . fn_m as a plain
// matmul over the weight in its own type (F16, Q8_0, ...: no per-call dequantized copy), so a single decode
// token's 24 dot products of 16384 values stream through the decode GEMV on many SMs (one block per token
// was latency-bound: 340 us per call at V4-Flash shapes). The second, per token, takes the RMS factor of the
// flattened streams, runs the Sinkhorn split in shared memory with one lane per row or column (the shared
// numerics.h steps, bit for bit the serial order) and the collapse.
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

// The RMS factor rsqrt(mean(H_i^2) + eps) of token i's flattened streams (the square sum in double, as the
// CPU), for every thread of the block.
__device__ float hc_rms(const float* Hi, int64_t flat, float eps) {
    __shared__ double scratch[32];
    double ss = 0;
    for (int64_t j = threadIdx.x; j < flat; j += blockDim.x) ss += (double)Hi[j] * Hi[j];
    ss = block_sum(ss, scratch);
    return 1.0f / sqrtf((float)(ss / (double)flat) + eps);
}

// The mixes of token i (raw dots times the RMS factor) into shared memory.
__device__ void load_mixes(float* mixes, const float* raw, const float* Hi, int64_t i, int n_mix, int64_t flat,
                           float eps) {
    const float rms = hc_rms(Hi, flat, eps);
    for (int m = threadIdx.x; m < n_mix; m += blockDim.x) mixes[m] = raw[i * n_mix + m] * rms;
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

__global__ void __launch_bounds__(kThreads) hc_pre_finish_kernel(float* x, float* post, float* comb, const float* H,
                                                                 const float* raw, const float* scale,
                                                                 const float* base, HcParams p) {
    __shared__ float mixes[kMaxMix];
    __shared__ float pre_s[kMaxHc], post_s[kMaxHc], comb_s[kMaxHc * kMaxHc];
    const int hc = p.hc, n_mix = (2 + hc) * hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, raw, H + i * hc * D, i, n_mix, hc * D, p.norm_eps);
    // Sinkhorn on the first warp: lane j owns row j (or column j); __syncwarp orders the steps.
    if (threadIdx.x < kWarp) {
        const int l = threadIdx.x;
        const float eps = p.hc_eps;
        if (l < hc) {
            hc_pre_post(mixes, scale, base, hc, eps, l, pre_s, post_s);
            hc_comb_init(comb_s, mixes, scale, base, hc, eps, l);
        }
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
    __syncthreads();
    for (int t = threadIdx.x; t < hc * hc; t += blockDim.x) comb[i * hc * hc + t] = comb_s[t];
    for (int t = threadIdx.x; t < hc; t += blockDim.x) post[i * hc + t] = post_s[t];
    hc_collapse(x + i * D, H + i * hc * D, pre_s, hc, D);
}

__global__ void __launch_bounds__(kThreads) hc_head_finish_kernel(float* y, const float* H, const float* raw,
                                                                  const float* scale, const float* base, HcParams p) {
    __shared__ float mixes[kMaxHc];
    __shared__ float pre[kMaxHc];
    const int hc = p.hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, raw, H + i * hc * D, i, hc, hc * D, p.norm_eps);
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
    float* raw = s.get<float>(n * n_mix);
    hc_dots(raw, H, fn, n);
    hc_pre_finish_kernel<<<(unsigned)n, kThreads, 0, stream_>>>(x, post, comb, H, raw, scale, base, p);
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
    float* raw = s.get<float>(n * p.hc);
    hc_dots(raw, H, fn, n);
    hc_head_finish_kernel<<<(unsigned)n, kThreads, 0, stream_>>>(y, H, raw, scale, base, p);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hc_dots(float* raw, const float* H, const Weight& fn, int64_t n) {
    // Always the f32 kernels (never the bf16 tensor-core mode): the mixes feed a Sinkhorn and sigmoids.
    MatmulParams mp;
    mp.w = fn.data;
    mp.type = fn.type;
    mp.K = fn.cols;
    mp.M = fn.rows;
    mp.row_bytes = fn.row_bytes;
    mp.x = H;
    mp.x_stride = fn.cols;
    mp.y = raw;
    mp.y_stride = fn.rows;
    mp.n = n;
    launch_matmul(mp, tables_, stream_);
}

}  // namespace dsv4::cuda
