// Integer inner loops of the decode GEMV for the formats whose weights are small integers times a block
// scale (Q8_0, Q2_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S; the IQ1 formats keep their float codecs: as digits
// their dense GEMV measured slower): the activations are written once per call as three 8-bit digits of a
// 24-bit fixed-point number per 32-value block (XDigits), so a lane multiplies four weights by four digits in
// one dp4a instead of converting every weight to a float (cuda_gemv_codecs.cuh spends ~3 instructions per value
// on that, and the decode GEMV was bound by instruction issue, not by memory).
//
// Numerics. A block of 32 activations with largest magnitude m gets the scale 2^e, e = exponent(m) - 6, so
// v = x / 2^e lies in (-128, 128) exactly (a power of two); v = a0 + a1 / 2^8 + a2 / 2^16 + err, the bytes of
// round(v * 2^16) (a0 signed, a1, a2 unsigned; fixed_point<24>) with |err| <= 2^-16, i.e. |x - digits| <= m * 2^-22:
// the activation keeps 23 of its 24 significant bits relative to its block's largest value. The products with the integer weights
// are exact (32-bit integer sums), and a block's value is combined in f32 as scale * (s0 + (256 s1 + s2) /
// 2^16). So the result differs from the f32 dot of the exact weights by about the rounding that dot has
// itself; test-backend-ops holds it to the same tolerance as every matmul (tol_dot(K) against the CPU).
// Blocks whose largest magnitude is below 2^-100 are taken as zeros (their contribution is below every
// tolerance); a block with an infinity or NaN gets a NaN scale, so every output reading it is NaN.
//
// Every function is __host__ __device__ (dp4a has a portable equivalent), so the quantizer can be checked
// on a machine without a GPU.
#pragma once

#include <cmath>

#include "kernels/cuda/cuda_gemv_codecs.cuh"
#include "kernels/cuda/cuda_gemv_codecs_grid.cuh"  // iq2_scale
#include "ops/numerics.h"

namespace dsv4::cuda::gemv {

// 4N bytes at any alignment: N + 1 aligned words, N funnel shifts.
template <int N>
DSV4_GV void ld_words_any(const uint8_t* p, uint32_t (&q)[N]) {
    const uint32_t off = (uint32_t)(reinterpret_cast<uintptr_t>(p) & 3);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p - off);
    const uint32_t sh = 8 * off;
    uint32_t v[N + 1];
    DSV4_GV_UNROLL
    for (int i = 0; i <= N; ++i) v[i] = w[i];
    DSV4_GV_UNROLL
    for (int i = 0; i < N; ++i) q[i] = fshr(v[i], v[i + 1], sh);
}

// kDigitBlock = 32 activations as digits; 112 bytes, 16-byte aligned (uint4 loads of each half of a plane).
constexpr int kDigitBlock = 32;
struct alignas(16) XDigits {
    int8_t a0[kDigitBlock];   // floor(x / scale), in [-128, 127]
    uint8_t a1[kDigitBlock];  // the next 8 bits of x / scale
    uint8_t a2[kDigitBlock];  // the 8 after those, rounded
    float scale;     // 2^e (0 for a negligible block, NaN for a non-finite one)
    float sum16[2];  // f32 sums of values 0..15 and 16..31 (for the formats with a block minimum, Q2_K)
    float pad;
};
static_assert(sizeof(XDigits) == 112, "XDigits is 7 16-byte words");

// ---- quantization (one block of 32 values) ----

// The scale exponent of a block with largest magnitude m, as the float 2^e and its inverse 2^-e; false when
// the block is negligible (m < 2^-100) or not finite (then the scale is NaN).
DSV4_GV bool digit_scale(float m, float& scale, float& inv) {
    const uint32_t E = (nm_bits(m) >> 23) & 255;
    if (E == 255) {
        scale = as_float(0x7FC00000u);
        inv = 0.0f;
        return false;
    }
    if (E < 127 - 100) {
        scale = 0.0f;
        inv = 0.0f;
        return false;
    }
    const int e = (int)E - 127 - 6;  // m / 2^e in [64, 128)
    scale = as_float((uint32_t)(e + 127) << 23);
    inv = as_float((uint32_t)(127 - e) << 23);
    return true;
}

