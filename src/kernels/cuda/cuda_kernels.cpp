// Names of the CUDA kernel choices (cuda_kernels.h).
#include "kernels/cuda/cuda_kernels.h"

#include <array>
#include <utility>

namespace dsv4 {

namespace {

template <class E, size_t N>
using Names = std::array<std::pair<E, const char*>, N>;

constexpr Names<MatmulKernel, 8> kMatmul = {{{MatmulKernel::tc_blocks, "tc_blocks"},
                                             {MatmulKernel::tc_bf16, "tc_bf16"},
                                             {MatmulKernel::q8_xreg, "q8_xreg"},
                                             {MatmulKernel::lane_xreg, "lane_xreg"},
                                             {MatmulKernel::gemv_digits, "gemv_digits"},
                                             {MatmulKernel::gemv_f32, "gemv_f32"},
                                             {MatmulKernel::gemv_warp, "gemv_warp"},
                                             {MatmulKernel::tiled, "tiled"}}};
constexpr Names<MoeKernel, 5> kMoe = {{{MoeKernel::decode_xreg, "decode_xreg"},
                                       {MoeKernel::decode_pipelined, "decode_pipelined"},
                                       {MoeKernel::tc_blocks, "tc_blocks"},
                                       {MoeKernel::tc_bf16, "tc_bf16"},
                                       {MoeKernel::grouped, "grouped"}}};
constexpr Names<AttentionKernel, 2> kAttention = {{{AttentionKernel::tc_bf16, "tc_bf16"}, {AttentionKernel::f32, "f32"}}};
constexpr Names<HcPreNormKernel, 2> kHcPreNorm = {{{HcPreNormKernel::fused, "fused"}, {HcPreNormKernel::split, "split"}}};
constexpr Names<SampleKernel, 2> kSample = {{{SampleKernel::cluster16, "cluster16"}, {SampleKernel::cluster8, "cluster8"}}};

template <class E, size_t N>
const char* name_of(const Names<E, N>& names, E k) {
    for (const auto& [e, n] : names)
        if (e == k) return n;
    return "?";
}

template <class E, size_t N>
std::vector<std::string> all(const Names<E, N>& names) {
    std::vector<std::string> out;
    for (const auto& [e, n] : names) out.emplace_back(n);
    return out;
}

template <class E, size_t N>
bool set(std::optional<E>& slot, const Names<E, N>& names, std::string_view kernel) {
    if (kernel.empty()) {
        slot.reset();
        return true;
    }
    for (const auto& [e, n] : names)
        if (kernel == n) {
            slot = e;
            return true;
        }
    return false;
}

}  // namespace

const char* kernel_name(MatmulKernel k) { return name_of(kMatmul, k); }
const char* kernel_name(MoeKernel k) { return name_of(kMoe, k); }
const char* kernel_name(AttentionKernel k) { return name_of(kAttention, k); }
const char* kernel_name(HcPreNormKernel k) { return name_of(kHcPreNorm, k); }
const char* kernel_name(SampleKernel k) { return name_of(kSample, k); }

std::vector<std::string> kernel_choice_ops() { return {"matmul", "moe_experts", "attention", "hc_pre_norm", "sample"}; }

std::vector<std::string> kernel_names(std::string_view op) {
    if (op == "matmul") return all(kMatmul);
    if (op == "moe_experts") return all(kMoe);
    if (op == "attention") return all(kAttention);
    if (op == "hc_pre_norm") return all(kHcPreNorm);
    if (op == "sample") return all(kSample);
    return {};
}

bool set_kernel_force(KernelForce& f, std::string_view op, std::string_view kernel) {
    if (op == "matmul") return set(f.matmul, kMatmul, kernel);
    if (op == "moe_experts") return set(f.moe, kMoe, kernel);
    if (op == "attention") return set(f.attention, kAttention, kernel);
    if (op == "hc_pre_norm") return set(f.hc_pre_norm, kHcPreNorm, kernel);
    if (op == "sample") return set(f.sample, kSample, kernel);
    return false;
}

bool set_kernel_force(KernelForce& f, std::string_view op_eq_kernel) {
    const size_t eq = op_eq_kernel.find('=');
    return eq != std::string_view::npos &&
           set_kernel_force(f, op_eq_kernel.substr(0, eq), op_eq_kernel.substr(eq + 1));
}

}  // namespace dsv4
