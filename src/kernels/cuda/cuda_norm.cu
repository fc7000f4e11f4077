// CUDA per-row ops: RMS norm (sum of squares in double, as the CPU oracle), RoPE, the FP8 fake quantizer, the
// three fused per head (norm_rope), and the Walsh-Hadamard rotation with the optional FP4 round trip. The scalar
// numerics come from ops/numerics.h, the same code the CPU runs, so FP8/FP4 rounding is bit-identical.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

// The vectorized norms' block size and float4s per thread.
constexpr int kNormThreads = 256;
constexpr int kNormVecs = 8;

// One 16-byte aligned row of at most threads * 4 * kNormVecs floats, normed by `threads` threads of which this is
// thread t (a block or a warp) into v: each loads its float4s t, t + threads, ... before using any (a row is one
// dependent load, not one per loop trip) and scales them in place (times weight when non-null); sum() adds a
// double over those threads. Slots past the row hold zeros.
template <int V = kNormVecs, class Sum>
__device__ __forceinline__ void rms_norm_vec_regs(float4 (&v)[V], const float* x, const float* weight,
                                                  int64_t dim, float eps, int t, int threads, Sum sum) {
    const float4* xi = reinterpret_cast<const float4*>(x);
    const int nv = (int)(dim / 4);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = t + k * threads;
        v[k] = j < nv ? xi[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) ss += sum_sq4(v[k]);
    ss = sum(ss);
    const float r = rms_factor(ss, dim, eps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = t + k * threads;
        if (j >= nv) break;
        v[k] = rms_scale4(v[k], r, weight, j);
    }
}

// rms_norm_vec_regs, then the row's store.
template <class Sum>
__device__ __forceinline__ void rms_norm_row_vec(float* y, const float* x, const float* weight, int64_t dim, float eps,
                                                 int t, int threads, Sum sum) {
    float4 v[kNormVecs];
    rms_norm_vec_regs(v, x, weight, dim, eps, t, threads, sum);
    float4* yi = reinterpret_cast<float4*>(y);
    const int nv = (int)(dim / 4);
#pragma unroll
    for (int k = 0; k < kNormVecs; ++k) {
        const int j = t + k * threads;
        if (j < nv) yi[j] = v[k];
    }
}

// A block per row of up to kNormThreads * 4 * kNormVecs floats.
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_vec_kernel(float* y, const float* x, const float* weight, int64_t dim, int64_t stride, float eps) {
    pdl_begin();
    __shared__ double scratch[32];
    rms_norm_row_vec(y + blockIdx.x * stride, x + blockIdx.x * stride, weight, dim, eps, threadIdx.x, kNormThreads,
                     [&](double v) { return block_sum(v, scratch); });
}

// Rows of up to kWarp * 4 * kNormVecs floats, a warp per row and kNormThreads / kWarp rows per block: the
// per-head norms of q (a row of head_dim per head and token) would leave most of a 256-thread block idle and
// wait on its block-wide sum.
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_warp_kernel(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                         float eps) {
    pdl_begin();
    const int64_t row = (int64_t)blockIdx.x * (kNormThreads / kWarp) + threadIdx.x / kWarp;
    if (row >= n) return;
    rms_norm_row_vec(y + row * stride, x + row * stride, weight, dim, eps, threadIdx.x % kWarp, kWarp,
                     [](double v) { return warp_sum(v); });
}

__global__ void rms_norm_kernel(float* y, const float* x, const float* weight, int64_t dim, int64_t stride, float eps) {
    pdl_begin();
    __shared__ double scratch[32];
    const float* xi = x + blockIdx.x * stride;
    float* yi = y + blockIdx.x * stride;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += (double)xi[j] * xi[j];
    ss = block_sum(ss, scratch);
    const float r = 1.0f / sqrtf((float)(ss / (double)dim) + eps);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float v = __fmul_rn(xi[j], r);
        yi[j] = weight ? __fmul_rn(weight[j], v) : v;
    }
}

__global__ void rope_kernel(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                            const float* freqs, int rope_dim, bool inverse) {
    pdl_begin();
    const int half = rope_dim / 2, off = head_dim - rope_dim;
    const int64_t total = n * n_heads * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int p = (int)(t % half);
        const int h = (int)((t / half) % n_heads);
        const int64_t i = t / ((int64_t)half * n_heads);
        float* v = x + i * stride + (int64_t)h * head_dim + off + 2 * p;
        float a = v[0], c = v[1];
        rope_pair(a, c, pos[i], freqs[p], inverse);
        v[0] = a;
        v[1] = c;
    }
}