// v = x * 2^-e (|v| < 128) as a B-bit fixed-point number (B = 24: three digits; 16: two), from t = v * 2^(B - 8):
// round(t) (to nearest, ties to even), kept below 2^(B - 1) (v just under 128 rounds up to it). Its bytes from the
// top are the digits a0 (signed: the number is two's complement), a1 (and a2), so v = a0 + a1 / 2^8 (+ a2 / 2^16)
// to within 2^-(B - 7) (2^-(B - 8) where clamped).
template <int B>
DSV4_GV int32_t fixed_point(float t) {
    static_assert(B == 16 || B == 24);
    constexpr int32_t kTop = (1 << (B - 1)) - 1;
#if defined(__CUDA_ARCH__)
    const int32_t q = __float2int_rn(t);
#else
    const int32_t q = (int32_t)std::nearbyint(t);  // the default rounding mode: ties to even
#endif
    return q < kTop ? q : kTop;
}

// The digits of lane i's four values v[0..4) = x[4i .. 4i + 4) of a block, packed one byte per value into a
// word of each plane: the bytes of the four fixed_point<24> numbers, gathered by byte permutes (a conversion and a
// few integer ops per value; the quantize kernel runs this on 8 lanes per block, quantize_block on one thread).
DSV4_GV void digits_of4(const float (&v)[4], float inv, uint32_t& w0, uint32_t& w1, uint32_t& w2) {
    const float k = inv * 65536.0f;  // a power of two: v[i] * k = v * 2^16 exactly
    uint32_t q[4];
    DSV4_GV_UNROLL
    for (int i = 0; i < 4; ++i) q[i] = (uint32_t)fixed_point<24>(v[i] * k);
    const uint32_t lo01 = prmt(q[0], q[1], 0x5140u), lo23 = prmt(q[2], q[3], 0x5140u);  // bytes 0, 1 of each
    const uint32_t hi01 = prmt(q[0], q[1], 0x0062u), hi23 = prmt(q[2], q[3], 0x0062u);  // bytes 2
    w0 = prmt(hi01, hi23, 0x5410u);
    w1 = prmt(lo01, lo23, 0x7632u);
    w2 = prmt(lo01, lo23, 0x5410u);
}
// Two planes instead of three, for the bf16 mode's products of 16 or more rows (a prompt chunk's or a batch's
// experts on the register kernels): the bytes 1 and 0 of fixed_point<16>, so v = a0 + a1 / 2^8 to within 2^-9:
// 15 significant bits relative to the block's largest value, where the bf16 rounding of the mode's tensor-core
// paths keeps 8 relative to each value. The third plane's dot products are skipped (a2 is zero).
DSV4_GV void digits2_of4(const float (&v)[4], float inv, uint32_t& w0, uint32_t& w1) {
    const float k = inv * 256.0f;  // a power of two: v[i] * k = v * 2^8 exactly
    uint32_t q[4];
    DSV4_GV_UNROLL
    for (int i = 0; i < 4; ++i) q[i] = (uint32_t)fixed_point<16>(v[i] * k);
    w0 = prmt(prmt(q[0], q[1], 0x0051u), prmt(q[2], q[3], 0x0051u), 0x5410u);  // bytes 1 of each
    w1 = prmt(prmt(q[0], q[1], 0x0040u), prmt(q[2], q[3], 0x0040u), 0x5410u);  // bytes 0
}

