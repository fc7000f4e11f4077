// Decode GEMV (few activation rows) that streams weights with 16-byte loads: see cuda_gemv.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_matmul.cuh"

namespace dsv4::cuda {

// out[i, c] = the digits of x[i, 32c .. 32c + 32) for the n rows of K values (K % 32 == 0, x rows 16-byte
// aligned).
void launch_quantize_digits(gemv::XDigits* out, const float* x, int64_t x_stride, int64_t n, int64_t K, cudaStream_t s);

// The decode GEMVs' limits: jobs per batch launch (matmul_batch groups its jobs by this many) and activation
// rows per call.
constexpr int kGemvMaxJobs = 16;
constexpr int64_t kGemvMaxRows = 8;

// The pipelined decode GEMV (cuda_gemv.cu): a batch of 1..16 plain matmuls of one weight type over the same
// n <= 8 activation rows as one launch. serves: whether it takes the batch (its formats, whole blocks, the
// codec's alignment, 16-byte aligned activation rows). With use_digits (formats with a digit codec: Q8_0,
// Q2_K, IQ2_XXS), each distinct input is quantized to digits in scratch from `digits` first and the lanes use
// integer dots.
bool gemv_pipelined_serves(const MatmulParams* ps, int count);
void launch_gemv_pipelined(const MatmulParams* ps, int count, bool use_digits, const QuantTables& t, cudaStream_t s,
                           DigitAlloc* digits);

// The Q8_0 GEMV with the activation in registers (cuda_gemv_q8_xreg.cu): 1..16 matmuls of one activation row
// (n = 1) that share K (a multiple of 512, at most 16384), Q8_0 weights with 16-byte aligned rows and 16-byte
// aligned inputs, as one launch that quantizes its input itself. With norm (one job), the x row is RMS-normed
// first (times norm[K] when non-null; eps as rms_norm) inside the kernel: every block holds the whole row
// (matmul_norm).
bool gemv_q8_xreg_serves(const MatmulParams* ps, int count, bool with_norm, const float* norm);
void launch_gemv_q8_xreg(const MatmulParams* ps, int count, cudaStream_t s);
void launch_gemv_q8_xreg_norm(const MatmulParams& p, const float* norm, float eps, cudaStream_t s);

// The same for the formats with a lane codec (cuda_gemv_lane_xreg.cu: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, Q2_K): 1..16 matmuls of one activation row that share K (a multiple of 512, at most 16384) and
// the format, rows and matrices aligned to the format's lane codec, 16-byte aligned inputs.
bool gemv_lane_xreg_serves(const MatmulParams* ps, int count);
void launch_gemv_lane_xreg(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s);

}  // namespace dsv4::cuda
