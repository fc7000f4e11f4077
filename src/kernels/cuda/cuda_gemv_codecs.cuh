// Per-format inner loops of the decode GEMV (cuda_gemv.cu) and of the MoE decode path (cuda_moe_decode.cu).
// A "unit" is one lane's share of a weight block (8 to 32 values). The lane reads the unit's bytes from the
// block staged in shared memory with 4-byte loads (funnel shifts realign the 2- and 1-byte aligned formats),
// turns the small integers into floats without int->float conversions (a slow pipe on Hopper: the float with
// bits 0x4B000000 | v is 2^23 + v, so a byte permute and a subtraction give v - bias exactly), and
// multiplies them with the matching activation values, loaded as float4 so that adjacent lanes read
// adjacent activations.
//
// Exactness. Every weight value the CPU codec produces is a block scale times a small integer (minus a
// second scale for Q2_K and Q4_K), and those products are exact in f32: at most 24 significant bits (each
// codec says why). So sum_j w_j x_j may be evaluated as scale * sum_j q_j x_j: the weights are the CPU's
// values, only the rounding of the sum differs. The formats with a min decode w = fma(dl, q, -ml), which is
// fl(dl * q - ml) because dl * q is exact: the CPU's value bit for bit.
//
// Every function is __host__ __device__, so the unit decoders can be checked against the CPU codecs on a
// machine without a GPU.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "format/ggml_type.h"

namespace dsv4::cuda::gemv {

#define DSV4_GV __host__ __device__ __forceinline__
// Unrolling hint for the device compiler (the host compiler would warn about the pragma).
#if defined(__CUDA_ARCH__)
#define DSV4_GV_UNROLL _Pragma("unroll")
#else
#define DSV4_GV_UNROLL
#endif

// ---- bit-level helpers (device intrinsics; portable equivalents on the host) ----

// PTX prmt in its default mode: byte i of the result is byte (s_i & 7) of {b:a}, or that byte's sign
// replicated when s_i & 8, where s_i is nibble i of s.
DSV4_GV uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
#else
    const uint64_t v = ((uint64_t)b << 32) | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
        const uint32_t n = (s >> (4 * i)) & 15;
        uint32_t byte = (uint32_t)(v >> (8 * (n & 7))) & 0xFF;
        if (n & 8) byte = (byte & 0x80) ? 0xFF : 0x00;
        r |= byte << (8 * i);
    }
    return r;
#endif
}

// (hi:lo) >> sh, low 32 bits; sh in [0, 31].
DSV4_GV uint32_t fshr(uint32_t lo, uint32_t hi, uint32_t sh) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
#endif
}

DSV4_GV float as_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

DSV4_GV float mul_rn(float a, float b) {  // one rounding, never fused into an FMA (as the CPU codecs)
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

DSV4_GV uint32_t as_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

// An entry of a lookup table in device memory (read-only for the kernel's lifetime).
template <class E>
DSV4_GV E ld_table(const E* t, uint32_t i) {
#if defined(__CUDA_ARCH__)
    return __ldg(t + i);
#else
    return t[i];
#endif
}

DSV4_GV float half_bits(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFF)));
}

// Byte j of w (an unsigned value v) as the float v - bias.
constexpr uint32_t kMagic = 0x4B000000u;  // 2^23
template <int J>
DSV4_GV float byte_to_float(uint32_t w, float bias) {
    return as_float(prmt(w, kMagic, 0x7440u + J)) - (8388608.0f + bias);
}
// The four bytes of w as floats v - bias.
DSV4_GV void bytes_to_float4(uint32_t w, float bias, float* v) {
    v[0] = byte_to_float<0>(w, bias);
    v[1] = byte_to_float<1>(w, bias);
    v[2] = byte_to_float<2>(w, bias);
    v[3] = byte_to_float<3>(w, bias);
}
// A small unsigned integer (< 2^23) as a float.
DSV4_GV float small_to_float(uint32_t v) {
    return as_float(kMagic | v) - 8388608.0f;
}

// ---- loads from the staged block bytes (shared memory on the device) ----
// The stage keeps each byte's global address modulo 16, so a block has the alignment it has in global
// memory; the host checks the matrix base and row stride against each codec's kAlign.