// The largest magnitude of a block from its lanes' maxima; a NaN counts as an infinity (fmaxf drops NaNs).
DSV4_GV float abs_max4(const float (&v)[4]) {
    float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    const bool nan = v[0] != v[0] || v[1] != v[1] || v[2] != v[2] || v[3] != v[3];
    return nan ? as_float(0x7F800000u) : m;
}
// A lane's share of sum16: ((v0 + v1) + v2) + v3; a half's sum is (lane 0 + lane 1) + (lane 2 + lane 3).
DSV4_GV float sum4(const float (&v)[4]) {
    return ((v[0] + v[1]) + v[2]) + v[3];
}

// One block on one thread, the same values the quantize kernel writes (host tests, reference).
DSV4_GV void quantize_block(const float* x, XDigits& out) {
    float v[8][4], part[8], m = 0.0f;
    for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 4; ++j) v[i][j] = x[4 * i + j];
        m = fmaxf(m, abs_max4(v[i]));
        part[i] = sum4(v[i]);
    }
    float scale, inv;
    const bool ok = digit_scale(m, scale, inv);
    for (int i = 0; i < 8; ++i) {
        uint32_t w0 = 0, w1 = 0, w2 = 0;
        if (ok) digits_of4(v[i], inv, w0, w1, w2);
        std::memcpy(out.a0 + 4 * i, &w0, 4);
        std::memcpy(out.a1 + 4 * i, &w1, 4);
        std::memcpy(out.a2 + 4 * i, &w2, 4);
    }
    out.scale = scale;
    out.sum16[0] = (part[0] + part[1]) + (part[2] + part[3]);
    out.sum16[1] = (part[4] + part[5]) + (part[6] + part[7]);
    out.pad = 0.0f;
}

// ---- integer dot products ----

// sum of the four byte products of a and b plus c; S* says which operand's bytes are signed.
template <bool SA, bool SB>
DSV4_GV int dp4a(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
    int d;
    if constexpr (SA && SB)
        asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else if constexpr (SA)
        asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else if constexpr (SB)
        asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else
        asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    int s = c;
    for (int i = 0; i < 4; ++i) {
        const uint32_t ua = (a >> (8 * i)) & 255, ub = (b >> (8 * i)) & 255;
        const int va = SA ? (int)(int8_t)ua : (int)ua, vb = SB ? (int)(int8_t)ub : (int)ub;
        s += va * vb;
    }
    return s;
#endif
}

// The three digit sums of W weight words (4 bytes each, signed when SW) with W words of each digit plane (P = 2:
// the first two; the activations then have no third plane, digits2_of4).
struct DigitSums {
    int s0 = 0, s1 = 0, s2 = 0;
};
template <bool SW, int W, int P = 3>
DSV4_GV void digit_dot(const uint32_t (&w)[W], const uint32_t (&a0)[W], const uint32_t (&a1)[W],
                       const uint32_t (&a2)[W], DigitSums& s) {
    static_assert(P == 2 || P == 3);
    DSV4_GV_UNROLL
    for (int i = 0; i < W; ++i) {
        s.s0 = dp4a<SW, true>(w[i], a0[i], s.s0);
        s.s1 = dp4a<SW, false>(w[i], a1[i], s.s1);
        if constexpr (P == 3) s.s2 = dp4a<SW, false>(w[i], a2[i], s.s2);
    }
}
// s0 + s1 / 2^8 + s2 / 2^16 (|s1|, |s2| < 2^20 for up to 32 values, so 256 s1 + s2 fits in 32 bits).
DSV4_GV float digit_value(const DigitSums& s) {
    return fmaf((float)(s.s1 * 256 + s.s2), 1.0f / 65536.0f, (float)s.s0);
}

