// Which kernel runs each CUDA op that has more than one (the kernels are named in cuda_kernels.h): the one
// place that decides. Each select_* returns the kernel the op launches for this call, from the call's shape,
// weight type and row count, the backend's GEMM mode and the device; a kernel forced through the backend's
// options (KernelForce) wins wherever it serves the call. Whether a kernel can take a call at all (its
// formats, alignment, sizes) is its own *_serves function beside it; the order of preference and the speed
// thresholds are here.
#pragma once

#include <optional>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_matmul.cuh"

namespace dsv4::cuda {

class CudaBackend;

// One matmul call: a batch of count products over the same n rows (count > 1: matmul_batch's jobs of one
// weight type; only the batch kernels take them), optionally with the norm of matmul_norm fused.
struct MatmulCall {
    const MatmulParams* ps = nullptr;
    int count = 1;
    bool allow_tc = true;        // false: f32 kernels in every mode (hc_pre's mixes feed a Sinkhorn)
    bool digits = false;         // the caller can give scratch for activation digits
    bool with_norm = false;      // matmul_norm: the kernel must norm the row itself
    const float* norm = nullptr;  // its weight (may be null)
};

bool matmul_kernel_serves(const CudaBackend& b, MatmulKernel k, const MatmulCall& c);
// The kernel of the call; nullopt when none takes it as one launch (a batch or a fused norm that only the
// register GEMV takes: the caller then issues the products one by one, or the norm and the matmul).
std::optional<MatmulKernel> select_matmul(const CudaBackend& b, const MatmulCall& c);

bool moe_kernel_serves(const CudaBackend& b, MoeKernel k, const MoeArgs& a);
MoeKernel select_moe(const CudaBackend& b, const MoeArgs& a);

bool attention_kernel_serves(const CudaBackend& b, AttentionKernel k, const AttentionArgs& a);
AttentionKernel select_attention(const CudaBackend& b, const AttentionArgs& a);

// hc_pre_norm over rows of dim floats at x, H and norm.
bool hc_pre_norm_fused_serves(int64_t dim, const float* x, const float* H, const float* norm);
HcPreNormKernel select_hc_pre_norm(const CudaBackend& b, int64_t dim, const float* x, const float* H, const float* norm);

// sample over rows of n_vocab logits. sample_max_clusters (cuda_sample.cu): how many rows kernel k runs at once
// on this device, 0 where it cannot take the vocabulary or its cluster does not fit.
int sample_max_clusters(SampleKernel k, int64_t n_vocab);
SampleKernel select_sample(const CudaBackend& b, int64_t n_vocab);

}  // namespace dsv4::cuda