DSV4_GV uint32_t ld32(const uint8_t* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}  // 4-aligned
DSV4_GV uint32_t ld16(const uint8_t* p) {
    return *reinterpret_cast<const uint16_t*>(p);
}  // 2-aligned
// 4 bytes at any alignment: two aligned words and a funnel shift.
// (The aligned address is p minus an offset, not a masked integer, so the compiler still sees a shared-memory
// pointer and emits shared loads.)
DSV4_GV uint32_t ld32_any(const uint8_t* p) {
    const uint32_t off = (uint32_t)(reinterpret_cast<uintptr_t>(p) & 3);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p - off);
    return fshr(w[0], w[1], 8 * off);
}
// 8 bytes at any alignment: three aligned words, two funnel shifts.
DSV4_GV void ld64_any(const uint8_t* p, uint32_t* q) {
    const uint32_t off = (uint32_t)(reinterpret_cast<uintptr_t>(p) & 3);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p - off);
    const uint32_t sh = 8 * off;
    const uint32_t w0 = w[0], w1 = w[1], w2 = w[2];
    q[0] = fshr(w0, w1, sh);
    q[1] = fshr(w1, w2, sh);
}
DSV4_GV void ld64_a4(const uint8_t* p, uint32_t* q) {
    q[0] = ld32(p);
    q[1] = ld32(p + 4);
}

// ---- activations ----

DSV4_GV float4 ld_x4(const float* p) {  // 16-byte aligned; read-only for the kernel's lifetime
#if defined(__CUDA_ARCH__)
    return __ldg(reinterpret_cast<const float4*>(p));
#else
    return *reinterpret_cast<const float4*>(p);
#endif
}

// xv[t][0..8) = x[t][pos .. pos + 8) for the nt live activation rows.
template <int NT>
DSV4_GV void load_x8(const float* const (&x)[NT], int pos, int nt, float (&xv)[NT][8]) {
    DSV4_GV_UNROLL
    for (int t = 0; t < NT; ++t) {
        if (t < nt) {
            const float4 a = ld_x4(x[t] + pos), b = ld_x4(x[t] + pos + 4);
            xv[t][0] = a.x, xv[t][1] = a.y, xv[t][2] = a.z, xv[t][3] = a.w;
            xv[t][4] = b.x, xv[t][5] = b.y, xv[t][6] = b.z, xv[t][7] = b.w;
        }
    }
}

// sum_j v[j] * x[j], j in order, in f32 FMAs.
DSV4_GV float dot8(const float* v, const float* x) {
    float s = v[0] * x[0];
    DSV4_GV_UNROLL
    for (int j = 1; j < 8; ++j) s = fmaf(v[j], x[j], s);
    return s;
}

// acc[t] += scale * sum_j v[j] x[t][j] (v are integers, scale exact with them: see the file comment).
template <int NT>
DSV4_GV void scaled_dot(float scale, const float (&v)[8], const float (&xv)[NT][8], int nt, float (&acc)[NT]) {
    DSV4_GV_UNROLL
    for (int t = 0; t < NT; ++t)
        if (t < nt) acc[t] = fmaf(scale, dot8(v, xv[t]), acc[t]);
}
// acc[t] += sum_j w[j] x[t][j] (w the exact weights).
template <int NT>
DSV4_GV void plain_dot(const float (&w)[8], const float (&xv)[NT][8], int nt, float (&acc)[NT]) {
    DSV4_GV_UNROLL
    for (int t = 0; t < NT; ++t) {
        if (t < nt) {
            float s = acc[t];
            DSV4_GV_UNROLL
            for (int j = 0; j < 8; ++j) s = fmaf(w[j], xv[t][j], s);
            acc[t] = s;
        }
    }
}

