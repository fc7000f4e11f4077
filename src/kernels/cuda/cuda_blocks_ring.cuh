// The weight ring of the kernels that multiply block-format weights on mma.sync with the weight as the A
// operand (cuda_gemm_blocks.cu: dense matmuls of 16..64 rows; cuda_moe_blocks.cu: the experts of a batch): a
// block of 4 warps streams Rows weight rows (64 or 128: one or two m16 tiles per warp) through kStages
// shared-memory slots of kStageK values per row, copied by cp.async.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant.cuh"

namespace dsv4::cuda::blocks {

constexpr int kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kRows = kWarps * 2 * 16;  // weight rows per block with two m16 tiles per warp
constexpr int kStageK = 256;            // values of a row per stage
constexpr int kStages = 3;

// A stage: kStageK values of each of the block's rows, each row's bytes in whole 16-byte words from the word
// holding its first byte (the row keeps its offset in that word), plus one word for that offset.
template <GgmlType T, int Rows = kRows>
struct Stage {
    static constexpr int kBytes = kStageK / Dq<T>::kElems * Dq<T>::kBytes;
    static constexpr int kWords = (kBytes + 15) / 16 + 1;
    static constexpr size_t kSmem = (size_t)kStages * Rows * kWords * 16;
};

// Block formats whose blocks tile a stage (32 or 256 values a block).
template <GgmlType T>
constexpr bool format() {
    return Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0;
}

// What the dense kernel streams besides the block formats: the 16-bit plain types, a run of values read as it
// is (Bf16Run; a stage of F16 or BF16 is 512 bytes a row, twice Q8_0's).
template <GgmlType T>
constexpr bool dense_format() {
    return format<T>() || T == GgmlType::F16 || T == GgmlType::BF16;
}

// Whether weights of type t can stream through the ring of 128-row blocks on a device: a block format (with
// dense, or a 16-bit plain type) whose stages fit the shared memory a block may opt into (64-row blocks need
// half of it).
inline bool stage_fits(const cudaDeviceProp& props, GgmlType t, bool dense) {
    bool ok = false;
    dispatch_weight_type(t, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (dense_format<T>())
            ok = (dense || format<T>()) && Stage<T>::kSmem <= (size_t)props.sharedMemPerBlockOptin;
    });
    return ok;
}

// Copy one stage of the block's Rows rows into `slot` (cp.async, not committed): src(r) is row r's first byte
// of the stage, at any alignment.
template <GgmlType T, int Rows = kRows, class Src>
__device__ __forceinline__ void issue_stage(uint4* slot, Src&& src) {
    using S = Stage<T, Rows>;
    for (int idx = threadIdx.x; idx < Rows * S::kWords; idx += kThreads) {
        const int r = idx / S::kWords, w = idx % S::kWords;
        const uint8_t* a = src(r);
        const int shift = (int)(reinterpret_cast<uintptr_t>(a) & 15);
        if (16 * w < shift + S::kBytes) cp_async16(slot + idx, a - shift + 16 * w);
    }
}

}  // namespace dsv4::cuda::blocks
