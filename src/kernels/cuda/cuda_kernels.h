// The CUDA kernels an op can choose between, as data: one enum per op that has more than one kernel, each
// value's name, and the list a test enumerates. Which kernel runs is decided in one place per op
// (cuda_select.cu: select_matmul, select_moe, select_attention, select_hc_pre_norm, select_sample); the launchers
// take that
// choice. Plain C++ (no CUDA headers), so the CLI and tests can name kernels in any build.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

// y = x W^T (matmul, matmul_batch, matmul_norm, and the products inside other ops).
enum class MatmulKernel : uint8_t {
    tc_blocks,    // 16..64 rows: tensor cores on weight blocks decoded in shared memory (bf16 mode only)
    tc_bf16,      // tensor cores: weight slabs decoded to bf16, cuBLAS (bf16 mode only)
    q8_xreg,      // Q8_0, one row: the activation held in registers as digits (cuda_gemv_q8_xreg.cu)
    lane_xreg,    // the lane-codec formats (1- to 3-bit i-quants, Q2_K), one row: the same (cuda_gemv_lane_xreg.cu)
    gemv_digits,  // n <= 8: the pipelined GEMV over activation digits (Q8_0, Q2_K, IQ2_XXS)
    gemv_f32,     // n <= 8: the pipelined GEMV over f32 activations (the formats of cuda_gemv_codecs.cuh)
    gemv_warp,    // any format, any n: a warp per weight row, 8 activation rows per pass (also grouped rows)
    tiled,        // any format, any n: 64x64 shared-memory tiles (also grouped rows)
};

// moe_experts: the routed experts of n tokens.
enum class MoeKernel : uint8_t {
    decode_xreg,       // few (token, slot) pairs: the register kernels where the formats have them, else pipelined
    decode_pipelined,  // few pairs: the pipelined gate/up and down kernels (cuda_moe_decode.cu)
    tc_blocks,         // a batch or short chunk: tensor cores, each touched expert read once per tile (bf16 mode)
    tc_bf16,           // tensor cores for experts with many rows (bf16 mode only)
    grouped,           // rows grouped by expert on the device, then grouped matmuls
};

// attention: the window + compressed sparse attention.
enum class AttentionKernel : uint8_t {
    tc_bf16,  // both products on the tensor cores (bf16 mode only)
    f32,      // f32 kernels, heads per warp and splits chosen from the shape
};

// hc_pre_norm: mHC pre and the RMS norm of its output.
enum class HcPreNormKernel : uint8_t {
    fused,  // the norm inside the kernel that collapses the streams
    split,  // hc_pre, then rms_norm
};

// sample: the token draw, one cluster of blocks per row (cuda_sample.cu).
enum class SampleKernel : uint8_t {
    cluster16,  // 16 blocks per row (a non-portable cluster): vocabularies past 8 slices of 32768 tokens
    cluster8,   // 8 blocks per row (the portable cluster size): every vocabulary it holds
};

const char* kernel_name(MatmulKernel k);
const char* kernel_name(MoeKernel k);
const char* kernel_name(AttentionKernel k);
const char* kernel_name(HcPreNormKernel k);
const char* kernel_name(SampleKernel k);

// Kernels forced by name per op, for the conformance test (every kernel that can be chosen is checked on
// the cases it serves) and for timing one kernel against another. A forced kernel runs only where it serves
// the call; elsewhere the op chooses as it always does.
struct KernelForce {
    std::optional<MatmulKernel> matmul;
    std::optional<MoeKernel> moe;
    std::optional<AttentionKernel> attention;
    std::optional<HcPreNormKernel> hc_pre_norm;
    std::optional<SampleKernel> sample;
};

// The ops that choose between kernels ("matmul", "moe_experts", "attention", "hc_pre_norm", "sample").
std::vector<std::string> kernel_choice_ops();
// The kernel names of one of those ops, in the order the op prefers them; empty for any other op.
std::vector<std::string> kernel_names(std::string_view op);
// Sets (kernel non-empty) or clears (empty) op's forced kernel; false when op or kernel is unknown.
bool set_kernel_force(KernelForce& f, std::string_view op, std::string_view kernel);
// The same from "OP=KERNEL" (the form of `dsv4 bench --kernel` and `bench_gemv --force`).
bool set_kernel_force(KernelForce& f, std::string_view op_eq_kernel);

}  // namespace dsv4
