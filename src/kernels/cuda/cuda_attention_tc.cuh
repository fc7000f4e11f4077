// Sparse attention of prefill chunks on tensor cores (the bf16 GEMM mode). See cuda_attention_tc.cu.
#pragma once

#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Whether a's attention can run on the tensor cores: b in the bf16 GEMM mode, head_dim 64, 128, 256 or 512,
// the q, out and KV pointers 16-byte aligned and the kernel's shared memory available; launch_attention_tc
// runs it (without the output's RoPE: the caller applies it).
bool attention_tc_serves(const CudaBackend& b, const AttentionArgs& a);
void launch_attention_tc(CudaBackend& b, const AttentionArgs& a);

}  // namespace dsv4::cuda
