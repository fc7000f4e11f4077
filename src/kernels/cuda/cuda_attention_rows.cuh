// What the f32 kernels (cuda_attention.cu) and the tensor-core kernel (cuda_attention_tc.cu) of sparse attention
// share: the KV rows (AttentionArgs in ops/backend.h) and the merge of a decode call's splits.
//
// Packed compressed rows (AttentionArgs::comp_packed, ops/kv_rows.h) reach the kernels' f32 tiles in shared
// memory without any extra shared memory: the RoPE floats are copied by cp.async straight to their dims
// (nope.. of the tile row), and the codes and scales to the end of the row's non-RoPE part, which they fit in
// (nope + nope / 64 bytes, padded, against 4 nope). Once the copies land, the warp that issued them unpacks the
// row in place (unpack_rows: every lane reads its codes into registers, the warp syncs, then writes the floats
// over them), so the math reads plain f32 rows, the same floats the CPU's kv_unpack_row gives.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "ops/backend.h"
#include "ops/kv_rows.h"

namespace dsv4::cuda {

class CudaBackend;

// Decode-sized calls: up to this many queries are shaped (heads per block, splits) as one query is, on both
// kernels, so that a query's arithmetic (which entries each split sums, the merge's order) is the same whether it
// is decoded alone or verified with a speculative step's others: a token's output does not depend on its step.
constexpr int64_t kAttentionDecodeQueries = 8;
// The most splits of a query's entries: attention_merge_kernel reduces a query's splits in one warp, 2 a lane.
constexpr int kAttentionMaxSplits = 2 * kWarp;

// The merge of the splits (cuda_attention.cu): out = the splits' partial outputs (running max, denominator and
// unnormalized output per (query, split, head), part_o written only where the split had a valid entry) combined,
// the sink added to the denominator, normalized; zeros for a query without a valid entry. With a.out_rope, the
// output's inverse RoPE (its pairs must start at even dims: head_dim - rope_dim even).
void merge_attention_splits(CudaBackend& b, const AttentionArgs& a, int splits, const float2* part_ml,
                            const float* part_o);

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

// The floats from one compressed row to the next: packed rows (ops/kv_rows.h) in the kernel instances for
// a.comp_packed (PACKED, a template flag so that the other instances' code does not change), else head_dim.
template <bool PACKED>
__device__ __forceinline__ int comp_stride(const AttentionArgs& a) {
    return PACKED ? (int)kv_row_floats(a.head_dim, a.comp_rope) : a.head_dim;
}

// The KV row behind logical entry e of query i (window entries first, then compressed), or null when the
// entry is skipped (-1) or past `end`.
template <bool PACKED = false>
__device__ __forceinline__ const float* entry_row(const AttentionArgs& a, int64_t i, int e, int end) {
    if (e >= end) return nullptr;
    if (e < a.n_win) {
        const int32_t w = a.win_idx[i * a.n_win + e];
        return w >= 0 ? win_src(a, i) + (int64_t)w * a.head_dim : nullptr;
    }
    const int c = e - a.n_win;
    if (a.comp_idx) {
        const int32_t w = a.comp_idx[i * a.n_comp + c];
        return w >= 0 ? comp_src(a, i) + (int64_t)w * comp_stride<PACKED>(a) : nullptr;
    }
    return comp_src(a, i) + (int64_t)c * comp_stride<PACKED>(a);
}

// The lanes of a tile of 32 entries from entry `base` (lane r: entry base + r) whose entries are compressed.
__device__ __forceinline__ unsigned comp_lanes(const AttentionArgs& a, int base) {
    const int first = a.n_win - base;  // the lane of the first compressed entry
    return first <= 0 ? 0xffffffffu : first >= 32 ? 0u : 0xffffffffu << first;
}

// Whether q, out and both KV arrays start on 16-byte boundaries (rows of a head_dim that is a multiple of 4 then
// stay so, and packed rows are multiples of 16 bytes): the condition of both kernels' 16-byte loads and copies.
// Per-query source tables hold such pointers by contract (AttentionArgs).
inline bool rows_aligned16(const AttentionArgs& a) {
    return aligned16(a.q, a.out, a.kv_win_rows ? nullptr : a.kv_win, a.kv_comp_rows ? nullptr : a.kv_comp);
}

// Where a packed row goes in an f32 tile row of head_dim floats: the rope floats to dims nope.., and `bytes`
// bytes from the packed row's byte 4 rope (the nope codes, then the scales) to byte `at` = 4 nope - bytes of
// the tile row. wide: 16-byte copies, when the kernel's f32 rows take them (head_dim % 4 == 0, aligned
// pointers) and rope % 4 == 0, which keeps the rope floats' destination and the codes' source 16-byte aligned;
// bytes is then the rest of the packed row (kv_row_bytes - 4 rope, a multiple of 16), otherwise the codes and
// scales rounded up to 4 bytes. Either fits in the 4 nope bytes (nope >= 4 when wide; nope = 0: no bytes).
struct PackedRows {
    int rope, nope, bytes, at;
    bool wide;
};

__device__ __forceinline__ PackedRows packed_rows(const AttentionArgs& a, bool vec) {
    PackedRows p;
    p.rope = a.comp_rope;
    p.nope = a.head_dim - a.comp_rope;
    p.wide = vec && p.rope % 4 == 0;
    const int codes = p.nope + (int)kv_row_scales(a.head_dim, p.rope);
    p.bytes = p.wide ? (int)kv_row_bytes(a.head_dim, p.rope) - 4 * p.rope : (codes + 3) / 4 * 4;
    p.at = 4 * p.nope - p.bytes;
    return p;
}

// Copies packed row src into tile row dst (see PackedRows) by cp.async, all lanes of a warp. Not committed.
__device__ __forceinline__ void stage_packed_row(float* dst, const float* src, const PackedRows& p, int lane) {
    const unsigned char* sb = reinterpret_cast<const unsigned char*>(src) + 4 * p.rope;
    unsigned char* db = reinterpret_cast<unsigned char*>(dst) + p.at;
    if (p.wide) {
        for (int c = 4 * lane; c < p.rope; c += 4 * kWarp) cp_async16(dst + p.nope + c, src + c);
        for (int c = 16 * lane; c < p.bytes; c += 16 * kWarp) cp_async16(db + c, sb + c);
    } else {
        for (int c = lane; c < p.rope; c += kWarp) cp_async4(dst + p.nope + c, src + c);
        for (int c = 4 * lane; c < p.bytes; c += 4 * kWarp) cp_async4(db + c, sb + c);
    }
}

// The E4M3 values of the four codes of c, lowest byte first, times the block scale s. The hardware's E4M3 -> f16
// conversion (two codes an instruction) is exact, every E4M3 value being an f16 (NaN stays a NaN), and so is
// f16 -> f32: the product is the CPU's fp8_e4m3_to_f32(code) * e8m0_scale(e) (format/fp8.h) bit for bit.
__device__ __forceinline__ float4 fp8x4_scaled(uint32_t c, float s) {
    const __half2 lo(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(c & 0xffffu), __NV_E4M3));
    const __half2 hi(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(c >> 16), __NV_E4M3));
    const float2 x = __half22float2(lo), y = __half22float2(hi);
    return make_float4(x.x * s, x.y * s, y.x * s, y.y * s);
}