// The digits of values [16h, 16h + 16) of a block as 4 words per plane (16-byte loads on the device).
struct XHalf {
    uint32_t a0[4], a1[4], a2[4];
};
DSV4_GV uint4 ld_u4(const void* p) {
#if defined(__CUDA_ARCH__)
    return __ldg(reinterpret_cast<const uint4*>(p));
#else
    return *reinterpret_cast<const uint4*>(p);
#endif
}
DSV4_GV void set4(uint32_t (&d)[4], const uint4& v) {
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
}
// A whole digit plane of a block (32 bytes) as 8 words.
DSV4_GV void load_plane(const void* plane, uint32_t (&d)[8]) {
    const uint4 lo = ld_u4(plane), hi = ld_u4(static_cast<const uint8_t*>(plane) + 16);
    d[0] = lo.x, d[1] = lo.y, d[2] = lo.z, d[3] = lo.w;
    d[4] = hi.x, d[5] = hi.y, d[6] = hi.z, d[7] = hi.w;
}
// sum[r] += row r's 8 signed weight words times one digit plane (32 bytes; signed digits when SX: a0).
template <bool SX, int R>
DSV4_GV void plane_dot(const uint32_t (&w)[R][8], const void* plane, int (&sum)[R]) {
    uint32_t a[8];
    load_plane(plane, a);
    DSV4_GV_UNROLL
    for (int r = 0; r < R; ++r) DSV4_GV_UNROLL
    for (int i = 0; i < 8; ++i) sum[r] = dp4a<true, SX>(w[r][i], a[i], sum[r]);
}
DSV4_GV XHalf load_half(const XDigits* x, int h) {
    XHalf r;
    set4(r.a0, ld_u4(x->a0 + 16 * h));
    set4(r.a1, ld_u4(x->a1 + 16 * h));
    set4(r.a2, ld_u4(x->a2 + 16 * h));
    return r;
}
DSV4_GV float ld_x1(const float* p) {  // as ld_x4, one value
#if defined(__CUDA_ARCH__)
    return __ldg(p);
#else
    return *p;
#endif
}

// acc[r][t] += scale[r] * (row r's 8 weight words . digit block u of token t), for the nt tokens present: the
// three digit planes one after the other (only one plane held at a time).
template <int R, int NT>
DSV4_GV void dot_block(const uint32_t (&w)[R][8], const float (&scale)[R], const XDigits* const (&x)[NT], int u,
                       int nt, float (&acc)[R][NT]) {
    DSV4_GV_UNROLL
    for (int t = 0; t < NT; ++t) {
        if (t < nt) {
            const XDigits* xb = x[t] + u;
            int s0[R] = {}, s1[R] = {}, s2[R] = {};
            plane_dot<true>(w, xb->a0, s0);
            plane_dot<false>(w, xb->a1, s1);
            plane_dot<false>(w, xb->a2, s2);
            const float sx = ld_x1(&xb->scale);
            DSV4_GV_UNROLL
            for (int r = 0; r < R; ++r)
                acc[r][t] = fmaf(scale[r] * sx, digit_value(DigitSums{s0[r], s1[r], s2[r]}), acc[r][t]);
        }
    }
}

// As dot_block with a scale per half: half h's 4 weight words against values 16 h .. 16 h + 15 of the block.
template <int R, int NT>
DSV4_GV void dot_halves(const uint32_t (&w)[R][2][4], const float (&scale)[R][2], const XDigits* const (&x)[NT],
                        int u, int nt, float (&acc)[R][NT]) {
    DSV4_GV_UNROLL
    for (int t = 0; t < NT; ++t) {
        if (t < nt) {
            const XDigits* xb = x[t] + u;
            const float sx = ld_x1(&xb->scale);
            DSV4_GV_UNROLL
            for (int h = 0; h < 2; ++h) {
                const XHalf xh = load_half(xb, h);
                DSV4_GV_UNROLL
                for (int r = 0; r < R; ++r) {
                    DigitSums s;
                    digit_dot<true, 4>(w[r][h], xh.a0, xh.a1, xh.a2, s);
                    acc[r][t] = fmaf(scale[r][h] * sx, digit_value(s), acc[r][t]);
                }
            }
        }
    }
}

// ---- the codecs: same block geometry contract as Codec<T> (cuda_gemv_codecs.cuh), activations as XDigits.
// X / kXPerBlock: the activation type and how many of them one weight block spans.

