// Decode-GEMV codecs (see cuda_gemv_codecs.cuh for the unit contract and the exactness argument) of the formats
// whose values are 4-bit codes in 16-byte runs: within 32 values, value i < 16 is the low nibble of byte i and
// value 16 + i its high nibble. Q4_0 / Q4_1 / Q5_0 / Q5_1 take the nibble (plus a fifth bit) as the integer;
// IQ4_NL / IQ4_XS look it up in the 16 non-linear levels.
#pragma once

#include "kernels/cuda/cuda_gemv_codecs.cuh"

namespace dsv4::cuda::gemv {

// Bits 0..3 of b, bit j as bit 0 of byte j (the multiplier's four shifted copies never overlap, so no carries).
DSV4_GV uint32_t bits_to_bytes4(uint32_t b) { return ((b & 15u) * 0x00204081u) & 0x01010101u; }

// Q4_0: d(f16) qs[16]; w = (q - 8) * d, exact (4 + 11 bits). Unit u: bytes qs[8u .. 8u + 8): values 8u..8u+7
// (low nibbles) and 16 + 8u.. (high nibbles); 16 values.
template <>
struct Codec<GgmlType::Q4_0> {
    static constexpr int kElems = 32, kBytes = 18, kUnits = 2, kAlign = 2, kStageBlocks = 64;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_any(b[r] + 2 + 8 * u, q);
            const float d = half_bits(ld16(b[r]));
            float lo[8], hi[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 2; ++i) {
                bytes_to_float4(q[i] & 0x0F0F0F0Fu, 8.0f, lo + 4 * i);
                bytes_to_float4((q[i] >> 4) & 0x0F0F0F0Fu, 8.0f, hi + 4 * i);
            }
            scaled_dot<NT>(d, lo, xl, nt, acc[r]);
            scaled_dot<NT>(d, hi, xh, nt, acc[r]);
        }
    }
};

// Q4_1: d m qs[16]; w = q * d + m: q * d is exact (4 + 11 bits), so fma(d, q, m) is the CPU's fl(fl(q*d) + m).
// Units as Q4_0.
template <>
struct Codec<GgmlType::Q4_1> {
    static constexpr int kElems = 32, kBytes = 20, kUnits = 2, kAlign = 4, kStageBlocks = 48;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_a4(b[r] + 4 + 8 * u, q);
            const uint32_t dm = ld32(b[r]);
            const float d = half_bits(dm), m = half_bits(dm >> 16);
            float lo[8], hi[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 2; ++i) {
                bytes_to_float4(q[i] & 0x0F0F0F0Fu, 0.0f, lo + 4 * i);
                bytes_to_float4((q[i] >> 4) & 0x0F0F0F0Fu, 0.0f, hi + 4 * i);
            }
            DSV4_GV_UNROLL
            for (int j = 0; j < 8; ++j) lo[j] = fmaf(d, lo[j], m), hi[j] = fmaf(d, hi[j], m);
            plain_dot<NT>(lo, xl, nt, acc[r]);
            plain_dot<NT>(hi, xh, nt, acc[r]);
        }
    }
};

// Q5_0: d qh(u32) qs[16]; bit 4 of value i is bit i of qh; w = (q - 16) * d, exact (5 + 11 bits). Units as Q4_0.
template <>
struct Codec<GgmlType::Q5_0> {
    static constexpr int kElems = 32, kBytes = 22, kUnits = 2, kAlign = 2, kStageBlocks = 48;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_any(b[r] + 6 + 8 * u, q);
            const uint32_t qh = ld32_any(b[r] + 2);
            const float d = half_bits(ld16(b[r]));
            const uint32_t hl = qh >> (8 * u), hh = qh >> (16 + 8 * u);  // bits of values 8u.. and 16 + 8u..
            float lo[8], hi[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 2; ++i) {
                bytes_to_float4((q[i] & 0x0F0F0F0Fu) | (bits_to_bytes4(hl >> (4 * i)) << 4), 16.0f, lo + 4 * i);
                bytes_to_float4(((q[i] >> 4) & 0x0F0F0F0Fu) | (bits_to_bytes4(hh >> (4 * i)) << 4), 16.0f, hi + 4 * i);
            }
            scaled_dot<NT>(d, lo, xl, nt, acc[r]);
            scaled_dot<NT>(d, hi, xh, nt, acc[r]);
        }
    }
};

// Q5_1: d m qh(u32) qs[16]; w = q * d + m (q * d exact: 5 + 11 bits, so fma(d, q, m) as Q4_1). Units as Q4_0.
template <>
struct Codec<GgmlType::Q5_1> {
    static constexpr int kElems = 32, kBytes = 24, kUnits = 2, kAlign = 4, kStageBlocks = 48;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_a4(b[r] + 8 + 8 * u, q);
            const uint32_t dm = ld32(b[r]), qh = ld32(b[r] + 4);
            const float d = half_bits(dm), m = half_bits(dm >> 16);
            const uint32_t hl = qh >> (8 * u), hh = qh >> (16 + 8 * u);
            float lo[8], hi[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 2; ++i) {
                bytes_to_float4((q[i] & 0x0F0F0F0Fu) | (bits_to_bytes4(hl >> (4 * i)) << 4), 0.0f, lo + 4 * i);
                bytes_to_float4(((q[i] >> 4) & 0x0F0F0F0Fu) | (bits_to_bytes4(hh >> (4 * i)) << 4), 0.0f, hi + 4 * i);
            }
            DSV4_GV_UNROLL
            for (int j = 0; j < 8; ++j) lo[j] = fmaf(d, lo[j], m), hi[j] = fmaf(d, hi[j], m);
            plain_dot<NT>(lo, xl, nt, acc[r]);
            plain_dot<NT>(hi, xh, nt, acc[r]);
        }
    }
};

