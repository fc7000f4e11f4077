// Decode-GEMV codecs (see cuda_gemv_codecs.cuh for the unit contract and the exactness argument) of the grid
// formats beyond IQ2_XXS: each 8 values are a grid point (one u64 entry, or two u32 entries of 4 values) chosen
// by an index, times a sub-block scale, with sign bits (IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) or a +-1/8 shift (IQ1_S,
// IQ1_M). The grids are read from device memory (Lut::grid64 / grid32, through the read-only cache); a unit is
// one group of 8 values, so kUnits = 32 for every format here.
#pragma once

#include "kernels/cuda/cuda_gemv_codecs.cuh"

namespace dsv4::cuda::gemv {

// The 8 bytes of a grid entry (unsigned) as floats.
DSV4_GV void grid_to_float8(uint64_t e, float (&v)[8]) {
    bytes_to_float4((uint32_t)e, 0.0f, v);
    bytes_to_float4((uint32_t)(e >> 32), 0.0f, v + 4);
}
// v[j] = -v[j] where bit j of s is set (a sign-bit flip: exact, as the CPU's * -1).
DSV4_GV void flip_signs(uint32_t s, float (&v)[8]) {
    DSV4_GV_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = as_float(as_bits(v[j]) ^ ((s << (31 - j)) & 0x80000000u));
}
// The IQ2 sub-block scale d * (0.5 + s) * 0.25, rounded as the CPU (two products; exact: 11 + 5 bits).
DSV4_GV float iq2_scale(float d, uint32_t s) { return mul_rn(mul_rn(d, 0.5f + small_to_float(s)), 0.25f); }

// IQ2_XS: d qs[32](u16: 9-bit grid index, 7-bit sign index) scales[8]; group u = 4ib + l: w = db * grid * sign
// with db = iq2_scale(d, nibble l / 2 of scales[ib]); db * grid is exact (16 + 6 bits).
template <>
struct Codec<GgmlType::IQ2_XS> {
    static constexpr int kElems = 256, kBytes = 74, kUnits = 32, kAlign = 2, kStageBlocks = 16;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t q = ld16(b[r] + 2 + 2 * u), sc = b[r][66 + ib];
            const float db = iq2_scale(half_bits(ld16(b[r])), l < 2 ? sc & 15 : sc >> 4);
            float v[8];
            grid_to_float8(ld_table(lut.grid64, q & 511), v);
            flip_signs(ld_table(lut.signs, q >> 9), v);
            scaled_dot<NT>(db, v, xv, nt, acc[r]);
        }
    }
};

// IQ2_S: d qs[32] signs[32] qh[8] scales[8]; group u = 4ib + l: grid index qs[u] | bits 2l, 2l + 1 of qh[ib] as
// bits 8, 9; sign byte signs[u]; scale as IQ2_XS.
template <>
struct Codec<GgmlType::IQ2_S> {
    static constexpr int kElems = 256, kBytes = 82, kUnits = 32, kAlign = 2, kStageBlocks = 16;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t idx = b[r][2 + u] | (((uint32_t)b[r][66 + ib] << (8 - 2 * l)) & 0x300u);
            const uint32_t sc = b[r][74 + ib];
            const float db = iq2_scale(half_bits(ld16(b[r])), l < 2 ? sc & 15 : sc >> 4);
            float v[8];
            grid_to_float8(ld_table(lut.grid64, idx), v);
            flip_signs(b[r][34 + u], v);
            scaled_dot<NT>(db, v, xv, nt, acc[r]);
        }
    }
};

// IQ3_XXS: d qs[64] aux[8](u32: 4 x 7 sign bits, 4-bit scale); group u = 4ib + l: two 4-value grid entries
// qs[2u], qs[2u + 1]; db = d * (0.5 + (aux >> 28)) * 0.5; db * grid exact (16 + 6 bits).
template <>
struct Codec<GgmlType::IQ3_XXS> {
    static constexpr int kElems = 256, kBytes = 98, kUnits = 32, kAlign = 2, kStageBlocks = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t aux = ld32_any(b[r] + 66 + 4 * ib), i12 = ld16(b[r] + 2 + 2 * u);
            const float db = mul_rn(mul_rn(half_bits(ld16(b[r])), 0.5f + small_to_float(aux >> 28)), 0.5f);
            float v[8];
            grid_to_float8(ld_table(lut.grid32, i12 & 255) | (uint64_t)ld_table(lut.grid32, i12 >> 8) << 32, v);
            flip_signs(ld_table(lut.signs, (aux >> (7 * l)) & 127), v);
            scaled_dot<NT>(db, v, xv, nt, acc[r]);
        }
    }
};