template <GgmlType T>
struct DigitCodec;

// Q8_0: unit = the whole block: 8 words of int8 weights (one 9-word load where two half-block units took
// two 5-word loads), the block's three digit planes one after the other (8 words each, so only one plane
// is held at a time), one combination per block and row.
template <>
struct DigitCodec<GgmlType::Q8_0> {
    using X = XDigits;
    static constexpr int kElems = 32, kBytes = 34, kUnits = 1, kAlign = 2, kStageBlocks = 32, kXPerBlock = 1;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        uint32_t w[R][8];
        float d[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            ld_words_any(b[r] + 2, w[r]);
            d[r] = half_bits(ld16(b[r]));
        }
        dot_block(w, d, x, 0, nt, acc);
    }
};

// IQ2_XXS: unit u = the 32 values of sub-block ib = u (4 grid entries, one scale): 8 words of signed grid
// values (from the Lut selectors and the signed table below), one whole digit block.
template <>
struct DigitCodec<GgmlType::IQ2_XXS> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 66, kUnits = 8, kAlign = 2, kStageBlocks = 16, kXPerBlock = 8;
    static constexpr int kMinBlocks1 = 6;  // 85 registers (see min_blocks)
    // The signed grid values {8, 25, 43, -8, -25, -43} as int8 bytes 0..5 (prmt sources).
    static constexpr uint32_t kSignedLo = 0xF82B1908u, kSignedHi = 0x0000D5E7u;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        uint32_t q[R][2];  // per row: the 4 grid indices, then aux (4 x 7 sign bits, 4-bit scale)
        float db[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            ld64_any(b[r] + 2 + 8 * u, q[r]);
            db[r] = mul_rn(mul_rn(half_bits(ld16(b[r])), 0.5f + small_to_float(q[r][1] >> 28)), 0.25f);
        }
        DSV4_GV_UNROLL
        for (int t = 0; t < NT; ++t) {
            if (t < nt) {
                const XDigits* xb = x[t] + u;
                DigitSums s[R];
                DSV4_GV_UNROLL
                for (int h = 0; h < 2; ++h) {  // grid entries 2h, 2h + 1: values 16h .. 16h + 15
                    const XHalf xh = load_half(xb, h);
                    DSV4_GV_UNROLL
                    for (int r = 0; r < R; ++r) {
                        uint32_t w[4];
                        DSV4_GV_UNROLL
                        for (int i = 0; i < 2; ++i) {
                            const int l = 2 * h + i;
                            const uint32_t sel =
                                lut.grid[(q[r][0] >> (8 * l)) & 255] + lut.sign[(q[r][1] >> (7 * l)) & 127];
                            w[2 * i] = prmt(kSignedLo, kSignedHi, sel);
                            w[2 * i + 1] = prmt(kSignedLo, kSignedHi, sel >> 16);
                        }
                        digit_dot<true, 4>(w, xh.a0, xh.a1, xh.a2, s[r]);
                    }
                }
                const float sx = ld_x1(&xb->scale);
                DSV4_GV_UNROLL
                for (int r = 0; r < R; ++r) acc[r][t] = fmaf(db[r] * sx, digit_value(s[r]), acc[r][t]);
            }
        }
    }
};