// The 16 levels of IQ4_NL / IQ4_XS (-127 .. 113) as bytes level + 128: entries 0..7 in kLo (two words), 8..15 in
// kHi. lookup(s) maps the four nibbles of s's low 16 bits (in MXFP4's order: lo(byte 0), hi(byte 0), lo(byte 1),
// hi(byte 1)) to four such bytes: one prmt per half picks entry n & 7, a third picks the half by bit 3 of n.
constexpr uint32_t pack_levels(int a, int b, int c, int d) {
    return (uint32_t)(a + 128) | (uint32_t)(b + 128) << 8 | (uint32_t)(c + 128) << 16 | (uint32_t)(d + 128) << 24;
}
struct Iq4Levels {
    static constexpr uint32_t kLo0 = pack_levels(-127, -104, -83, -65), kLo1 = pack_levels(-49, -35, -22, -10);
    static constexpr uint32_t kHi0 = pack_levels(1, 13, 25, 38), kHi1 = pack_levels(53, 69, 89, 113);
    DSV4_GV static uint32_t lookup(uint32_t s) {
        const uint32_t i = s & 0x7777u;
        const uint32_t lo = prmt(kLo0, kLo1, i), hi = prmt(kHi0, kHi1, i);
        return prmt(lo, hi, 0x3210u | ((s >> 1) & 0x4444u));  // byte j of hi when bit 3 of nibble j is set
    }
    // acc[t] += d * (the 16 values of the 8 code bytes q[0..1] times xl (low nibbles) and xh (high nibbles)).
    // d * level is exact: a level has at most 7 significant bits, d (an f16 times a 6-bit integer) 16.
    template <int NT>
    DSV4_GV static void dot16(const uint32_t (&q)[2], float d, const float (&xl)[NT][8], const float (&xh)[NT][8],
                              int nt, float (&acc)[NT]) {
        DSV4_GV_UNROLL
        for (int i = 0; i < 2; ++i) {  // code bytes 4i .. 4i + 3
            float v[8], xa[NT][8];
            bytes_to_float4(lookup(q[i]), 128.0f, v);
            bytes_to_float4(lookup(q[i] >> 16), 128.0f, v + 4);
            DSV4_GV_UNROLL
            for (int t = 0; t < NT; ++t) DSV4_GV_UNROLL
            for (int k = 0; k < 4; ++k) {
                xa[t][2 * k] = xl[t][4 * i + k];
                xa[t][2 * k + 1] = xh[t][4 * i + k];
            }
            scaled_dot<NT>(d, v, xa, nt, acc);
        }
    }
};

// IQ4_NL: d qs[16]; w = d * level[q]. Units as Q4_0.
template <>
struct Codec<GgmlType::IQ4_NL> {
    static constexpr int kElems = 32, kBytes = 18, kUnits = 2, kAlign = 2, kStageBlocks = 64;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_any(b[r] + 2 + 8 * u, q);
            Iq4Levels::dot16<NT>(q, half_bits(ld16(b[r])), xl, xh, nt, acc[r]);
        }
    }
};

// IQ4_XS: d scales_h(u16) scales_l[4] qs[128]; sub-block ib (32 values, qs[16ib ..+16) laid out as IQ4_NL) has the
// 6-bit scale ls = (nibble ib of scales_l) | (bits 2ib, 2ib + 1 of scales_h) << 4; w = d*(ls - 32) * level.
// Unit u = (ib = u / 2, h = u % 2): code bytes qs[16ib + 8h ..+8), values 32ib + 8h.. and 32ib + 16 + 8h..
template <>
struct Codec<GgmlType::IQ4_XS> {
    static constexpr int kElems = 256, kBytes = 136, kUnits = 16, kAlign = 4, kStageBlocks = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int ib = u >> 1, h = u & 1;
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 32 * ib + 8 * h, nt, xl);
        load_x8<NT>(x, 32 * ib + 16 + 8 * h, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_a4(b[r] + 8 + 16 * ib + 8 * h, q);
            const uint32_t head = ld32(b[r]), sl = ld32(b[r] + 4);
            const uint32_t ls = ((sl >> (4 * ib)) & 15) | (((head >> (16 + 2 * ib)) & 3) << 4);
            const float dl = mul_rn(half_bits(head), small_to_float(ls) - 32.0f);
            Iq4Levels::dot16<NT>(q, dl, xl, xh, nt, acc[r]);
        }
    }
};

}  // namespace dsv4::cuda::gemv