// IQ2_XXS lookup tables in shared memory (built per block from QuantTables, see build_iq2xxs_lut):
// grid[i]: the 8 grid values of entry i as codes 0/1/2 (for 8/25/43) in nibbles 0..7;
// sign[s]: 3 * (sign bit j of sign pattern s) in nibble j. grid[i] + sign[s] selects, nibble by nibble, one
// of the six signed values of kIq2Signed below.
// The other grid formats read their tables from device memory (QuantTables, through the read-only cache):
// grid64 (IQ2_XS [512], IQ2_S [1024], IQ1_S / IQ1_M [2048]), grid32 (IQ3_XXS [256], IQ3_S [512]) and signs
// (the 128 sign bytes: 7 bits and the parity bit).
struct Lut {
    const uint32_t* grid = nullptr;  // [256]
    const uint32_t* sign = nullptr;  // [128]
    const uint64_t* grid64 = nullptr;
    const uint32_t* grid32 = nullptr;
    const uint8_t* signs = nullptr;
};
// The signed IQ2 grid values {8, 25, 43, -8, -25, -43} + 128, as prmt sources (bytes 0..5).
constexpr uint32_t kIq2SignedLo = 0x78AB9988u, kIq2SignedHi = 0x00005567u;

template <GgmlType T>
struct Codec;

// kElems/kBytes: the block. kUnits: units per block. kAlign: the alignment every block has when the matrix
// base and row stride are multiples of it. kStageBlocks: blocks per pipeline stage (a multiple of 32 units and
// of 16 bytes, about 1 KB: the bytes in flight per warp grow with it, the shared memory too).
// dot<R, NT>(b, u, x, nt, acc, lut): acc[r][t] += unit u of block b[r] times the activations x[t] (which
// point at the block's first value), for the first nt activation rows.

// Q8_0: d(f16) qs[32](int8). Unit u: values 8u..8u+7. w = q * d is exact (7 + 11 significant bits).
template <>
struct Codec<GgmlType::Q8_0> {
    static constexpr int kElems = 32, kBytes = 34, kUnits = 4, kAlign = 2, kStageBlocks = 32;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_any(b[r] + 2 + 8 * u, q);
            const float d = half_bits(ld16(b[r]));
            float v[8];
            bytes_to_float4(q[0] ^ 0x80808080u, 128.0f, v);  // int8 + 128 as unsigned bytes
            bytes_to_float4(q[1] ^ 0x80808080u, 128.0f, v + 4);
            scaled_dot<NT>(d, v, xv, nt, acc[r]);
        }
    }
};

// MXFP4: e(E8M0) qs[16]: value i < 16 is the low nibble of qs[i], value 16 + i its high nibble; a nibble
// indexes the doubled FP4 values {0,1,2,3,4,6,8,12, -0,-1,..,-12}, scaled by 2^(e-128). Those products are
// exact (4 significant bits times a power of two, subnormal scales included). Unit u: qs[8u..8u+8), i.e.
// values 8u..8u+7 and 16+8u..16+8u+7. A 16-entry table lookup of four nibbles takes two prmt (one per sign,
// the other sign's lanes coming out as 0xFF through prmt's sign replication) and an AND; the table holds
// value + 140, so every entry has its top bit set.
template <>
struct Codec<GgmlType::MXFP4> {
    static constexpr int kElems = 32, kBytes = 17, kUnits = 2, kAlign = 1, kStageBlocks = 64;
    static constexpr uint32_t kPos0 = 0x8F8E8D8Cu, kPos1 = 0x98949290u;  // 140 + {0,1,2,3 | 4,6,8,12}
    static constexpr uint32_t kNeg0 = 0x898A8B8Cu, kNeg1 = 0x80848688u;  // 140 - {0,1,2,3 | 4,6,8,12}
    // Bytes of nibbles {lo(byte 0), hi(byte 0), lo(byte 1), hi(byte 1)} of s (its low 16 bits), as values + 140.
    DSV4_GV static uint32_t lookup(uint32_t s) { return prmt(kPos0, kPos1, s) & prmt(kNeg0, kNeg1, s ^ 0x8888u); }
    DSV4_GV static float scale(uint32_t e) {  // 2^(e-128) (the values are doubled), as e8m0_half
        return as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    }
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 8 * u, nt, xl);
        load_x8<NT>(x, 16 + 8 * u, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2];
            ld64_any(b[r] + 1 + 8 * u, q);
            const float d = scale(b[r][0]);
            DSV4_GV_UNROLL
            for (int i = 0; i < 2; ++i) {  // unit bytes 4i .. 4i + 3
                // lookup() yields values in the order lo(byte), hi(byte), lo(byte + 1), hi(byte + 1).
                float v[8], xa[NT][8];
                bytes_to_float4(lookup(q[i]), 140.0f, v);
                bytes_to_float4(lookup(q[i] >> 16), 140.0f, v + 4);
                DSV4_GV_UNROLL
                for (int t = 0; t < NT; ++t) DSV4_GV_UNROLL
                for (int k = 0; k < 4; ++k) {
                    xa[t][2 * k] = xl[t][4 * i + k];
                    xa[t][2 * k + 1] = xh[t][4 * i + k];
                }
                scaled_dot<NT>(d, v, xa, nt, acc[r]);
            }
        }
    }
};