// One warp per block of `block` values: lanes over the values, the absolute maximum by a warp reduction
// (exact in any order), so a decode row's few blocks are not each one thread's serial loop.
__global__ void fp8_sim_kernel(float* x, int64_t n, int64_t blocks_per_row, int64_t stride, int block) {
    pdl_begin();
    const int lane = threadIdx.x % kWarp;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / kWarp);
    for (int64_t t = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp; t < n * blocks_per_row; t += warps) {
        float* v = x + (t / blocks_per_row) * stride + (t % blocks_per_row) * block;
        float amax = 0.0f;
        for (int j = lane; j < block; j += kWarp) amax = fmaxf(amax, fabsf(v[j]));
        const float s = fake_quant_scale(warp_max(amax), false);
        for (int j = lane; j < block; j += kWarp) v[j] = fake_quant_value(v[j], s, false);
    }
}

// norm_rope with a warp per (row, head) for heads of head_dim <= kWarp * 4 * kNormVecs floats that are 16-byte
// aligned (x, weight, head_dim and stride in floats multiples of 4): the head's RMS norm in registers exactly as
// the rms_norm kernels compute it (rms_norm_vec_regs), RoPE on its last rope_dim dims, the FP8 round trip of dims
// [0, head_dim - rope_dim) in blocks of `block` values (0: none), then one store. Lane l holds the float4 slots
// j = l + kWarp k (dims 4j .. 4j + 3), so:
// - a RoPE pair starts at an even dim (head_dim - rope_dim is even), so it is the (x, y) or (z, w) of one float4;
// - an FP8 block (block a power of two in [4, 4 kWarp], blocks starting at multiples of block, the FP8 dims a
//   whole number of them) is the block / 4 consecutive lanes of one slot k starting at a multiple of block / 4, so
//   its absolute maximum is a shuffle reduction over the lane bits below block / 4 (fmaxf is exact in any order);
//   a lane group is wholly inside or outside the FP8 dims, and every lane takes part in every shuffle.
template <int V>
__global__ void __launch_bounds__(kNormThreads)
    norm_rope_kernel(float* x, int64_t n_warps, int n_heads, int head_dim, int64_t stride, const float* weight,
                     float eps, const int32_t* pos, const float* freqs, int rope_dim, int block) {
    const int lane = threadIdx.x % kWarp;
    const int nv = head_dim / 4, off = head_dim - rope_dim;
    // The norm's weights and the RoPE frequencies of the lane's dims are read before the wait (model data, not
    // written by any kernel), so after it the chain is one round trip for the head and its position.
    float4 nw[V];
    float2 fr[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = lane + k * kWarp, d = 4 * j;
        nw[k] = rms_weight4(weight, j, nv);
        fr[k].x = rope_dim > 0 && d >= off && d < head_dim ? freqs[(d - off) / 2] : 0.0f;
        fr[k].y = rope_dim > 0 && d + 2 >= off && d < head_dim ? freqs[(d + 2 - off) / 2] : 0.0f;
    }
    pdl_begin();
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (w >= n_warps) return;  // warp-uniform
    const int64_t row = w / n_heads;
    float* head = x + row * stride + (w % n_heads) * (int64_t)head_dim;
    const int32_t p = rope_dim > 0 ? pos[row] : 0;
    // The head's RMS norm as rms_norm_vec_regs computes it: a double sum, then w * (x * r).
    float4 v[V];
    const float4* hv = reinterpret_cast<const float4*>(head);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = lane + k * kWarp;
        v[k] = j < nv ? hv[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    double ssq = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) ssq += sum_sq4(v[k]);
    const float r = rms_factor(warp_sum(ssq), head_dim, eps);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = rms_scale4(v[k], r, nw[k], weight != nullptr);
    if (rope_dim > 0) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int d = 4 * (lane + k * kWarp);
            if (d >= head_dim) break;
            rope_float4(v[k], d, off, p, [&](int i) { return i ? fr[k].y : fr[k].x; }, false);
        }
    }
    if (block > 0) {
        const int group = block / 4;  // lanes per FP8 block
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (4 * kWarp * k >= off) break;  // warp-uniform: slot k holds no FP8 dims
            const bool fp8 = 4 * (lane + k * kWarp) < off;
            float amax = fp8 ? fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w))) : 0.0f;
            for (int m = 1; m < group; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
            if (fp8) {
                const float s = fake_quant_scale(amax, false);
                v[k] = make_float4(fake_quant_value(v[k].x, s, false), fake_quant_value(v[k].y, s, false),
                                   fake_quant_value(v[k].z, s, false), fake_quant_value(v[k].w, s, false));
            }
        }
    }
    float4* out = reinterpret_cast<float4*>(head);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int j = lane + k * kWarp;
        if (j < nv) out[j] = v[k];
    }
}

