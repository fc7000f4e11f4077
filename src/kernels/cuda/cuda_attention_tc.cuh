// Sparse attention of prefill chunks on tensor cores (the bf16 GEMM mode). See cuda_attention_tc.cu.
#pragma once

#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Runs a's attention on the tensor cores and returns true when b is in the bf16 GEMM mode, the call has at
// least kTcMinRows queries (prefill; decode keeps the f32 kernel), head_dim is 64, 128, 256 or 512 and the
// q, out and KV pointers are 16-byte aligned; otherwise returns false and does nothing.
bool attention_tc(CudaBackend& b, const AttentionArgs& a);

}  // namespace dsv4::cuda