// Q2_K: scales[16] qs[64] d dmin. Value 128n + 32g + 16h + l: q = (qs[32n + 16h + l] >> 2g) & 3, scale byte
// sc = scales[8n + 2g + h], w = d*(sc & 15) * q - dmin*(sc >> 4). Unit u = (n, h, l0 = 8 (u & 1)): the 8
// bytes qs[32n + 16h + l0 ..] hold the 4 groups g; 32 values.
template <>
struct Codec<GgmlType::Q2_K> {
    static constexpr int kElems = 256, kBytes = 84, kUnits = 8, kAlign = 4, kStageBlocks = 12;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int n = u >> 2, h = (u >> 1) & 1, l0 = 8 * (u & 1);
        uint32_t q[R][2], sc[R][2];
        float d[R], dm[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            ld64_a4(b[r] + 16 + 32 * n + 16 * h + l0, q[r]);
            ld64_a4(b[r] + 8 * n, sc[r]);
            const uint32_t dd = ld32(b[r] + 80);
            d[r] = half_bits(dd);
            dm[r] = half_bits(dd >> 16);
        }
        DSV4_GV_UNROLL
        for (int g = 0; g < 4; ++g) {
            float xv[NT][8];
            load_x8<NT>(x, 128 * n + 32 * g + 16 * h + l0, nt, xv);
            DSV4_GV_UNROLL
            for (int r = 0; r < R; ++r) {
                const uint32_t s = (sc[r][g >> 1] >> (8 * (2 * (g & 1) + h))) & 0xFF;
                const float dl = mul_rn(d[r], small_to_float(s & 15)), ml = mul_rn(dm[r], small_to_float(s >> 4));
                float w[8];
                float qf[8];
                bytes_to_float4((q[r][0] >> (2 * g)) & 0x03030303u, 0.0f, qf);
                bytes_to_float4((q[r][1] >> (2 * g)) & 0x03030303u, 0.0f, qf + 4);
                DSV4_GV_UNROLL
                for (int j = 0; j < 8; ++j) w[j] = fmaf(dl, qf[j], -ml);  // dl*q exact: fl(dl*q - ml)
                plain_dot<NT>(w, xv, nt, acc[r]);
            }
        }
    }
};

// Q3_K: hmask[32] qs[64] scales[12] d. Value 128n + 32g + 16h + l: v = ((qs[32n + 16h + l] >> 2g) & 3) - 4
// + 4 * hbit, hbit = (hmask[16h + l] >> (4n + g)) & 1; 6-bit scale js = 8n + 2g + h; w = d*(sc - 32) * v,
// exact (11 + 6 + 3 bits). Unit u = (n, h, l0) as Q2_K; 32 values.
template <>
struct Codec<GgmlType::Q3_K> {
    static constexpr int kElems = 256, kBytes = 110, kUnits = 8, kAlign = 2, kStageBlocks = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int n = u >> 2, h = (u >> 1) & 1, l0 = 8 * (u & 1);
        uint32_t q[R][2], hm[R][2], sl[R][2], sh[R];
        float d[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            ld64_any(b[r] + 32 + 32 * n + 16 * h + l0, q[r]);
            ld64_any(b[r] + 16 * h + l0, hm[r]);
            ld64_any(b[r] + 96, sl[r]);    // scales[0..8): low nibbles (n = 0) / high nibbles (n = 1)
            sh[r] = ld32_any(b[r] + 104);  // scales[8..12): the high 2 bits
            d[r] = half_bits(ld16(b[r] + 108));
        }
        DSV4_GV_UNROLL
        for (int g = 0; g < 4; ++g) {
            float xv[NT][8];
            load_x8<NT>(x, 128 * n + 32 * g + 16 * h + l0, nt, xv);
            const int js = 2 * g + h;  // scale index within this half (n)
            DSV4_GV_UNROLL
            for (int r = 0; r < R; ++r) {
                const uint32_t low = (sl[r][js >> 2] >> (8 * (js & 3) + 4 * n)) & 15;
                const uint32_t high = (sh[r] >> (8 * (js & 3) + 2 * (2 * n + (g >> 1)))) & 3;
                const float dl = mul_rn(d[r], small_to_float(low | (high << 4)) - 32.0f);
                const int hs = 4 * n + g;  // hmask bit of this group
                float v[8];
                DSV4_GV_UNROLL
                for (int k = 0; k < 2; ++k) {
                    const uint32_t u3 = ((q[r][k] >> (2 * g)) & 0x03030303u) | (((hm[r][k] >> hs) & 0x01010101u) << 2);
                    bytes_to_float4(u3, 4.0f, v + 4 * k);
                }
                scaled_dot<NT>(dl, v, xv, nt, acc[r]);
            }
        }
    }
};