// One block per row: the fast Walsh-Hadamard transform in shared memory, in the CPU's butterfly order
// (Sylvester: H_2n = [[H, H], [H, -H]]), so every value is the same sum of the same terms.
__global__ void hadamard_kernel(float* x, int dim, float scale, bool fp4_sim) {
    pdl_begin();
    extern __shared__ float v[];
    float* row = x + (int64_t)blockIdx.x * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) v[j] = row[j];
    __syncthreads();
    for (int len = 1; len < dim; len <<= 1) {
        for (int p = threadIdx.x; p < dim / 2; p += blockDim.x) {
            const int s = (p / len) * 2 * len + (p % len);
            const float a = v[s], c = v[s + len];
            v[s] = a + c;
            v[s + len] = a - c;
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < dim; j += blockDim.x) v[j] *= scale;
    __syncthreads();
    if (fp4_sim)
        for (int b = threadIdx.x; b < dim / 32; b += blockDim.x) fake_quant_block(v + 32 * b, 32, true);
    __syncthreads();
    for (int j = threadIdx.x; j < dim; j += blockDim.x) row[j] = v[j];
}

// One warp per row for dim = 32 V (V a power of two up to 32): lane l holds values [l V, l V + V) in
// registers, butterflies shorter than V stay in the lane and the longer ones pair lane l with l ^ (len / V)
// through a shuffle. Each butterfly is the CPU's a + c, a - c, so every value is bit for bit the same; the
// FP4 blocks of 32 values span 32 / V lanes, whose largest magnitude is a shuffle reduction (fmaxf is exact
// and order-free). A block per row spent most of its ~8 us on barriers and one thread per FP4 block.
template <int V>
__global__ void hadamard_warp_kernel(float* x, int64_t n, float scale, bool fp4_sim) {
    pdl_begin();
    const int lane = threadIdx.x % kWarp;
    const int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp;
    if (i >= n) return;  // warp-uniform
    float* row = x + i * (kWarp * V) + lane * V;
    float v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = row[j];
#pragma unroll
    for (int len = 1; len < V; len <<= 1)
#pragma unroll
        for (int p = 0; p < V / 2; ++p) {
            const int s = (p / len) * 2 * len + p % len;
            const float a = v[s], c = v[s + len];
            v[s] = a + c;
            v[s + len] = a - c;
        }
#pragma unroll
    for (int m = 1; m < kWarp; m <<= 1) {  // len = m V
        const bool upper = lane & m;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float o = __shfl_xor_sync(0xffffffffu, v[j], m);
            v[j] = upper ? o - v[j] : v[j] + o;
        }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= scale;
    if (fp4_sim) {
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
        for (int m = 1; m < kWarp / V; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        const float sc = fake_quant_scale(amax, true);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = fake_quant_value(v[j], sc, true);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) row[j] = v[j];
}

}  // namespace

