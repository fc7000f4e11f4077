// Decode GEMV (few activation rows) that streams quantized weights with 16-byte loads: see cuda_gemv.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_matmul.cuh"

namespace dsv4::cuda {

// Runs y = x W^T through the staged GEMV when it handles this case (a specialized weight format, 16-byte
// aligned activation rows) and returns true; returns false without launching anything otherwise, so the
// caller falls back to the generic kernels. The caller has already decided that n is decode-sized.
bool launch_gemv_staged(const MatmulParams& p, const QuantTables& t, cudaStream_t s);

}  // namespace dsv4::cuda