// Q4_K: d dmin scales[12] qs[128]. Value 64c + w: q = w < 32 ? qs[32c + w] & 15 : qs[32c + w - 32] >> 4;
// sub-block 2c + (w >= 32) has a 6-bit scale and min; w = d*sc * q - dmin*m (d*sc*q exact: 11 + 6 + 4 bits).
// Unit u = (c = u / 4, l0 = 8 (u % 4)): bytes qs[32c + l0 ..+8), values 64c + l0.. (low) and 64c + 32 + l0..
// (high); 16 values.
template <>
struct Codec<GgmlType::Q4_K> {
    static constexpr int kElems = 256, kBytes = 144, kUnits = 16, kAlign = 4, kStageBlocks = 8;
    // The 6-bit scale and min of sub-blocks 2c (lo) and 2c + 1 (hi) from the 12 scale bytes s[0..3) (words).
    DSV4_GV static void scale_min(const uint32_t* s, int c, uint32_t* sc, uint32_t* m) {
        DSV4_GV_UNROLL
        for (int k = 0; k < 2; ++k) {
            const int j = 2 * c + k, jj = j & 3;
            const uint32_t b0 = (s[0] >> (8 * jj)) & 0xFF, b1 = (s[1] >> (8 * jj)) & 0xFF,
                           b2 = (s[2] >> (8 * jj)) & 0xFF;
            if (j < 4) {
                sc[k] = b0 & 63;
                m[k] = b1 & 63;
            } else {
                sc[k] = (b2 & 15) | ((b0 >> 6) << 4);
                m[k] = (b2 >> 4) | ((b1 >> 6) << 4);
            }
        }
    }
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int c = u >> 2, l0 = 8 * (u & 3);
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 64 * c + l0, nt, xl);
        load_x8<NT>(x, 64 * c + 32 + l0, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2], s[3], sc[2], m[2];
            ld64_a4(b[r] + 16 + 32 * c + l0, q);
            const uint32_t dd = ld32(b[r]);
            s[0] = ld32(b[r] + 4), s[1] = ld32(b[r] + 8), s[2] = ld32(b[r] + 12);
            scale_min(s, c, sc, m);
            const float d = half_bits(dd), dmin = half_bits(dd >> 16);
            DSV4_GV_UNROLL
            for (int k = 0; k < 2; ++k) {  // low nibbles (sub-block 2c), then high (2c + 1)
                const float d1 = mul_rn(d, small_to_float(sc[k])), m1 = mul_rn(dmin, small_to_float(m[k]));
                float qf[8], w[8];
                bytes_to_float4((q[0] >> (4 * k)) & 0x0F0F0F0Fu, 0.0f, qf);
                bytes_to_float4((q[1] >> (4 * k)) & 0x0F0F0F0Fu, 0.0f, qf + 4);
                DSV4_GV_UNROLL
                for (int j = 0; j < 8; ++j) w[j] = fmaf(d1, qf[j], -m1);  // d1*q exact: fl(d1*q - m1)
                plain_dot<NT>(w, k == 0 ? xl : xh, nt, acc[r]);
            }
        }
    }
};

