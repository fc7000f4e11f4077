// Matmul launch interface shared by the backend's ops: the plain y = x W^T, and the grouped form the MoE
// uses (rows grouped per expert, each group multiplied by its expert's matrix), plus row dequantization.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "kernels/cuda/cuda_dequant.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

namespace gemv {
struct XDigits;
}

// Device memory for count activation blocks as digits (cuda_gemv_digits.cuh), valid until the kernels that
// read it have run (stream order): the caller's op scratch.
using DigitAlloc = std::function<gemv::XDigits*(int64_t count)>;

struct MatmulParams {
    const uint8_t* w = nullptr;  // expert 0's (or the only) matrix, rows of row_bytes
    GgmlType type = GgmlType::F32;
    int64_t K = 0;               // input features (a multiple of the block size)
    int64_t M = 0;               // output features
    size_t row_bytes = 0;
    size_t expert_bytes = 0;     // distance between consecutive experts' matrices
    const float* x = nullptr;
    int64_t x_stride = 0;        // floats between x rows
    float* y = nullptr;
    int64_t y_stride = 0;        // floats between y rows
    int64_t n = 0;               // rows (grouped: total grouped rows)
    // Grouped mode (offsets non-null): rows [offsets[e], offsets[e+1]) use expert e's matrix; row r reads x
    // row x_rows[r] (or r when x_rows is null) and writes y row r.
    const int32_t* offsets = nullptr;
    const int32_t* x_rows = nullptr;
    int n_experts = 1;
};

// The parameters of a plain (non-grouped) y = x W^T over n rows.
MatmulParams plain_matmul(const Weight& w, float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n);

// Runs p with kernel k (chosen by select_matmul; every kernel but tc_bf16, which the backend's matmul runs).
// digits: scratch for the activation digits of gemv_digits.
void launch_matmul(const MatmulParams& p, MatmulKernel k, const QuantTables& t, cudaStream_t s,
                   DigitAlloc* digits = nullptr);

// Grouped matmul over an expert stack w (MoE) on b's stream, its kernel chosen as the f32 one for grouped
// rows: rows [offsets[e], offsets[e+1]) of the n grouped rows use expert e; row r reads x row x_rows[r] (r when
// null) and writes y row r (y rows of w.rows floats).
void launch_grouped_matmul(CudaBackend& b, const Weight& w, const float* x, int64_t x_stride, const int32_t* x_rows,
                           float* y, int64_t n, const int32_t* offsets, int n_experts);

// out[i, 0:cols] = dequant(w row ids[i]) (row i when ids is null), rows of out_stride floats.
void launch_dequant_rows(float* out, int64_t out_stride, const Weight& w, const int32_t* ids, int64_t n,
                         const QuantTables& t, cudaStream_t s);

}  // namespace dsv4::cuda
