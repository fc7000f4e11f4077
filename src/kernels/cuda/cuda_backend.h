// The CUDA backend's public entry points: plain C++ (no CUDA headers), so the CLI and tests can include it
// whether or not they are compiled by nvcc. The backend itself is declared in cuda_backend_impl.cuh.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/backend.h"

namespace dsv4 {

// How the CUDA backend multiplies activations by weights (matmul, moe_experts).
// - F32: every product in f32 on CUDA cores, the weight decoded exactly: reproduces the CPU oracle to f32
//   summation order (the exact-mode golden checks run this way).
// - BF16: inputs of 16 rows or more go to the tensor cores: the weight is decoded to bf16, the activations
//   are rounded to bf16, and cuBLAS (dense matmuls) or the decode-on-load expert kernels multiply them with
//   f32 accumulation (the official model's own numerics: it runs bf16 activations and weights); attention
//   calls of 16 queries or more run their two products in bf16 too. Fewer rows (decode) keep the f32 kernels.
enum class GemmPrecision { F32, BF16 };

struct CudaOptions {
    GemmPrecision gemm = GemmPrecision::F32;  // bf16 becomes the default once it is verified on an H200
    // What-if timing (`dsv4 bench --skip-ops`): these backend ops launch nothing, so a benchmark shows what the
    // step would take without them (indexer_topk writes empty lists, so the attention still reads valid ones).
    // The model's numbers are then wrong: never for anything but timing.
    std::vector<std::string> skip_ops;
    // Kernels forced per op (cuda_kernels.h) where they serve a call: conformance of every choice, A/B timing.
    KernelForce force;
};

// True when the CUDA runtime finds at least one usable device (false without a driver or GPU).
bool cuda_device_available();

// A backend running every op on CUDA device `device`; an error when that device cannot be used.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaOptions& options = {});

// The GEMM precision of a CUDA backend (nullopt when `b` is not one), and a way to change it between ops
// (false when `b` is not a CUDA backend): the conformance test runs one backend in both modes.
std::optional<GemmPrecision> cuda_gemm_precision(const Backend& b);
bool set_cuda_gemm_precision(Backend& b, GemmPrecision p);
// Forces (kernel non-empty) or frees (empty) the kernel of one op of a CUDA backend, between ops; false when
// b is not a CUDA backend or the op or kernel is unknown (cuda_kernels.h). Backend::last_kernel() says which
// kernel the latest op call ran.
bool set_cuda_kernel_force(Backend& b, std::string_view op, std::string_view kernel);

// The conformance test's check of the bf16 decoders of the tensor-core paths: w's rows decoded to bf16 (bit
// patterns, row-major, w.cols per row) with `run` values per thread (8, 16 or 32, as the kernels use them; 8
// on plain types). False when b is not a CUDA backend, w.cols is not a multiple of 8, or run does not divide
// the format's block.
bool cuda_decode_weight_bf16(Backend& b, const Weight& w, int run, std::vector<uint16_t>* out);

}  // namespace dsv4