// Unpacks in place the packed rows of a tile that this warp staged (rows warp, warp + n_warps, ... of `rows`;
// tile row r at tile + r stride), after this thread's copies of them have landed (cp.async wait). W: code words
// a lane takes per row, at least nope / 128 rounded up. Lane l takes words l, l + 32, ...: dims 4 w .. 4 w + 3
// of word w, whose scale is block w / 16's, held by lane w / 16 (a row has at most 16 blocks: head_dim <= 1024).
// The writes of a row overlap its staged bytes, so every lane reads its words and scale before the warp syncs
// and any lane writes. VEC: the tile rows are 16-byte aligned (float4 stores).
template <int W, bool VEC>
__device__ __forceinline__ void unpack_rows(float* tile, int stride, unsigned rows, const PackedRows& p, int warp,
                                            int n_warps, int lane) {
    __syncwarp();  // the other lanes' copies (each lane waited for its own) are visible to the whole warp
    const int n_scales = (p.nope + kFp8Block - 1) / kFp8Block;
    for (int r = warp; r < kWarp; r += n_warps) {  // a tile's 32 rows, one per lane
        if (!(rows >> r & 1)) continue;
        float* dst = tile + r * stride;
        const unsigned char* src = reinterpret_cast<const unsigned char*>(dst) + p.at;
        uint32_t code[W];
#pragma unroll
        for (int k = 0; k < W; ++k) {
            const int d = 4 * (lane + kWarp * k);
            code[k] = d < p.nope ? *reinterpret_cast<const uint32_t*>(src + d) : 0u;
        }
        const uint32_t scale = lane < n_scales ? src[p.nope + lane] : 0u;
        __syncwarp();
#pragma unroll
        for (int k = 0; k < W; ++k) {
            const int w = lane + kWarp * k, d = 4 * w;
            const float s = e8m0_scale(__shfl_sync(0xffffffffu, scale, w / 16));
            if (d >= p.nope) continue;
            const float4 v = fp8x4_scaled(code[k], s);
            if (VEC && d + 4 <= p.nope) {
                *reinterpret_cast<float4*>(dst + d) = v;
            } else {  // the row's last dims before the RoPE floats, or a row that is not 16-byte aligned
                dst[d] = v.x;
                if (d + 1 < p.nope) dst[d + 1] = v.y;
                if (d + 2 < p.nope) dst[d + 2] = v.z;
                if (d + 3 < p.nope) dst[d + 3] = v.w;
            }
        }
    }
}

}  // namespace dsv4::cuda