// Q5_K: d dmin scales[12] qh[32] qs[128]. As Q4_K plus a fifth bit: value 64c + w adds 16 when bit 2c + (w >= 32)
// of qh[w % 32] is set; w = d*sc * q - dmin*m (d*sc*q exact: 11 + 6 + 5 bits). Unit u = (c, l0) as Q4_K: bytes
// qs[32c + l0 ..+8) and qh[l0 ..+8); 16 values.
template <>
struct Codec<GgmlType::Q5_K> {
    static constexpr int kElems = 256, kBytes = 176, kUnits = 16, kAlign = 4, kStageBlocks = 6;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int c = u >> 2, l0 = 8 * (u & 3);
        float xl[NT][8], xh[NT][8];
        load_x8<NT>(x, 64 * c + l0, nt, xl);
        load_x8<NT>(x, 64 * c + 32 + l0, nt, xh);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            uint32_t q[2], h[2], s[3], sc[2], m[2];
            ld64_a4(b[r] + 48 + 32 * c + l0, q);
            ld64_a4(b[r] + 16 + l0, h);
            const uint32_t dd = ld32(b[r]);
            s[0] = ld32(b[r] + 4), s[1] = ld32(b[r] + 8), s[2] = ld32(b[r] + 12);
            Codec<GgmlType::Q4_K>::scale_min(s, c, sc, m);
            const float d = half_bits(dd), dmin = half_bits(dd >> 16);
            DSV4_GV_UNROLL
            for (int k = 0; k < 2; ++k) {  // low nibbles (sub-block 2c, qh bit 2c), then high (2c + 1)
                const float d1 = mul_rn(d, small_to_float(sc[k])), m1 = mul_rn(dmin, small_to_float(m[k]));
                const int hs = 2 * c + k;
                float qf[8], w[8];
                bytes_to_float4(((q[0] >> (4 * k)) & 0x0F0F0F0Fu) | (((h[0] >> hs) & 0x01010101u) << 4), 0.0f, qf);
                bytes_to_float4(((q[1] >> (4 * k)) & 0x0F0F0F0Fu) | (((h[1] >> hs) & 0x01010101u) << 4), 0.0f, qf + 4);
                DSV4_GV_UNROLL
                for (int j = 0; j < 8; ++j) w[j] = fmaf(d1, qf[j], -m1);  // d1*q exact: fl(d1*q - m1)
                plain_dot<NT>(w, k == 0 ? xl : xh, nt, acc[r]);
            }
        }
    }
};

// Q6_K: ql[128] qh[64] scales[16](int8) d. Value 128n + 32k + l: low 4 bits from ql[64n + 32 (k & 1) + l]
// (low nibble for k < 2, high for k >= 2), high 2 bits (qh[32n + l] >> 2k) & 3, minus 32; scale
// scales[8n + l/16 + 2k]; w = d*sc * q, exact (11 + 7 + 5 bits). Unit u = (n = u / 4, l0 = 8 (u % 4)): the
// bytes at l0 of ql (both halves) and qh give the four k; 32 values.
template <>
struct Codec<GgmlType::Q6_K> {
    static constexpr int kElems = 256, kBytes = 210, kUnits = 8, kAlign = 2, kStageBlocks = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int n = u >> 2, l0 = 8 * (u & 3);
        uint32_t qa[R][2], qb[R][2], qh[R][2], sc[R][2];
        float d[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            ld64_any(b[r] + 64 * n + l0, qa[r]);
            ld64_any(b[r] + 64 * n + 32 + l0, qb[r]);
            ld64_any(b[r] + 128 + 32 * n + l0, qh[r]);
            ld64_any(b[r] + 192 + 8 * n, sc[r]);
            d[r] = half_bits(ld16(b[r] + 208));
        }
        DSV4_GV_UNROLL
        for (int k = 0; k < 4; ++k) {
            float xv[NT][8];
            load_x8<NT>(x, 128 * n + 32 * k + l0, nt, xv);
            DSV4_GV_UNROLL
            for (int r = 0; r < R; ++r) {
                const uint32_t s8 = (sc[r][k >> 1] >> (8 * ((l0 >> 4) + 2 * (k & 1)))) & 0xFF;
                const float ds = mul_rn(d[r], small_to_float(s8 ^ 0x80) - 128.0f);  // int8 scale
                const uint32_t* lo = k & 1 ? qb[r] : qa[r];
                float v[8];
                DSV4_GV_UNROLL
                for (int i = 0; i < 2; ++i) {
                    const uint32_t nib = (lo[i] >> (k >= 2 ? 4 : 0)) & 0x0F0F0F0Fu;
                    const uint32_t hi = ((qh[r][i] >> (2 * k)) & 0x03030303u) << 4;
                    bytes_to_float4(nib | hi, 32.0f, v + 4 * i);
                }
                scaled_dot<NT>(ds, v, xv, nt, acc[r]);
            }
        }
    }
};

