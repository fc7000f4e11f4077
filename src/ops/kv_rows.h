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

// The E4M3 value of a code byte (NaN for 0x7f / 0xff), without denormal floats on the way.
DSV4_HD float fp8_value(uint32_t c) {
    const uint32_t e = (c >> 3) & 15u, m = c & 7u;
    float a = e == 0 ? (float)m * 0.001953125f : nm_from_bits((e + 120u) << 23 | m << 20);
    if (e == 15 && m == 7) a = nm_from_bits(0x7fc00000u);
    return c & 0x80u ? -a : a;
}

// The E4M3 value of an FP8-simulated x in a block of scale s (x / s exactly, on the grid). A NaN is x only
// where s is infinite (fake_quant_value's 0 * inf), and 0 times that scale gives it back.
DSV4_HD float fp8_grid_value(float x, float s) {
    return x != x ? 0.0f : fp8_e4m3_round(fminf(fmaxf(x / s, -kFp8Max), kFp8Max));
}

// Pack block b (non-RoPE values 64 b .. 64 b + 63, fewer in a partial last block) of a row.
DSV4_HD void kv_pack_block(const float* v, int dim, int rope, int b, uint8_t* row) {
    const int nope = dim - rope, lo = b * kFp8Block, hi = lo + kFp8Block < nope ? lo + kFp8Block : nope;
    float amax = 0.0f;
    for (int i = lo; i < hi; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float s = fake_quant_scale(amax, false);
    uint8_t* codes = row + 4 * rope;
    codes[nope + b] = (uint8_t)((nm_bits(s) >> 23) & 255u);
    for (int i = lo; i < hi; ++i) codes[i] = (uint8_t)fp8_code(fp8_grid_value(v[i], s));
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

// The scale of an E8M0 byte (255: infinity, the scale of a block holding an infinity).
DSV4_HD float fp8_scale(uint32_t e) { return nm_from_bits(e << 23); }

// Unpack a row: value(code) * its block's scale, then the RoPE dims.
DSV4_HD void kv_unpack_row(const uint8_t* row, int dim, int rope, float* v) {
    const int nope = dim - rope;
    const uint8_t* codes = row + 4 * rope;
    for (int i = 0; i < nope; ++i) v[i] = fp8_value(codes[i]) * fp8_scale(codes[nope + i / kFp8Block]);
    const float* tail = reinterpret_cast<const float*>(row);
    for (int j = 0; j < rope; ++j) v[nope + j] = tail[j];
}

}  // namespace dsv4
