// The KV rows of sparse attention (AttentionArgs in ops/backend.h), shared by the f32 kernels
// (cuda_attention.cu) and the tensor-core prefill kernel (cuda_attention_tc.cu).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "ops/backend.h"

namespace dsv4::cuda {

// Query i's window and compressed sources (the per-query tables when given; ops/backend.h).
__device__ __forceinline__ const float* win_src(const AttentionArgs& a, int64_t i) {
    return a.kv_win_rows ? a.kv_win_rows[i] : a.kv_win;
}
__device__ __forceinline__ const float* comp_src(const AttentionArgs& a, int64_t i) {
    return a.kv_comp_rows ? a.kv_comp_rows[i] : a.kv_comp;
}

// How many entries query i has: the window, then the compressed entries (a fixed count with index lists,
// comp_count[i] without).
__device__ __forceinline__ int entry_count(const AttentionArgs& a, int64_t i) {
    return a.n_win + (a.kv_comp ? (a.comp_idx ? a.n_comp : a.comp_count[i]) : 0);
}

// The KV row behind logical entry e of query i (window entries first, then compressed), or null when the
// entry is skipped (-1) or past `end`.
__device__ __forceinline__ const float* entry_row(const AttentionArgs& a, int64_t i, int e, int end) {
    if (e >= end) return nullptr;
    if (e < a.n_win) {
        const int32_t w = a.win_idx[i * a.n_win + e];
        return w >= 0 ? win_src(a, i) + (int64_t)w * a.head_dim : nullptr;
    }
    const int c = e - a.n_win;
    if (a.comp_idx) {
        const int32_t w = a.comp_idx[i * a.n_comp + c];
        return w >= 0 ? comp_src(a, i) + (int64_t)w * a.head_dim : nullptr;
    }
    return comp_src(a, i) + (int64_t)c * a.head_dim;
}

// Whether q, out and both KV arrays start on 16-byte boundaries (rows of a head_dim that is a multiple of 4 then
// stay so): the condition of both kernels' 16-byte loads and copies. Per-query source tables hold such pointers
// by contract (AttentionArgs).
inline bool rows_aligned16(const AttentionArgs& a) {
    return aligned16(a.q, a.out, a.kv_win_rows ? nullptr : a.kv_win, a.kv_comp_rows ? nullptr : a.kv_comp);
}

}  // namespace dsv4::cuda