// IQ2_XXS: d, then per 32 values 4 grid-index bytes and a u32 aux (4 x 7 sign bits, 4-bit scale). Value
// 32ib + 8l + j = db * grid[idx_l][j] * sign_j with db = d * (0.5 + (aux >> 28)) * 0.25; db * grid is exact
// (16 + 6 bits). Unit u = (ib = u / 4, l = u % 4): 8 values. The lookup tables (Lut) turn the grid index and
// the sign pattern into prmt selectors of the six signed grid values.
template <>
struct Codec<GgmlType::IQ2_XXS> {
    static constexpr int kElems = 256, kBytes = 66, kUnits = 32, kAlign = 2, kStageBlocks = 16;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const float* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        const int ib = u >> 2, l = u & 3;
        float xv[NT][8];
        load_x8<NT>(x, 8 * u, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint8_t* p = b[r] + 2 + 8 * ib;
            const uint32_t aux = ld32_any(p + 4);
            const uint32_t idx = p[l];
            const float db = mul_rn(mul_rn(half_bits(ld16(b[r])), 0.5f + small_to_float(aux >> 28)), 0.25f);
            const uint32_t sel = lut.grid[idx] + lut.sign[(aux >> (7 * l)) & 127];
            float v[8];
            bytes_to_float4(prmt(kIq2SignedLo, kIq2SignedHi, sel), 128.0f, v);
            bytes_to_float4(prmt(kIq2SignedLo, kIq2SignedHi, sel >> 16), 128.0f, v + 4);
            scaled_dot<NT>(db, v, xv, nt, acc[r]);
        }
    }
};

// Plain formats: a "block" is 8 consecutive values (K must be a multiple of 8); one unit per block.
template <>
struct Codec<GgmlType::F16> {
    static constexpr int kElems = 8, kBytes = 16, kUnits = 1, kAlign = 16, kStageBlocks = 64;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int, const float* const (&x)[NT], int nt, float (&acc)[R][NT],
                            const Lut&) {
        float xv[NT][8];
        load_x8<NT>(x, 0, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint4 q = *reinterpret_cast<const uint4*>(b[r]);
            const uint32_t wd[4] = {q.x, q.y, q.z, q.w};
            float w[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 4; ++i) w[2 * i] = half_bits(wd[i]), w[2 * i + 1] = half_bits(wd[i] >> 16);
            plain_dot<NT>(w, xv, nt, acc[r]);
        }
    }
};
template <>
struct Codec<GgmlType::BF16> {
    static constexpr int kElems = 8, kBytes = 16, kUnits = 1, kAlign = 16, kStageBlocks = 64;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int, const float* const (&x)[NT], int nt, float (&acc)[R][NT],
                            const Lut&) {
        float xv[NT][8];
        load_x8<NT>(x, 0, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint4 q = *reinterpret_cast<const uint4*>(b[r]);
            const uint32_t wd[4] = {q.x, q.y, q.z, q.w};
            float w[8];
            DSV4_GV_UNROLL
            for (int i = 0; i < 4; ++i) w[2 * i] = as_float(wd[i] << 16), w[2 * i + 1] = as_float(wd[i] & 0xFFFF0000u);
            plain_dot<NT>(w, xv, nt, acc[r]);
        }
    }
};
template <>
struct Codec<GgmlType::F32> {
    static constexpr int kElems = 8, kBytes = 32, kUnits = 1, kAlign = 16, kStageBlocks = 32;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int, const float* const (&x)[NT], int nt, float (&acc)[R][NT],
                            const Lut&) {
        float xv[NT][8];
        load_x8<NT>(x, 0, nt, xv);
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const float4 a = *reinterpret_cast<const float4*>(b[r]), c = *reinterpret_cast<const float4*>(b[r] + 16);
            const float w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            plain_dot<NT>(w, xv, nt, acc[r]);
        }
    }
};

}  // namespace dsv4::cuda::gemv