// IQ3_S: d qs[64] qh[8] signs[32] scales[4]; group u = 4ib + l: grid indices qs[2u], qs[2u + 1] with bits 2l,
// 2l + 1 of qh[ib] as their 9th bits; sign byte signs[u]; db = d * (1 + 2 * nibble ib % 2 of scales[ib / 2]),
// exact with a grid value (16 + 4 bits).
template <>
struct Codec<GgmlType::IQ3_S> {
    static constexpr int kElems = 256, kBytes = 110, kUnits = 32, kAlign = 2, kStageBlocks = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t i12 = ld16(b[r] + 2 + 2 * u), qh = b[r][66 + ib], sc = b[r][106 + ib / 2];
            const uint32_t i1 = (i12 & 255) | ((qh << (8 - 2 * l)) & 256), i2 = (i12 >> 8) | ((qh << (7 - 2 * l)) & 256);
            const float db = mul_rn(half_bits(ld16(b[r])), small_to_float(1 + 2 * (ib & 1 ? sc >> 4 : sc & 15)));
            float v[8];
            grid_to_float8(ld_table(lut.grid32, i1) | (uint64_t)ld_table(lut.grid32, i2) << 32, v);
            flip_signs(b[r][74 + u], v);
            scaled_dot<NT>(db, v, xv, nt, acc[r]);
        }
    }
};

// IQ1: dl * (g + delta) for the 8 int8 grid values g (-1, 0, 1) of entry e and the shift delta = +-1/8:
// g + delta is exact, and so is its product with dl (an f16 times an odd 3-bit integer: 15 + 4 bits).
template <int NT>
DSV4_GV void iq1_dot(float dl, uint64_t e, float delta, const float (&xv)[NT][8], int nt, float (&acc)[NT]) {
    float v[8];
    bytes_to_float4((uint32_t)e ^ 0x80808080u, 128.0f, v);  // int8 + 128 as unsigned bytes
    bytes_to_float4((uint32_t)(e >> 32) ^ 0x80808080u, 128.0f, v + 4);
    DSV4_GV_UNROLL
    for (int j = 0; j < 8; ++j) v[j] += delta;
    scaled_dot<NT>(dl, v, xv, nt, acc);
}

// IQ1_S: d qs[32] qh[8](u16: four 3-bit index tops, a 3-bit scale s, the shift's sign); group u = 4ib + l:
// entry qs[u] | ((qh[ib] >> 3l) & 7) << 8, dl = d * (2s + 1).
template <>
struct Codec<GgmlType::IQ1_S> {
    static constexpr int kElems = 256, kBytes = 50, kUnits = 32, kAlign = 2, kStageBlocks = 16;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t qh = ld16(b[r] + 34 + 2 * ib);
            const float dl = mul_rn(half_bits(ld16(b[r])), small_to_float(2 * ((qh >> 12) & 7) + 1));
            const uint64_t e = ld_table(lut.grid64, b[r][2 + u] | (((qh >> (3 * l)) & 7) << 8));
            iq1_dot<NT>(dl, e, qh & 0x8000u ? -0.125f : 0.125f, xv, nt, acc[r]);
        }
    }
};

// IQ1_M: qs[32] qh[16] scales[8] (4 u16 words: 3-bit scales, 6 bits per sub-block of 32, and one nibble of the
// f16 super-scale d in the top of each word); group u = 4ib + l: nibble l % 2 of qh[2ib + l / 2] holds the
// entry's index bits 8..10 and the shift's sign; dl = d * (2s + 1) with s the sub-block's scale for l < 2 or
// l >= 2.
template <>
struct Codec<GgmlType::IQ1_M> {
    static constexpr int kElems = 256, kBytes = 56, kUnits = 32, kAlign = 4, kStageBlocks = 16;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t sw[2];
            ld64_a4(b[r] + 48, sw);
            const uint32_t d16 = ((sw[0] >> 12) & 0x000Fu) | ((sw[0] >> 24) & 0x00F0u) | ((sw[1] >> 4) & 0x0F00u) |
                                 ((sw[1] >> 16) & 0xF000u);
            const uint32_t s = (sw[ib >> 2] >> (16 * ((ib >> 1) & 1) + 6 * (ib & 1) + 3 * (l >> 1))) & 7;
            const float dl = mul_rn(half_bits(d16), small_to_float(2 * s + 1));
            const uint32_t nib = (b[r][32 + 2 * ib + (l >> 1)] >> (4 * (l & 1))) & 15;
            const uint64_t e = ld_table(lut.grid64, b[r][u] | ((nib & 7) << 8));
            iq1_dot<NT>(dl, e, nib & 8 ? -0.125f : 0.125f, xv, nt, acc[r]);
        }
    }
};

}  // namespace dsv4::cuda::gemv