// Q2_K: unit u = (n = u >> 3, g = (u >> 1) & 3, h = u & 1): the 16 values 128n + 32g + 16h + l, l < 16, of
// one scale byte: q = (qs[32n + 16h + l] >> 2g) & 3, w = dl q - ml with dl = d (sc & 15), ml = dmin (sc >> 4).
// sum w x = dl sum q x - ml sum x; the digit block is 4n + g, its half h.
template <>
struct DigitCodec<GgmlType::Q2_K> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 84, kUnits = 16, kAlign = 4, kStageBlocks = 12, kXPerBlock = 8;
    static constexpr int kMinBlocks1 = 6;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut&) {
        const int n = u >> 3, g = (u >> 1) & 3, h = u & 1;
        uint32_t w[R][4];
        float dl[R], ml[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint8_t* qs = b[r] + 16 + 32 * n + 16 * h;
            DSV4_GV_UNROLL
            for (int i = 0; i < 4; ++i) w[r][i] = (ld32(qs + 4 * i) >> (2 * g)) & 0x03030303u;
            const uint32_t sc = b[r][8 * n + 2 * g + h];
            const uint32_t dd = ld32(b[r] + 80);
            dl[r] = mul_rn(half_bits(dd), small_to_float(sc & 15));
            ml[r] = mul_rn(half_bits(dd >> 16), small_to_float(sc >> 4));
        }
        DSV4_GV_UNROLL
        for (int t = 0; t < NT; ++t) {
            if (t < nt) {
                const XDigits* xb = x[t] + 4 * n + g;
                const XHalf xh = load_half(xb, h);
                const float sx = ld_x1(&xb->scale), sum = ld_x1(&xb->sum16[h]);
                DSV4_GV_UNROLL
                for (int r = 0; r < R; ++r) {
                    DigitSums s;
                    digit_dot<false, 4>(w[r], xh.a0, xh.a1, xh.a2, s);
                    acc[r][t] = fmaf(dl[r] * sx, digit_value(s), fmaf(-ml[r], sum, acc[r][t]));
                }
            }
        }
    }
};

// Four unsigned grid bytes g (1..127) with four sign bits s (bit j: byte j negative) as int8 weights: byte j is
// (g ^ 0xFF) + 1 = -g where its bit is set. The bits go to bit 0 of their bytes by one multiply (s * 0x00204081
// puts bit j at 8 j, and the other products land on bits the mask clears, without carries), 0xFF per set byte
// by a second; no byte carries into the next, as g >= 1.
DSV4_GV uint32_t signed_bytes(uint32_t g, uint32_t s) {
    const uint32_t one = ((s & 15) * 0x00204081u) & 0x01010101u;
    return (g ^ (one * 0xFFu)) + one;
}

// Four IQ1 grid values g in {-1, 0, 1} (int8 bytes) with the shift's sign as the int8 bytes of 8 g + 1 (neg false)
// or 8 g - 1 (neg true): the IQ1 weight dl (g +- 1/8) is (dl / 8) (8 g +- 1), so the shift needs no sums of
// the activations. 8 g is each byte shifted by 3 (the bits shifted into the next byte cleared), its low 3 bits
// zero, so + 1 is an OR; 8 g - 1 = ~(8 (-g)), with -g the bytes of g whose bit 0 is set (the nonzero ones)
// flipped in bits 1..7.
DSV4_GV uint32_t iq1_word(uint32_t g, bool neg) {
    const uint32_t t = neg ? g ^ ((g & 0x01010101u) * 0xFEu) : g;
    const uint32_t y = (t << 3) & 0xF8F8F8F8u;
    return neg ? ~y : y | 0x01010101u;
}

// A group of 8 weights: its two 4-byte grid entries lo, hi with sign byte s (the low nibble for lo) as the two
// int8 weight words w[0], w[1].
DSV4_GV void signed_group(uint32_t* w, uint32_t lo, uint32_t hi, uint32_t s) {
    w[0] = signed_bytes(lo, s);
    w[1] = signed_bytes(hi, s >> 4);
}

// IQ2_XS and IQ2_S: the two halves of sub-block ib (groups 2 h, 2 h + 1), each with its scale iq2_scale(d, nibble h
// of the sub-block's scale byte sc). group(l, s) returns group l's 8 grid bytes and sets s to its sign byte.
template <class Group>
DSV4_GV void iq2_halves(uint32_t (&w)[2][4], float (&db)[2], float d, uint32_t sc, Group group) {
    DSV4_GV_UNROLL
    for (int h = 0; h < 2; ++h) {
        db[h] = iq2_scale(d, (sc >> (4 * h)) & 15);
        DSV4_GV_UNROLL
        for (int i = 0; i < 2; ++i) {
            uint32_t s;
            const uint64_t e = group(2 * h + i, s);
            signed_group(&w[h][2 * i], (uint32_t)e, (uint32_t)(e >> 32), s);
        }
    }
}

