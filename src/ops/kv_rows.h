// Packed KV rows: the compressed KV entries of the attention as the model's quant-sim mode computes them
// (non-RoPE dims FP8 E4M3 values times a power-of-two scale per block of 64, RoPE dims f32), stored as their
// codes instead of f32. A row of `dim` values whose last `rope` are the RoPE dims (nope = dim - rope before
// them) is, in bytes: the rope dims' floats (4 rope bytes, so they stay 4-byte aligned), then one E4M3 code
// byte per non-RoPE dim (sign bit, 4-bit exponent of bias 7, 3-bit mantissa; 0x7f and 0xff are NaN), then
// one E8M0 byte per block of 64 of them (the scale 2^(e - 127), the last block may be partial), padded with
// zeros to a multiple of 16 bytes: 720 bytes for V4's 512 dims (64 RoPE) against 2,048 in f32.
//
// Exactness. kv_pack_row takes values that are already FP8-simulated (fake_quant_block(.., false) on blocks
// of 64 from the row's start, as the norm_rope op writes them with fp8_block 64) and kv_unpack_row gives back
// the same floats bit for bit: the block scale recomputed from such values is the scale they were made with
// or half of it (when the block's largest code is at most 224 the values are also codes of half that scale;
// the largest, 448 s, gives s again), at the amax floor it is the floor's scale again, and each value is the
// product code * scale that fake_quant_value computed. A block holding an infinity has an infinite scale
// (E8M0 255): its values are NaN (0 * inf) or infinite, and the codes 0 and +-448 give them back.
#pragma once

#include <cstdint>

#include "format/fp8.h"
#include "ops/numerics.h"

namespace dsv4 {

constexpr int kFp8Block = 64;

// Bytes and floats of a packed row of dim values, the last rope of them RoPE dims (0 <= rope <= dim).
DSV4_HD int64_t kv_row_scales(int64_t dim, int64_t rope) { return (dim - rope + kFp8Block - 1) / kFp8Block; }
DSV4_HD int64_t kv_row_bytes(int64_t dim, int64_t rope) {
    return (4 * rope + (dim - rope) + kv_row_scales(dim, rope) + 15) / 16 * 16;
}
DSV4_HD int64_t kv_row_floats(int64_t dim, int64_t rope) { return kv_row_bytes(dim, rope) / 4; }

// The E4M3 code byte of y, an E4M3 value (|y| <= 448; the sign of a zero is kept).
DSV4_HD uint32_t fp8_code(float y) {
    const uint32_t sign = nm_bits(y) >> 31 << 7;
    const float a = fabsf(y);
    if (a < 0.015625f) return sign | (uint32_t)(a * 512.0f);  // subnormal: a = m 2^-9, m < 8
    const uint32_t b = nm_bits(a);
    return sign | (((b >> 23) - 120u) << 3) | ((b >> 20) & 7u);  // exponent e - 127 + 7, the top 3 mantissa bits
}

// Pack block b (non-RoPE values 64 b .. 64 b + 63, fewer in a partial last block) of a row.
DSV4_HD void kv_pack_block(const float* v, int dim, int rope, int b, uint8_t* row) {
    const int nope = dim - rope, lo = b * kFp8Block, hi = lo + kFp8Block < nope ? lo + kFp8Block : nope;
    float amax = 0.0f;
    for (int i = lo; i < hi; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float s = fake_quant_scale(amax, false);
    uint8_t* codes = row + 4 * rope;
    codes[nope + b] = (uint8_t)((nm_bits(s) >> 23) & 255u);
    for (int i = lo; i < hi; ++i) codes[i] = (uint8_t)fp8_code(packed_grid_value(v[i], s, false));
}

// The RoPE dims' floats and the padding after the scales.
DSV4_HD void kv_pack_rest(const float* v, int dim, int rope, uint8_t* row) {
    float* tail = reinterpret_cast<float*>(row);
    for (int j = 0; j < rope; ++j) tail[j] = v[dim - rope + j];
    for (int64_t j = 4 * rope + (dim - rope) + kv_row_scales(dim, rope); j < kv_row_bytes(dim, rope); ++j) row[j] = 0;
}

// Pack one row of dim values whose non-RoPE dims are FP8-simulated.
DSV4_HD void kv_pack_row(const float* v, int dim, int rope, uint8_t* row) {
    for (int b = 0; b < (int)kv_row_scales(dim, rope); ++b) kv_pack_block(v, dim, rope, b, row);
    kv_pack_rest(v, dim, rope, row);
}

// Unpack a row: each block's scale once, then value(code) * scale (format/fp8.h's decode), then the RoPE dims.
// Host code (the CPU backend, tests); the CUDA kernels decode with the hardware's conversion.
inline void kv_unpack_row(const uint8_t* row, int dim, int rope, float* v) {
    const int nope = dim - rope;
    const uint8_t* codes = row + 4 * rope;
    for (int lo = 0; lo < nope; lo += kFp8Block) {
        const float s = e8m0_scale(codes[nope + lo / kFp8Block]);
        for (int i = lo; i < nope && i < lo + kFp8Block; ++i) v[i] = fp8_e4m3_to_f32(codes[i]) * s;
    }
    const float* tail = reinterpret_cast<const float*>(row);
    for (int j = 0; j < rope; ++j) v[nope + j] = tail[j];
}

}  // namespace dsv4