void CudaBackend::rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                           float eps) {
    if (skipped("rms_norm")) return;
    if (n <= 0 || dim <= 0) return;
    DSV4_CHECK(n <= INT32_MAX);
    const bool aligned = aligned16(x, y, weight);
    if (aligned && dim % 4 == 0 && stride % 4 == 0 && dim <= (int64_t)kWarp * 4 * kNormVecs && n > 1) {
        constexpr int kRows = kNormThreads / kWarp;
        launch_pdl(rms_norm_warp_kernel, (unsigned)ceil_div(n, kRows), kNormThreads, 0, stream_, y, x, weight, n, dim,
                   stride, eps);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (aligned && dim % 4 == 0 && stride % 4 == 0 && dim <= (int64_t)kNormThreads * 4 * kNormVecs) {
        launch_pdl(rms_norm_vec_kernel, (unsigned)n, kNormThreads, 0, stream_, y, x, weight, dim, stride, eps);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const int threads = dim >= 1024 ? 256 : 128;
    launch_pdl(rms_norm_kernel, (unsigned)n, threads, 0, stream_, y, x, weight, dim, stride, eps);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                       const RopeParams& r, bool inverse) {
    if (skipped("rope")) return;
    const int64_t total = n * n_heads * (r.rope_dim / 2);
    if (total <= 0) return;
    DSV4_CHECK(r.rope_dim <= head_dim && r.rope_dim % 2 == 0);
    launch_pdl(rope_kernel, grid_for(total, 256), 256, 0, stream_, x, n, n_heads, head_dim, stride, pos, r.freqs,
               r.rope_dim, inverse);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) {
    DSV4_CHECK(block > 0 && n_dims % block == 0);
    const int64_t per_row = n_dims / block;
    if (n * per_row <= 0) return;
    launch_pdl(fp8_sim_kernel, grid_for(n * per_row * kWarp, 128), 128, 0, stream_, x, n, per_row, stride, block);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight,
                            float eps, const int32_t* pos, const RopeParams& r, int fp8_block) {
    if (skipped("norm_rope")) return;
    norm_rope_check(n, n_heads, head_dim, stride, pos, r, fp8_block);
    if (n == 0) return;
    // The fused kernel's shapes (norm_rope_kernel); anything else runs the three kernels one after another.
    const bool fp8_fits =
        fp8_block == 0 || (fp8_block >= 4 && fp8_block <= 4 * kWarp && (fp8_block & (fp8_block - 1)) == 0);
    if (head_dim % 4 != 0 || stride % 4 != 0 || head_dim > kWarp * 4 * kNormVecs || !aligned16(x, weight) ||
        !fp8_fits) {
        Backend::norm_rope(x, n, n_heads, head_dim, stride, weight, eps, pos, r, fp8_block);  // the separate kernels
        return;
    }
    const int64_t warps = n * n_heads;
    DSV4_CHECK(warps <= INT32_MAX);
    const int per_block = (int)std::min<int64_t>(kNormThreads / kWarp, warps);
    // V float4 slots per lane: the head's size rounded up to a power of two (fewer slots, less code to fetch).
    const int slots = (int)ceil_div(head_dim, 4 * kWarp);
    auto launch = [&](auto kernel) {
        launch_pdl(kernel, ceil_div(warps, per_block), per_block * kWarp, 0, stream_, x, warps, n_heads, head_dim,
                   stride, weight, eps, pos, r.freqs, r.rope_dim, fp8_block);
    };
    if (slots <= 1)
        launch(norm_rope_kernel<1>);
    else if (slots <= 2)
        launch(norm_rope_kernel<2>);
    else if (slots <= 4)
        launch(norm_rope_kernel<4>);
    else
        launch(norm_rope_kernel<kNormVecs>);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hadamard(float* x, int64_t n, int dim, bool fp4_sim) {
    if (skipped("hadamard")) return;
    DSV4_CHECK(dim > 0 && (dim & (dim - 1)) == 0);
    DSV4_CHECK(!fp4_sim || dim % 32 == 0);
    if (n <= 0) return;
    DSV4_CHECK(n <= INT32_MAX);
    const float scale = 1.0f / sqrtf((float)dim);
    if (dim >= kWarp && dim <= 32 * kWarp) {  // a warp per row (V = dim / 32 values per lane), 4 rows per block
        using Kernel = void (*)(float*, int64_t, float, bool);
        static constexpr Kernel kByLog2V[] = {hadamard_warp_kernel<1>,  hadamard_warp_kernel<2>,
                                              hadamard_warp_kernel<4>,  hadamard_warp_kernel<8>,
                                              hadamard_warp_kernel<16>, hadamard_warp_kernel<32>};
        constexpr int kRows = 4;
        launch_pdl(kByLog2V[__builtin_ctz((unsigned)(dim / kWarp))], ceil_div(n, kRows), kRows * kWarp, 0, stream_, x,
                   n, scale, fp4_sim);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const size_t smem = (size_t)dim * sizeof(float);
    DSV4_CHECK_MSG(smem <= 48 * 1024, "hadamard: dim %d exceeds the shared-memory row buffer", dim);
    const int threads = dim >= 512 ? 256 : (dim >= 64 ? dim / 2 : 32);
    launch_pdl(hadamard_kernel, (unsigned)n, threads, smem, stream_, x, dim, scale, fp4_sim);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
