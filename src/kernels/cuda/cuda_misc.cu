// CUDA element-wise and row-copy ops: fill, add, SwiGLU, strided row copies, gathers and scatters.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(float* dst, float value, int64_t n) {
    pdl_begin();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

__global__ void add_kernel(float* y, const float* a, const float* b, int64_t n) {
    pdl_begin();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

__global__ void swiglu_kernel(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                              float clamp) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * f; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / f, j = t % f;
        h[t] = swiglu_value(g[i * gu_stride + j], u[i * gu_stride + j], clamp);
    }
}

// Rows may come from an index list (gather) or a fixed stride.
__global__ void copy_rows_kernel(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                                 const int32_t* idx, int64_t n, int64_t cols) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * cols;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / cols, c = t % cols;
        const int64_t r = idx ? (int64_t)idx[i] : i;
        dst[i * dst_stride + c] = src[r * src_stride + c];
    }
}

__global__ void scatter_rows_kernel(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * cols;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / cols, c = t % cols;
        const int32_t r = idx[i];
        if (r >= 0) dst[(int64_t)r * cols + c] = src[t];
    }
}

// scatter_rows with a destination per row (a pointer table).
__global__ void scatter_rows_to_kernel(float* const* dst, const float* src, const int32_t* idx, int64_t n,
                                       int64_t cols) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * cols;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / cols, c = t % cols;
        const int32_t r = idx[i];
        if (r >= 0) dst[i][(int64_t)r * cols + c] = src[t];
    }
}

// A thread per FP4 block of a row (ops/fp4_rows.h); the block-0 thread also writes the row's padding.
__global__ void pack_fp4_rows_kernel(float* dst, float* const* dst_rows, const float* src, const int32_t* idx,
                                     int64_t n, int dim) {
    pdl_begin();
    const int nb = dim / kFp4Block;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * nb; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / nb;
        const int b = (int)(t % nb);
        const int32_t r = idx[i];
        if (r < 0) continue;
        uint8_t* row = reinterpret_cast<uint8_t*>((dst_rows ? dst_rows[i] : dst) + (int64_t)r * fp4_row_floats(dim));
        fp4_pack_block(src + i * dim, dim, b, row);
        if (b == 0) fp4_pack_pad(dim, row);
    }
}

// A thread per FP8 block of a row's non-RoPE dims (ops/kv_rows.h); the block-0 thread also writes the RoPE dims
// and the padding.
__global__ void pack_kv_rows_kernel(float* dst, float* const* dst_rows, const float* src, const int32_t* idx,
                                    int64_t n, int dim, int rope) {
    pdl_begin();
    const int nb = (int)kv_row_scales(dim, rope);
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * nb; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / nb;
        const int b = (int)(t % nb);
        const int32_t r = idx[i];
        if (r < 0) continue;
        uint8_t* row = reinterpret_cast<uint8_t*>((dst_rows ? dst_rows[i] : dst) + (int64_t)r * kv_row_floats(dim, rope));
        kv_pack_block(src + i * dim, dim, rope, b, row);
        if (b == 0) kv_pack_rest(src + i * dim, dim, rope, row);
    }
}

}  // namespace

void CudaBackend::fill(float* dst, float value, int64_t n) {
    if (n <= 0) return;
    launch_pdl(fill_kernel, grid_for(n, kThreads), kThreads, 0, stream_, dst, value, n);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::add(float* y, const float* a, const float* b, int64_t n) {
    if (n <= 0) return;
    launch_pdl(add_kernel, grid_for(n, kThreads), kThreads, 0, stream_, y, a, b, n);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                         float clamp) {
    if (skipped("swiglu")) return;
    if (n * f <= 0) return;
    launch_pdl(swiglu_kernel, grid_for(n * f, kThreads), kThreads, 0, stream_, h, g, u, n, f, gu_stride, clamp);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                            int64_t cols) {
    if (skipped("copy_rows")) return;
    if (n * cols <= 0) return;
    // Every element is read before any is written only within a thread, so the rows must not overlap
    // (the CPU's memmove allows it; no caller of this op does it).
    launch_pdl(copy_rows_kernel, grid_for(n * cols, kThreads), kThreads, 0, stream_, dst, dst_stride, src, src_stride,
               nullptr, n, cols);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    if (n * cols <= 0) return;
    launch_pdl(copy_rows_kernel, grid_for(n * cols, kThreads), kThreads, 0, stream_, dst, cols, src, cols, idx, n,
               cols);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    if (skipped("scatter_rows")) return;
    if (n * cols <= 0) return;
    launch_pdl(scatter_rows_kernel, grid_for(n * cols, kThreads), kThreads, 0, stream_, dst, src, idx, n, cols);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::scatter_rows_to(float* const* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    if (skipped("scatter_rows_to")) return;
    if (n * cols <= 0) return;
    launch_pdl(scatter_rows_to_kernel, grid_for(n * cols, kThreads), kThreads, 0, stream_, dst, src, idx, n, cols);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::pack_fp4_rows(float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n,
                                int dim) {
    if (skipped("pack_fp4_rows")) return;
    DSV4_CHECK_MSG(dim > 0 && dim % kFp4Block == 0, "pack_fp4_rows: %d values a row is not a whole number of blocks",
                   dim);
    if (n <= 0) return;
    launch_pdl(pack_fp4_rows_kernel, grid_for(n * (dim / kFp4Block), kThreads), kThreads, 0, stream_, dst, dst_rows,
               src, idx, n, dim);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::pack_kv_rows(float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n,
                               int dim, int rope) {
    if (skipped("pack_kv_rows")) return;
    DSV4_CHECK_MSG(dim > rope && rope >= 0, "pack_kv_rows: %d RoPE dims of %d", rope, dim);
    if (n <= 0) return;
    launch_pdl(pack_kv_rows_kernel, grid_for(n * kv_row_scales(dim, rope), kThreads), kThreads, 0, stream_, dst,
               dst_rows, src, idx, n, dim, rope);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