// IQ3_XXS: d qs[64] aux[8](u32: 4 x 7 sign bits, 4-bit scale): unit u = sub-block ib = u, 32 values of one scale
// db = d (0.5 + (aux >> 28)) 0.5; group l's two 4-value grid entries qs[8 ib + 2 l], qs[8 ib + 2 l + 1] and sign
// byte signs[(aux >> 7 l) & 127] (its low nibble for the first entry) as 8 words of int8 weights, one whole
// digit block.
template <>
struct DigitCodec<GgmlType::IQ3_XXS> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 98, kUnits = 8, kAlign = 2, kStageBlocks = 8, kXPerBlock = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        uint32_t w[R][8];
        float db[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t aux = ld32_any(b[r] + 66 + 4 * u);
            db[r] = mul_rn(mul_rn(half_bits(ld16(b[r])), 0.5f + small_to_float(aux >> 28)), 0.5f);
            uint32_t qs[2];
            ld_words_any(b[r] + 2 + 8 * u, qs);  // the sub-block's 8 grid indices
            DSV4_GV_UNROLL
            for (int l = 0; l < 4; ++l) {
                const uint32_t sg = ld_table(lut.signs, (aux >> (7 * l)) & 127);
                const uint32_t i2 = qs[l >> 1] >> (16 * (l & 1));
                w[r][2 * l] = signed_bytes(ld_table(lut.grid32, i2 & 255), sg);
                w[r][2 * l + 1] = signed_bytes(ld_table(lut.grid32, (i2 >> 8) & 255), sg >> 4);
            }
        }
        dot_block(w, db, x, u, nt, acc);
    }
};

// IQ2_XS: d qs[32](u16: 9-bit grid index, 7-bit sign index) scales[8]: unit u = sub-block ib = u; its halves h
// (values 16 h .. 16 h + 15: groups 2 h, 2 h + 1) have their own scale db = iq2_scale(d, nibble h of scales[ib]);
// each group's grid entry (8 unsigned bytes 8, 25 or 43) with its sign byte as two words of int8 weights. A half's
// 4 weight words against the digit block's half.
template <>
struct DigitCodec<GgmlType::IQ2_XS> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 74, kUnits = 8, kAlign = 2, kStageBlocks = 16, kXPerBlock = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        uint32_t w[R][2][4];
        float db[R][2];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const float d = half_bits(ld16(b[r]));
            const uint32_t sc = b[r][66 + u];
            uint32_t q[2];
            ld_words_any(b[r] + 2 + 8 * u, q);  // the sub-block's 4 u16 indices
            iq2_halves(w[r], db[r], d, sc, [&](int l, uint32_t& sg) {
                const uint32_t qi = (q[l >> 1] >> (16 * (l & 1))) & 0xFFFFu;
                const uint64_t e = ld_table(lut.grid64, qi & 511);
                sg = ld_table(lut.signs, qi >> 9);
                return e;
            });
        }
        dot_halves(w, db, x, u, nt, acc);
    }
};

