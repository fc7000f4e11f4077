// Sparse attention on tensor cores (the bf16 GEMM mode). See cuda_attention_tc.cu.
#pragma once

#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Whether a's attention can run on the tensor cores: b in the bf16 GEMM mode, head_dim 64, 128, 256 or 512,
// the q, out and KV pointers 16-byte aligned, one source for all queries and the kernel's shared memory
// available. launch_attention_tc runs it, prefill-sized calls in one block per (query, head group), decode-sized
// ones with each query's entries split over blocks and merged (merge_attention_splits, which applies a.out_rope);
// it returns whether it merged splits. Without splits the output's RoPE is the caller's.
bool attention_tc_serves(const CudaBackend& b, const AttentionArgs& a);
bool launch_attention_tc(CudaBackend& b, const AttentionArgs& a);

}  // namespace dsv4::cuda
