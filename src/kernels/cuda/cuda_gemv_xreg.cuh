// Shared pieces of the decode kernels that hold their one activation row in registers (cuda_gemv_q8_xreg.cu,
// cuda_moe_gate_up_xreg.cu). A block of W warps covers the K inputs, lane l of warp w owning values
// [512 H w + 16 H l, + 16 H) as digits (cuda_gemv_digits.cuh) that it computes itself; the block streams its
// rows' slices through per-warp cp.async rings, a stage of 4 rows at a time, and each row's 32 lane sums are
// folded by a butterfly, then the W warp sums are added in warp order in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"

namespace dsv4::cuda::xreg {

constexpr int kRows = 4;       // rows per stage (butterfly4 is written for 4)
constexpr int kMaxWarps = 32;  // a block of at most 1024 threads: K <= 512 H * 32

// The digits of this lane's 16 H values x[0 .. 16 H) (16-byte aligned) and the scale of their 32-value block
// (H = 1: the other half is on lane ^ 1): the same digits quantize_digits_kernel writes for the block; with
// sum16 (not null), also the f32 sums of each 16 of the values, in the order of XDigits::sum16.
template <int H>
__device__ __forceinline__ float lane_digits(const float* x, uint32_t (&a0)[4 * H], uint32_t (&a1)[4 * H],
                                             uint32_t (&a2)[4 * H], float* sum16 = nullptr) {
    constexpr int kW = 4 * H;
    float v[kW][4];
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < kW; ++i) {
        const float4 q = *reinterpret_cast<const float4*>(x + 4 * i);
        v[i][0] = q.x, v[i][1] = q.y, v[i][2] = q.z, v[i][3] = q.w;
        m = fmaxf(m, gemv::abs_max4(v[i]));
    }
    if (sum16 != nullptr)
#pragma unroll
        for (int h = 0; h < H; ++h)
            sum16[h] = (gemv::sum4(v[4 * h]) + gemv::sum4(v[4 * h + 1])) +
                       (gemv::sum4(v[4 * h + 2]) + gemv::sum4(v[4 * h + 3]));
    if constexpr (H == 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    float scale, inv;
    const bool ok = gemv::digit_scale(m, scale, inv);
#pragma unroll
    for (int i = 0; i < kW; ++i) {
        a0[i] = a1[i] = a2[i] = 0;
        if (ok) gemv::digits_of4(v[i], inv, a0[i], a1[i], a2[i]);
    }
    return scale;
}

// The warp sums of 4 rows from each lane's acc[4]: rows {0, 1} stay on lanes 0-15 and {2, 3} on 16-31, then
// one row per 8 lanes; lanes 8 r .. 8 r + 7 return row r's sum (a fixed order: deterministic).
__device__ __forceinline__ float butterfly4(const float (&acc)[kRows], int lane) {
    const bool hi16 = lane & 16, hi8 = lane & 8;
    float k0 = hi16 ? acc[2] : acc[0], k1 = hi16 ? acc[3] : acc[1];
    k0 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[0] : acc[2], 16);
    k1 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[1] : acc[3], 16);
    float k = hi8 ? k1 : k0;
    k += __shfl_xor_sync(0xffffffffu, hi8 ? k0 : k1, 8);
    k += __shfl_xor_sync(0xffffffffu, k, 4);
    k += __shfl_xor_sync(0xffffffffu, k, 2);
    k += __shfl_xor_sync(0xffffffffu, k, 1);
    return k;
}

// The A/B switches of these kernels, each read once. DSV4_GEMV_XREG=0 / DSV4_MOE_XREG=0 turn the Q8_0 GEMV /
// the MoE kernels off; DSV4_GEMV_XREG_H and DSV4_MOE_XREG_H set H (1 or 2) where K allows. The defaults are
// what measured faster on the H200 (docs/benchmarks.md, runs 50 and 52): for the Q8_0 GEMV, H = 1 (a warp's
// chain of dependent instructions is half as long and a block has twice the warps: small matrices, whose
// time is that chain, gain most); for the MoE, H = 2 (53.2 us per layer against 55.5 for the pipelined
// kernels, where H = 1 took 56.8).
inline int env_h(const char* name, int dflt) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "1") == 0 ? 1 : v && std::strcmp(v, "2") == 0 ? 2 : dflt;
}
inline bool gemv_enabled() {
    static const bool on = env_switch_on("DSV4_GEMV_XREG");
    return on;
}
inline int gemv_h() {
    static const int h = env_h("DSV4_GEMV_XREG_H", 1);
    return h;
}
inline bool moe_enabled() {
    static const bool on = env_switch_on("DSV4_MOE_XREG");
    return on;
}
inline int moe_h() {
    static const int h = env_h("DSV4_MOE_XREG_H", 2);
    return h;
}

struct DeviceLimits {
    int sms = 0;
    size_t smem_optin = 0;  // the most shared memory a block may use (static and dynamic)
};
inline const DeviceLimits& limits() {
    static const DeviceLimits l = [] {
        DeviceLimits d;
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        d.smem_optin = (size_t)v;
        return d;
    }();
    return l;
}

// Resident blocks per SM of kernel K for blocks of w = 1..kMaxWarps warps whose dynamic shared memory is
// smem(w): 0 where such a block cannot run (its static and dynamic shared memory past the device's limit).
template <auto K, class Smem>
std::array<int, kMaxWarps + 1> occupancy(Smem smem) {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, K));
    const size_t avail = limits().smem_optin - std::min(limits().smem_optin, attr.sharedSizeBytes);
    CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    CUDA_CHECK(
        cudaFuncSetAttribute(K, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared));
    std::array<int, kMaxWarps + 1> t{};
    for (int w = 1; w <= kMaxWarps; ++w) {
        int n = 0;
        if (smem(w) <= avail) CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K, w * kWarp, smem(w)));
        t[w] = n;
    }
    return t;
}

}  // namespace dsv4::cuda::xreg