// IQ2_S: d qs[32] signs[32] qh[8] scales[8]: unit u = sub-block ib = u; its halves h (groups 2 h, 2 h + 1) have
// their own scale db = iq2_scale(d, nibble h of scales[ib]), as IQ2_XS; group l's grid entry qs[4 ib + l] | bits
// 2 l, 2 l + 1 of qh[ib] as bits 8, 9 (8 unsigned bytes 8, 25 or 43) with its explicit sign byte signs[4 ib + l]
// as two words of int8 weights (signed_bytes). A half's 4 weight words against the digit block's half.
template <>
struct DigitCodec<GgmlType::IQ2_S> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 82, kUnits = 8, kAlign = 2, kStageBlocks = 16, kXPerBlock = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        uint32_t w[R][2][4];
        float db[R][2];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const float d = half_bits(ld16(b[r]));
            const uint32_t qs = ld32_any(b[r] + 2 + 4 * u), sg = ld32_any(b[r] + 34 + 4 * u);  // 4 indices, 4 signs
            const uint32_t qh = b[r][66 + u], sc = b[r][74 + u];
            iq2_halves(w[r], db[r], d, sc, [&](int l, uint32_t& s) {
                s = sg >> (8 * l);
                return ld_table(lut.grid64, ((qs >> (8 * l)) & 255) | ((qh << (8 - 2 * l)) & 0x300u));
            });
        }
        dot_halves(w, db, x, u, nt, acc);
    }
};

// IQ3_S: d qs[64] qh[8] signs[32] scales[4]: unit u = sub-block ib = u, 32 values of one scale db = d (1 + 2 s), s
// nibble ib % 2 of scales[ib / 2] (exact: 11 + 4 bits); group l's two 4-value grid entries (odd bytes 1..15)
// qs[8 ib + 2 l], qs[8 ib + 2 l + 1] with bits 2 l, 2 l + 1 of qh[ib] as their 9th bits, and its explicit sign
// byte signs[4 ib + l] (the low nibble for the first entry) as 8 words of int8 weights, one whole digit block.
template <>
struct DigitCodec<GgmlType::IQ3_S> {
    using X = XDigits;
    static constexpr int kElems = 256, kBytes = 110, kUnits = 8, kAlign = 2, kStageBlocks = 8, kXPerBlock = 8;
    template <int R, int NT>
    DSV4_GV static void dot(const uint8_t* const (&b)[R], int u, const XDigits* const (&x)[NT], int nt,
                            float (&acc)[R][NT], const Lut& lut) {
        uint32_t w[R][8];
        float db[R];
        DSV4_GV_UNROLL
        for (int r = 0; r < R; ++r) {
            const uint32_t qh = b[r][66 + u], sc = b[r][106 + u / 2];
            db[r] = mul_rn(half_bits(ld16(b[r])), small_to_float(1 + 2 * ((sc >> (4 * (u & 1))) & 15)));
            uint32_t qs[2];
            ld_words_any(b[r] + 2 + 8 * u, qs);                 // the sub-block's 8 index bytes
            const uint32_t sg = ld32_any(b[r] + 74 + 4 * u);  // its 4 sign bytes
            DSV4_GV_UNROLL
            for (int l = 0; l < 4; ++l) {
                const uint32_t i12 = qs[l >> 1] >> (16 * (l & 1));
                const uint32_t i1 = (i12 & 255) | ((qh << (8 - 2 * l)) & 256);
                const uint32_t i2 = ((i12 >> 8) & 255) | ((qh << (7 - 2 * l)) & 256);
                signed_group(&w[r][2 * l], ld_table(lut.grid32, i1), ld_table(lut.grid32, i2), sg >> (8 * l));
            }
        }
        dot_block(w, db, x, u, nt, acc);
    }
};

// Whether format T has a digit codec (the GEMV then quantizes its activations first).
constexpr bool has_digit_codec(GgmlType t) {
    return t == GgmlType::Q8_0 || t == GgmlType::IQ2_XXS || t == GgmlType::Q2_K || t == GgmlType::IQ3_XXS ||
           t == GgmlType::IQ2_XS || t == GgmlType::IQ2_S || t == GgmlType::IQ3_S;
}

// Calls go(DigitCodec<T>{}) when `digits` and T has a digit codec, else go(Codec<T>{}).
template <GgmlType T, class F>
void with_codec(bool digits, F&& go) {
    if constexpr (has_digit_codec(T)) {
        if (digits) return go(DigitCodec<T>{});
    }
    go(Codec<T>{});
}

}  // namespace dsv4::cuda::gemv
