// The MoE expert path for a few tokens (decode): see cuda_moe_decode.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/cuda_dequant.cuh"
#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// The expert of (token, slot) pair `pair` in ids [n, k], checked against the stack's n_experts (a message and
// a trap outside it).
__device__ __forceinline__ int checked_expert(const int32_t* ids, int64_t pair, int n_experts) {
    const int e = ids[pair];
    if (e < 0 || e >= n_experts) {
        printf("dsv4: CUDA moe_experts: pair %lld has expert %d, outside [0, %d)\n", (long long)pair, e, n_experts);
        __trap();
    }
    return e;
}

// The position of slot `slot` (expert e) of token `token` in the CPU's summation order of the token's k slots
// (ids [n, k]): ascending expert id, ties by slot.
__device__ __forceinline__ int slot_rank(const int32_t* ids, int64_t token, int k, int slot, int e) {
    int rank = 0;
    for (int j = 0; j < k; ++j) {
        const int ej = ids[token * k + j];
        rank += ej < e || (ej == e && j < slot);
    }
    return rank;
}

// moe_experts without the grouping pass when n * k is small: two kernels that read exactly the chosen experts'
// rows. serves: whether it takes the case (few pairs, weight formats with a codec, their alignment). With xreg,
// each half runs its register kernel below where that serves the case, else the pipelined kernel.
bool moe_decode_serves(const MoeArgs& a);
void launch_moe_decode(CudaBackend& b, const MoeArgs& a, bool xreg);

// (token, slot) pairs up to which the decode path serves a step, its register kernels below as well (a decode
// token, a speculative verify step, a batch of decoding streams, a short prompt).
constexpr int64_t kMoeDecodePairs = 512;

// The activation digit planes of the register kernels below for a call: 3 (the exact digits) but in the bf16
// mode for 16 or more tokens (a prompt chunk, a batch of streams: the mode's tensor-core rows), 2
// (gemv::digits2_of4: 15 bits relative to each 32 values' largest, where the mode's bf16 keeps 8 of each value).
int moe_xreg_planes(const CudaBackend& b, const MoeArgs& a);

// The gate/up half with the token's activation in registers (cuda_moe_gate_up_xreg.cu): h[pair, f] =
// SwiGLU(gate, up) * routing weight for gate and up stacks of one format with a LaneCodec (cuda_gemv_xreg_lanes.cuh:
// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q2_K) and D a multiple of 512 (at most 16384), up to
// kMoeDecodePairs pairs.
bool moe_gate_up_xreg_serves(const MoeArgs& a);
void launch_moe_gate_up_xreg(const MoeArgs& a, float* h, int planes, const QuantTables& t, cudaStream_t s);

// The down half with h (the gate/up result, [n * k, F]) in registers (cuda_moe_down_xreg.cu): out = the sum
// over each token's slots of h W_down^T, in the CPU's order, for a down stack of a format with a LaneCodec, F a
// multiple of 512 and k * F / 512 <= 32, up to kMoeDecodePairs pairs.
bool moe_down_xreg_serves(const MoeArgs& a);
void launch_moe_down_xreg(const MoeArgs& a, const float* h, int planes, const QuantTables& t, cudaStream_t s);

}  // namespace dsv4::cuda
