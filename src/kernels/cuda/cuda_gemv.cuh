// Decode GEMV (few activation rows) that streams weights with 16-byte loads: see cuda_gemv.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_matmul.cuh"

namespace dsv4::cuda {

// out[i, c] = the digits of x[i, 32c .. 32c + 32) for the n rows of K values (K % 32 == 0, x rows 16-byte
// aligned).
void launch_quantize_digits(gemv::XDigits* out, const float* x, int64_t x_stride, int64_t n, int64_t K, cudaStream_t s);

// Which decode kernels run, from DSV4_GEMV (read once per process), so one GPU run can A/B them:
// unset: the pipelined GEMV (cuda_gemv.cu) and the MoE decode path (cuda_moe_decode.cu);
// "staged": the previous staged GEMV (cuda_gemv_staged.cu), MoE through the grouped matmuls;
// "legacy": cuda_matmul.cu's one-value-per-call kernel (chosen there), MoE grouped.
enum class GemvMode { Pipelined, Staged, Legacy };
GemvMode gemv_mode();

// Whether the formats with a digit codec (Q8_0, Q2_K, IQ2_XXS) multiply activations quantized to digits
// (cuda_gemv_digits.cuh); DSV4_GEMV_DIGITS=0 keeps f32 activations, for A/B timing.
bool digits_enabled();

// Runs y = x W^T through the decode GEMV of gemv_mode() when it handles this case (its weight formats,
// 16-byte aligned activation rows, a suitably aligned matrix) and returns true; returns false without
// launching anything otherwise, so the caller falls back to the generic kernels. The caller has already
// decided that n is decode-sized (plain: n <= 8; grouped: few rows per expert, which the previous staged
// kernel serves in every mode).
// With digits (not null) the formats that have a digit codec quantize the input first (launch_gemv_batch).
bool launch_gemv_staged(const MatmulParams& p, const QuantTables& t, cudaStream_t s, DigitAlloc* digits);

// A batch of 1..16 plain matmuls of one weight type over the same n <= 8 activation rows as one launch
// (pipelined mode only); returns false, launching nothing, when any of them is not served. With digits (not
// null), the formats that have a digit codec quantize each distinct input first and use integer dots.
bool launch_gemv_batch(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s, DigitAlloc* digits);

// The Q8_0 GEMV with the activation in registers (cuda_gemv_q8_xreg.cu): 1..16 matmuls of one activation row
// (n = 1) that share K (a multiple of 512, at most 16384), Q8_0 weights with 16-byte aligned rows and
// 16-byte aligned inputs, as one launch that quantizes its input itself; returns false, launching nothing,
// otherwise or when DSV4_GEMV_XREG=0 (A/B).
bool launch_gemv_q8_xreg(const MatmulParams* ps, int count, cudaStream_t s);
// The same for one job whose x row is RMS-normed first (times norm[K] when non-null; eps as rms_norm), inside
// the kernel: every block holds the whole row (matmul_norm). False, launching nothing, where the kernel does
// not apply.
bool launch_gemv_q8_xreg_norm(const MatmulParams& p, const float* norm, float eps, cudaStream_t s);

// The previous staged kernel (cuda_gemv_staged.cu), same contract.
bool launch_gemv_warp_staged(const MatmulParams& p, const QuantTables& t, cudaStream_t s);

}  // namespace dsv4::cuda
