// Packed FP4 rows: the lightning indexer's keys as the model's quant-sim mode computes them (after the
// Hadamard rotation, FP4 E2M1 values times a power-of-two scale per block of 32), stored as their codes
// instead of f32. A row of `dim` values (a multiple of 32) is dim / 2 code bytes (value 2j in the low
// nibble of byte j, 2j + 1 in the high one; a nibble is a sign bit over a 3-bit E2M1 magnitude) and then one
// E8M0 byte per block (the scale 2^(e - 127)), padded to a multiple of 4 bytes: 68 bytes for 128 values
// against 512 in f32.
//
// Exactness. fp4_pack_row takes values that are already FP4-simulated (fake_quant_block(.., true), as
// CpuBackend::hadamard writes them) and fp4_unpack_row gives back the same floats bit for bit: the block
// scale recomputed from such values is either the scale they were made with or half of it (when the block's
// largest code is 3, the values are also codes of half that scale), and at the amax floor it is the floor's
// scale again. The products y * s are the very multiplications fake_quant_value does.
#pragma once

#include <cstdint>

#include "ops/numerics.h"

namespace dsv4 {

constexpr int kFp4Block = 32;

// Bytes and floats of a packed row of dim values (dim % kFp4Block == 0).
DSV4_HD int64_t fp4_row_bytes(int64_t dim) { return (dim / 2 + dim / kFp4Block + 3) / 4 * 4; }
DSV4_HD int64_t fp4_row_floats(int64_t dim) { return fp4_row_bytes(dim) / 4; }

// Twice the E2M1 magnitude of code m (0..7): 0, 1, 2, 3, 4, 6, 8, 12 (integers, as int8 tensor cores take them).
DSV4_HD int fp4_twice(uint32_t m) { return m <= 4 ? (int)m : m == 5 ? 6 : m == 6 ? 8 : 12; }

// The nibble of an E2M1 value y (one of +-{0, .5, 1, 1.5, 2, 3, 4, 6}; the sign of a zero is kept).
DSV4_HD uint32_t fp4_code(float y) {
    const int t = (int)(fabsf(y) * 2.0f);  // 0, 1, 2, 3, 4, 6, 8, 12
    const uint32_t m = t <= 4 ? (uint32_t)t : t == 6 ? 5u : t == 8 ? 6u : 7u;
    return (nm_bits(y) >> 31) << 3 | m;
}

// The E2M1 value of a nibble.
DSV4_HD float fp4_value(uint32_t nib) {
    const float y = (float)fp4_twice(nib & 7u) * 0.5f;
    return nib & 8u ? -y : y;
}

// Pack block b (values 32 b .. 32 b + 31) of a row of dim FP4-simulated values.
DSV4_HD void fp4_pack_block(const float* v, int dim, int b, uint8_t* row) {
    const float* x = v + b * kFp4Block;
    float amax = 0.0f;
    for (int i = 0; i < kFp4Block; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const float s = fake_quant_scale(amax, true);
    row[dim / 2 + b] = (uint8_t)((nm_bits(s) >> 23) & 255u);
    for (int i = 0; i < kFp4Block; i += 2) {
        row[(b * kFp4Block + i) / 2] =
            (uint8_t)(fp4_code(packed_grid_value(x[i], s, true)) | fp4_code(packed_grid_value(x[i + 1], s, true)) << 4);
    }
}

// The padding after a row's scales.
DSV4_HD void fp4_pack_pad(int dim, uint8_t* row) {
    for (int64_t j = dim / 2 + dim / kFp4Block; j < fp4_row_bytes(dim); ++j) row[j] = 0;
}

// Pack one row of dim FP4-simulated values.
DSV4_HD void fp4_pack_row(const float* v, int dim, uint8_t* row) {
    for (int b = 0; b < dim / kFp4Block; ++b) fp4_pack_block(v, dim, b, row);
    fp4_pack_pad(dim, row);
}

// Unpack a row: each block's scale once, then each code byte's two values, value(code) * scale.
DSV4_HD void fp4_unpack_row(const uint8_t* row, int dim, float* v) {
    float value[16];
    for (uint32_t c = 0; c < 16; ++c) value[c] = fp4_value(c);
    for (int b = 0; b < dim / kFp4Block; ++b) {
        const float s = e8m0_scale(row[dim / 2 + b]);
        const uint8_t* codes = row + b * kFp4Block / 2;
        float* out = v + b * kFp4Block;
        for (int j = 0; j < kFp4Block / 2; ++j) {
            out[2 * j] = value[codes[j] & 15u] * s;
            out[2 * j + 1] = value[codes[j] >> 4] * s;
        }
    }
}

}  // namespace dsv4
