// Device decoders for every ggml weight format: value i of a block, computed with exactly the float
// operations (and their order) of the CPU codecs in src/format/quant_*.cpp, so a dequantized weight is
// bit-identical on both backends. Products and sums that the CPU evaluates with two roundings use the
// __fmul_rn/__fadd_rn intrinsics, which nvcc never fuses into an FMA.
//
// Block fields are read byte by byte: blocks of 17, 18 or 34 bytes leave wider fields unaligned.
// The IQ grids live in device memory (uploaded once from the host tables, see QuantTables).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "format/ggml_type.h"

namespace dsv4::cuda {

// Lookup tables of the IQ/MXFP4 formats in device memory, passed to kernels by value.
struct QuantTables {
    const uint64_t* iq2xxs = nullptr;  // [256]
    const uint64_t* iq2xs = nullptr;   // [512]
    const uint64_t* iq2s = nullptr;    // [1024]
    const uint32_t* iq3xxs = nullptr;  // [256]
    const uint32_t* iq3s = nullptr;    // [512]
    const uint64_t* iq1s = nullptr;    // [2048]
    const uint8_t* signs = nullptr;    // [128] 7 sign bits + parity bit
    const int8_t* iq4nl = nullptr;     // [16]
    const int8_t* mxfp4 = nullptr;     // [16]
    // Derived from iq2xxs for the bf16 decoder (cuda_dequant_bf16.cuh): per grid entry, the four PRMT
    // selectors (16 bits each, values 2i and 2i + 1 at bits 16 i) that pick each value's magnitude code.
    const uint64_t* iq2xxs_sel = nullptr;  // [256]
};

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return __half2float(__ushort_as_half((unsigned short)ld_u16(p))); }
__device__ __forceinline__ float ld_bf16(const uint8_t* p) { return __uint_as_float(ld_u16(p) << 16); }
__device__ __forceinline__ float ld_f32(const uint8_t* p) { return __uint_as_float(ld_u32(p)); }
__device__ __forceinline__ float grid_val(uint64_t e, int j) { return (float)(uint8_t)(e >> (8 * j)); }
__device__ __forceinline__ float sign_of(uint32_t bits, int j) { return (bits >> j) & 1 ? -1.f : 1.f; }

// E8M0 exponent -> 2^(e-128) (half the MXFP4 scale: the values are stored doubled).
__device__ __forceinline__ float e8m0_half(uint8_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

template <GgmlType T>
struct Dq;  // kElems values per block of kBytes bytes; value(b, i) = value i of block b

// ---- plain types: one value per "block" ----
template <>
struct Dq<GgmlType::F32> {
    static constexpr int kElems = 1, kBytes = 4;
    __device__ static float value(const uint8_t* b, int, const QuantTables&) { return ld_f32(b); }
};
template <>
struct Dq<GgmlType::F16> {
    static constexpr int kElems = 1, kBytes = 2;
    __device__ static float value(const uint8_t* b, int, const QuantTables&) { return ld_f16(b); }
};
template <>
struct Dq<GgmlType::BF16> {
    static constexpr int kElems = 1, kBytes = 2;
    __device__ static float value(const uint8_t* b, int, const QuantTables&) { return ld_bf16(b); }
};
template <>
struct Dq<GgmlType::F64> {
    static constexpr int kElems = 1, kBytes = 8;
    __device__ static float value(const uint8_t* b, int, const QuantTables&) {
        return (float)__longlong_as_double((long long)((uint64_t)ld_u32(b) | ((uint64_t)ld_u32(b + 4) << 32)));
    }
};

// ---- legacy 32-value blocks ----
template <>
struct Dq<GgmlType::Q4_0> {  // d(2) qs(16)
    static constexpr int kElems = 32, kBytes = 18;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int q = i < 16 ? (b[2 + i] & 0x0F) : (b[2 + i - 16] >> 4);
        return __fmul_rn((float)(q - 8), ld_f16(b));
    }
};
template <>
struct Dq<GgmlType::Q4_1> {  // d(2) m(2) qs(16)
    static constexpr int kElems = 32, kBytes = 20;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int q = i < 16 ? (b[4 + i] & 0x0F) : (b[4 + i - 16] >> 4);
        return __fadd_rn(__fmul_rn((float)q, ld_f16(b)), ld_f16(b + 2));
    }
};
template <>
struct Dq<GgmlType::Q5_0> {  // d(2) qh(4) qs(16)
    static constexpr int kElems = 32, kBytes = 22;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const uint32_t qh = ld_u32(b + 2);
        const int lo = i < 16 ? (b[6 + i] & 0x0F) : (b[6 + i - 16] >> 4);
        const int q = lo | (int)(((qh >> i) & 1) << 4);
        return __fmul_rn((float)(q - 16), ld_f16(b));
    }
};
template <>
struct Dq<GgmlType::Q5_1> {  // d(2) m(2) qh(4) qs(16)
    static constexpr int kElems = 32, kBytes = 24;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const uint32_t qh = ld_u32(b + 4);
        const int lo = i < 16 ? (b[8 + i] & 0x0F) : (b[8 + i - 16] >> 4);
        const int q = lo | (int)(((qh >> i) & 1) << 4);
        return __fadd_rn(__fmul_rn((float)q, ld_f16(b)), ld_f16(b + 2));
    }
};
template <>
struct Dq<GgmlType::Q8_0> {  // d(2) qs(32)
    static constexpr int kElems = 32, kBytes = 34;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        return __fmul_rn((float)(int8_t)b[2 + i], ld_f16(b));
    }
};
template <>
struct Dq<GgmlType::Q8_1> {  // d(2) s(2) qs(32)
    static constexpr int kElems = 32, kBytes = 36;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        return __fmul_rn((float)(int8_t)b[4 + i], ld_f16(b));
    }
};
template <>
struct Dq<GgmlType::MXFP4> {  // e(1) qs(16)
    static constexpr int kElems = 32, kBytes = 17;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int q = i < 16 ? (b[1 + i] & 0x0F) : (b[1 + i - 16] >> 4);
        return __fmul_rn((float)t.mxfp4[q], e8m0_half(b[0]));
    }
};
template <>
struct Dq<GgmlType::IQ4_NL> {  // d(2) qs(16)
    static constexpr int kElems = 32, kBytes = 18;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int q = i < 16 ? (b[2 + i] & 0x0F) : (b[2 + i - 16] >> 4);
        return __fmul_rn(ld_f16(b), (float)t.iq4nl[q]);
    }
};

// ---- K formats: 256-value super-blocks ----
template <>
struct Dq<GgmlType::Q2_K> {  // scales(16) qs(64) d(2) dmin(2)
    static constexpr int kElems = 256, kBytes = 84;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int n = i / 128, r = i % 128, group = r / 32, half = (r % 32) / 16, l = r % 16;
        const uint8_t sc = b[8 * n + 2 * group + half];
        const float dl = __fmul_rn(ld_f16(b + 80), (float)(sc & 0x0F));
        const float ml = __fmul_rn(ld_f16(b + 82), (float)(sc >> 4));
        const int q = (b[16 + 32 * n + 16 * half + l] >> (2 * group)) & 3;
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};
template <>
struct Dq<GgmlType::Q3_K> {  // hmask(32) qs(64) scales(12) d(2)
    static constexpr int kElems = 256, kBytes = 110;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int n = i / 128, r = i % 128, group = r / 32, half = (r % 32) / 16, l = r % 16;
        const int j = 8 * n + 2 * group + half;  // scale index
        const uint8_t* sp = b + 96;
        const int low = j < 8 ? (sp[j] & 0x0F) : (sp[j - 8] >> 4);
        const int high = (sp[8 + j % 4] >> (2 * (j / 4))) & 3;
        const int sc = (int)(int8_t)(uint8_t)(low | (high << 4));
        const float dl = __fmul_rn(ld_f16(b + 108), (float)(sc - 32));
        const int o = 16 * half + l;
        const int hbit = (b[o] >> (4 * n + group)) & 1;
        const int v = ((b[32 + 32 * n + o] >> (2 * group)) & 3) - (hbit ? 0 : 4);
        return __fmul_rn(dl, (float)v);
    }
};

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <>
struct Dq<GgmlType::Q4_K> {  // d(2) dmin(2) scales(12) qs(128)
    static constexpr int kElems = 256, kBytes = 144;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int c = i / 64, w = i % 64, sub = 2 * c + (w >= 32);
        int sc, m;
        k4_scale_min(sub, b + 4, &sc, &m);
        const float d1 = __fmul_rn(ld_f16(b), (float)sc), m1 = __fmul_rn(ld_f16(b + 2), (float)m);
        const uint8_t byte = b[16 + 32 * c + (w % 32)];
        const int q = w < 32 ? (byte & 0x0F) : (byte >> 4);
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
};
template <>
struct Dq<GgmlType::Q5_K> {  // d(2) dmin(2) scales(12) qh(32) qs(128)
    static constexpr int kElems = 256, kBytes = 176;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int c = i / 64, w = i % 64, sub = 2 * c + (w >= 32), l = w % 32;
        int sc, m;
        k4_scale_min(sub, b + 4, &sc, &m);
        const float d1 = __fmul_rn(ld_f16(b), (float)sc), m1 = __fmul_rn(ld_f16(b + 2), (float)m);
        const uint8_t byte = b[48 + 32 * c + l], hb = b[16 + l];
        const int mask = (w < 32 ? 1 : 2) << (2 * c);
        const int q = (w < 32 ? (byte & 0x0F) : (byte >> 4)) + ((hb & mask) ? 16 : 0);
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
};
template <>
struct Dq<GgmlType::Q6_K> {  // ql(128) qh(64) scales(16, int8) d(2)
    static constexpr int kElems = 256, kBytes = 210;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int n = i / 128, r = i % 128, k = r / 32, l = r % 32;
        const uint8_t* ql = b + 64 * n;
        const uint8_t qh = b[128 + 32 * n + l];
        const int lo = (k & 1) ? ql[l + 32] : ql[l];
        const int q = ((k < 2 ? (lo & 0x0F) : (lo >> 4)) | (((qh >> (2 * k)) & 3) << 4)) - 32;
        const int8_t sc = (int8_t)b[192 + 8 * n + l / 16 + 2 * k];
        return __fmul_rn(__fmul_rn(ld_f16(b + 208), (float)sc), (float)q);
    }
};
template <>
struct Dq<GgmlType::Q8_K> {  // d(4, f32) qs(256) bsums(32)
    static constexpr int kElems = 256, kBytes = 292;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        return __fmul_rn(ld_f32(b), (float)(int8_t)b[4 + i]);
    }
};

// ---- IQ formats ----
template <>
struct Dq<GgmlType::IQ2_XXS> {  // d(2) qs(64): per 32 values 4 grid bytes + u32 (4x7 sign bits, 4-bit scale)
    static constexpr int kElems = 256, kBytes = 66;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint8_t* p = b + 2 + 8 * ib;
        const uint32_t aux = ld_u32(p + 4);
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(aux >> 28)), 0.25f);
        const uint32_t signs = t.signs[(aux >> (7 * l)) & 127];
        return __fmul_rn(__fmul_rn(db, grid_val(t.iq2xxs[p[l]], j)), sign_of(signs, j));
    }
};
template <>
struct Dq<GgmlType::IQ2_XS> {  // d(2) qs(32 x u16: 9-bit grid index + 7-bit sign index) scales(8)
    static constexpr int kElems = 256, kBytes = 74;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint8_t sc = b[66 + ib];
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(l < 2 ? (sc & 0x0F) : (sc >> 4))), 0.25f);
        const uint32_t q = ld_u16(b + 2 + 2 * (4 * ib + l));
        return __fmul_rn(__fmul_rn(db, grid_val(t.iq2xs[q & 511], j)), sign_of(t.signs[q >> 9], j));
    }
};
template <>
struct Dq<GgmlType::IQ2_S> {  // d(2) qs(32 index bytes + 32 sign bytes) qh(8) scales(8)
    static constexpr int kElems = 256, kBytes = 82;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint8_t sc = b[74 + ib];
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(l < 2 ? (sc & 0x0F) : (sc >> 4))), 0.25f);
        const int idx = b[2 + 4 * ib + l] | (((int)b[66 + ib] << (8 - 2 * l)) & 0x300);
        const uint32_t signs = b[2 + 32 + 4 * ib + l];
        return __fmul_rn(__fmul_rn(db, grid_val(t.iq2s[idx], j)), sign_of(signs, j));
    }
};
template <>
struct Dq<GgmlType::IQ3_XXS> {  // d(2) qs(64 grid bytes) + 32 bytes of (sign bits, scale) u32s
    static constexpr int kElems = 256, kBytes = 98;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint8_t* qs = b + 2 + 8 * ib;
        const uint32_t aux = ld_u32(b + 2 + 64 + 4 * ib);
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(aux >> 28)), 0.5f);
        const uint32_t g = t.iq3xxs[qs[2 * l + (j >= 4)]];
        const uint32_t signs = t.signs[(aux >> (7 * l)) & 127];
        return __fmul_rn(__fmul_rn(db, grid_val(g, j % 4)), sign_of(signs, j));
    }
};
template <>
struct Dq<GgmlType::IQ3_S> {  // d(2) qs(64) qh(8) signs(32) scales(4)
    static constexpr int kElems = 256, kBytes = 110;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint8_t sc = b[106 + ib / 2];
        const float db = __fmul_rn(ld_f16(b), (float)(1 + 2 * ((ib % 2 == 0) ? (sc & 0x0F) : (sc >> 4))));
        const int qh = b[66 + ib];
        const uint8_t* qs = b + 2 + 8 * ib;
        const int idx = j < 4 ? (qs[2 * l] | ((qh << (8 - 2 * l)) & 256)) : (qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
        const uint32_t signs = b[74 + 4 * ib + l];
        return __fmul_rn(__fmul_rn(db, grid_val(t.iq3s[idx], j % 4)), sign_of(signs, j));
    }
};
template <>
struct Dq<GgmlType::IQ1_S> {  // d(2) qs(32) qh(8 x u16)
    static constexpr int kElems = 256, kBytes = 50;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const int qh = (int)ld_u16(b + 34 + 2 * ib);
        const float dl = __fmul_rn(ld_f16(b), (float)(2 * ((qh >> 12) & 7) + 1));
        const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
        const uint64_t e = t.iq1s[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
        return __fmul_rn(dl, __fadd_rn((float)(int8_t)(uint8_t)(e >> (8 * j)), delta));
    }
};
template <>
struct Dq<GgmlType::IQ1_M> {  // qs(32) qh(16) scales(8 = 4 x u16; the f16 scale in their top nibbles)
    static constexpr int kElems = 256, kBytes = 56;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, l = (i % 32) / 8, j = i % 8;
        const uint32_t s0 = ld_u16(b + 48), s1 = ld_u16(b + 50), s2 = ld_u16(b + 52), s3 = ld_u16(b + 54);
        const uint32_t d16 = (s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000);
        const float d = __half2float(__ushort_as_half((unsigned short)d16));
        const int s = (int)(ld_u16(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2)));
        const float dl = l < 2 ? __fmul_rn(d, (float)(2 * (s & 7) + 1)) : __fmul_rn(d, (float)(2 * ((s >> 3) & 7) + 1));
        const int nib = (b[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 0x0F;
        const uint64_t e = t.iq1s[b[4 * ib + l] | ((nib & 7) << 8)];
        const float delta = (nib & 8) ? -0.125f : 0.125f;
        return __fmul_rn(dl, __fadd_rn((float)(int8_t)(uint8_t)(e >> (8 * j)), delta));
    }
};
template <>
struct Dq<GgmlType::IQ4_XS> {  // d(2) scales_h(2) scales_l(4) qs(128)
    static constexpr int kElems = 256, kBytes = 136;
    __device__ static float value(const uint8_t* b, int i, const QuantTables& t) {
        const int ib = i / 32, w = i % 32;
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((int)(ld_u16(b + 2) >> (2 * ib)) & 3) << 4);
        const float dl = __fmul_rn(ld_f16(b), (float)(ls - 32));
        const uint8_t byte = b[8 + 16 * ib + (w % 16)];
        return __fmul_rn(dl, (float)t.iq4nl[w < 16 ? (byte & 0x0F) : (byte >> 4)]);
    }
};

// ---- ternary ----
// A TQ1_0 byte holds base-3 trits scaled by 256/243: multiplying by 3^n (mod 256) brings trit n to the top.
__device__ __forceinline__ float tq1_trit(uint8_t byte, int n) {
    const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    return (float)((int)(((uint32_t)q * 3) >> 8) - 1);  // signed: trit 0 is -1
}
template <>
struct Dq<GgmlType::TQ1_0> {  // qs(48) qh(4) d(2)
    static constexpr int kElems = 256, kBytes = 54;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        float v;
        if (i < 160) v = tq1_trit(b[i % 32], i / 32);
        else if (i < 240) v = tq1_trit(b[32 + (i - 160) % 16], (i - 160) / 16);
        else v = tq1_trit(b[48 + (i - 240) % 4], (i - 240) / 4);
        return __fmul_rn(v, ld_f16(b + 52));
    }
};
template <>
struct Dq<GgmlType::TQ2_0> {  // qs(64) d(2)
    static constexpr int kElems = 256, kBytes = 66;
    __device__ static float value(const uint8_t* b, int i, const QuantTables&) {
        const int c = i / 128, r = i % 128, l = r / 32, m = r % 32;
        return __fmul_rn((float)(((b[32 * c + m] >> (2 * l)) & 3) - 1), ld_f16(b + 64));
    }
};

// The 8 values of group gi (values 8 gi .. 8 gi + 7) of block b, each bit-identical to Dq<T>::value(b, 8 gi + j)
// (decode8 below and the staged GEMV decode through it):
// the specializations below derive the group's scale and table entries once instead of once per value
// (every block format but Q8_1, Q8_K, TQ1_0 and TQ2_0, which keep the per-value loop).
template <GgmlType T>
struct Group8 {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = Dq<T>::value(b, 8 * gi + j, t);
    }
};
template <>
struct Group8<GgmlType::Q8_0> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const float d = ld_f16(b);
        const uint8_t* q = b + 2 + 8 * gi;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn((float)(int8_t)q[j], d);
    }
};
template <>
struct Group8<GgmlType::MXFP4> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const float d = e8m0_half(b[0]);
        const uint8_t* q = b + 1 + 8 * (gi & 1);
        const bool high = gi >= 2;  // values 16..31 are the high nibbles
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn((float)t.mxfp4[high ? q[j] >> 4 : q[j] & 0x0F], d);
    }
};
template <>
struct Group8<GgmlType::Q2_K> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const int n = gi / 16, group = (gi % 16) / 4, half = (gi % 4) / 2, l0 = (gi % 2) * 8;
        const uint8_t sc = b[8 * n + 2 * group + half];
        const float dl = __fmul_rn(ld_f16(b + 80), (float)(sc & 0x0F));
        const float ml = __fmul_rn(ld_f16(b + 82), (float)(sc >> 4));
        const uint8_t* q = b + 16 + 32 * n + 16 * half + l0;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fsub_rn(__fmul_rn(dl, (float)((q[j] >> (2 * group)) & 3)), ml);
    }
};
template <>
struct Group8<GgmlType::Q3_K> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const int n = gi / 16, group = (gi % 16) / 4, half = (gi % 4) / 2, l0 = (gi % 2) * 8;
        const int js = 8 * n + 2 * group + half;  // scale index
        const uint8_t* sp = b + 96;
        const int low = js < 8 ? (sp[js] & 0x0F) : (sp[js - 8] >> 4);
        const int high = (sp[8 + js % 4] >> (2 * (js / 4))) & 3;
        const int sc = (int)(int8_t)(uint8_t)(low | (high << 4));
        const float dl = __fmul_rn(ld_f16(b + 108), (float)(sc - 32));
        const int o = 16 * half + l0;
        const uint8_t* hm = b + o;
        const uint8_t* q = b + 32 + 32 * n + o;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int hbit = (hm[j] >> (4 * n + group)) & 1;
            v[j] = __fmul_rn(dl, (float)(((q[j] >> (2 * group)) & 3) - (hbit ? 0 : 4)));
        }
    }
};
template <>
struct Group8<GgmlType::Q4_K> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const int c = gi / 8, w0 = (gi % 8) * 8, sub = 2 * c + (w0 >= 32);
        int sc, m;
        k4_scale_min(sub, b + 4, &sc, &m);
        const float d1 = __fmul_rn(ld_f16(b), (float)sc), m1 = __fmul_rn(ld_f16(b + 2), (float)m);
        const uint8_t* q = b + 16 + 32 * c + (w0 % 32);
        const bool high = w0 >= 32;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fsub_rn(__fmul_rn(d1, (float)(high ? q[j] >> 4 : q[j] & 0x0F)), m1);
    }
};
template <>
struct Group8<GgmlType::Q6_K> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const int n = gi / 16, k = (gi % 16) / 4, l0 = (gi % 4) * 8;
        const uint8_t* ql = b + 64 * n + ((k & 1) ? 32 : 0) + l0;
        const uint8_t* qh = b + 128 + 32 * n + l0;
        const int8_t sc = (int8_t)b[192 + 8 * n + l0 / 16 + 2 * k];
        const float d = __fmul_rn(ld_f16(b + 208), (float)sc);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int lo = ql[j];
            const int q = ((k < 2 ? (lo & 0x0F) : (lo >> 4)) | (((qh[j] >> (2 * k)) & 3) << 4)) - 32;
            v[j] = __fmul_rn(d, (float)q);
        }
    }
};
template <>
struct Group8<GgmlType::IQ2_XXS> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint8_t* p = b + 2 + 8 * ib;
        const uint32_t aux = ld_u32(p + 4);
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(aux >> 28)), 0.25f);
        const uint32_t signs = t.signs[(aux >> (7 * l)) & 127];
        const uint64_t e = t.iq2xxs[p[l]];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(db, grid_val(e, j)), sign_of(signs, j));
    }
};

// The other formats: the same per-value arithmetic as their Dq<> above, with the group's scale, grid entry
// and sign byte read once.
template <>
struct Group8<GgmlType::Q4_0> {  // groups 0, 1: low nibbles of qs[8gi ..]; 2, 3: high nibbles of qs[8(gi - 2) ..]
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const float d = ld_f16(b);
        const uint8_t* q = b + 2 + 8 * (gi & 1);
        const bool high = gi >= 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn((float)((high ? q[j] >> 4 : q[j] & 0x0F) - 8), d);
    }
};
template <>
struct Group8<GgmlType::Q4_1> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint8_t* q = b + 4 + 8 * (gi & 1);
        const bool high = gi >= 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fadd_rn(__fmul_rn((float)(high ? q[j] >> 4 : q[j] & 0x0F), d), m);
    }
};
template <>
struct Group8<GgmlType::Q5_0> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const float d = ld_f16(b);
        const uint32_t qh = ld_u32(b + 2) >> (8 * gi);  // bit j: the fifth bit of value 8gi + j
        const uint8_t* q = b + 6 + 8 * (gi & 1);
        const bool high = gi >= 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int qv = (high ? q[j] >> 4 : q[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            v[j] = __fmul_rn((float)(qv - 16), d);
        }
    }
};
template <>
struct Group8<GgmlType::Q5_1> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const uint32_t qh = ld_u32(b + 4) >> (8 * gi);
        const uint8_t* q = b + 8 + 8 * (gi & 1);
        const bool high = gi >= 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int qv = (high ? q[j] >> 4 : q[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            v[j] = __fadd_rn(__fmul_rn((float)qv, d), m);
        }
    }
};
template <>
struct Group8<GgmlType::IQ4_NL> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const float d = ld_f16(b);
        const uint8_t* q = b + 2 + 8 * (gi & 1);
        const bool high = gi >= 2;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(d, (float)t.iq4nl[high ? q[j] >> 4 : q[j] & 0x0F]);
    }
};
template <>
struct Group8<GgmlType::IQ4_XS> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, w0 = (gi % 4) * 8;
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((int)(ld_u16(b + 2) >> (2 * ib)) & 3) << 4);
        const float dl = __fmul_rn(ld_f16(b), (float)(ls - 32));
        const uint8_t* q = b + 8 + 16 * ib + (w0 % 16);
        const bool high = w0 >= 16;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(dl, (float)t.iq4nl[high ? q[j] >> 4 : q[j] & 0x0F]);
    }
};
template <>
struct Group8<GgmlType::Q5_K> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables&) {
        const int c = gi / 8, w0 = (gi % 8) * 8, sub = 2 * c + (w0 >= 32), l0 = w0 % 32;
        int sc, m;
        k4_scale_min(sub, b + 4, &sc, &m);
        const float d1 = __fmul_rn(ld_f16(b), (float)sc), m1 = __fmul_rn(ld_f16(b + 2), (float)m);
        const uint8_t* q = b + 48 + 32 * c + l0;
        const uint8_t* hb = b + 16 + l0;
        const bool high = w0 >= 32;
        const int mask = (high ? 2 : 1) << (2 * c);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int qv = (high ? q[j] >> 4 : q[j] & 0x0F) + ((hb[j] & mask) ? 16 : 0);
            v[j] = __fsub_rn(__fmul_rn(d1, (float)qv), m1);
        }
    }
};
template <>
struct Group8<GgmlType::IQ2_XS> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint8_t sc = b[66 + ib];
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(l < 2 ? (sc & 0x0F) : (sc >> 4))), 0.25f);
        const uint32_t q = ld_u16(b + 2 + 2 * gi);
        const uint64_t e = t.iq2xs[q & 511];
        const uint32_t signs = t.signs[q >> 9];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(db, grid_val(e, j)), sign_of(signs, j));
    }
};
template <>
struct Group8<GgmlType::IQ2_S> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint8_t sc = b[74 + ib];
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(l < 2 ? (sc & 0x0F) : (sc >> 4))), 0.25f);
        const int idx = b[2 + gi] | (((int)b[66 + ib] << (8 - 2 * l)) & 0x300);
        const uint64_t e = t.iq2s[idx];
        const uint32_t signs = b[2 + 32 + gi];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(db, grid_val(e, j)), sign_of(signs, j));
    }
};
template <>
struct Group8<GgmlType::IQ3_XXS> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint8_t* qs = b + 2 + 8 * ib;
        const uint32_t aux = ld_u32(b + 2 + 64 + 4 * ib);
        const float db = __fmul_rn(__fmul_rn(ld_f16(b), 0.5f + (float)(aux >> 28)), 0.5f);
        const uint32_t g[2] = {t.iq3xxs[qs[2 * l]], t.iq3xxs[qs[2 * l + 1]]};
        const uint32_t signs = t.signs[(aux >> (7 * l)) & 127];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(db, grid_val(g[j / 4], j % 4)), sign_of(signs, j));
    }
};
template <>
struct Group8<GgmlType::IQ3_S> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint8_t sc = b[106 + ib / 2];
        const float db = __fmul_rn(ld_f16(b), (float)(1 + 2 * ((ib % 2 == 0) ? (sc & 0x0F) : (sc >> 4))));
        const int qh = b[66 + ib];
        const uint8_t* qs = b + 2 + 8 * ib;
        const uint32_t g[2] = {t.iq3s[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)],
                               t.iq3s[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)]};
        const uint32_t signs = b[74 + 4 * ib + l];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(db, grid_val(g[j / 4], j % 4)), sign_of(signs, j));
    }
};
template <>
struct Group8<GgmlType::IQ1_S> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const int qh = (int)ld_u16(b + 34 + 2 * ib);
        const float dl = __fmul_rn(ld_f16(b), (float)(2 * ((qh >> 12) & 7) + 1));
        const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
        const uint64_t e = t.iq1s[b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(dl, __fadd_rn((float)(int8_t)(uint8_t)(e >> (8 * j)), delta));
    }
};
template <>
struct Group8<GgmlType::IQ1_M> {
    __device__ static void decode(const uint8_t* b, int gi, float* v, const QuantTables& t) {
        const int ib = gi / 4, l = gi % 4;
        const uint32_t s0 = ld_u16(b + 48), s1 = ld_u16(b + 50), s2 = ld_u16(b + 52), s3 = ld_u16(b + 54);
        const uint32_t d16 = (s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000);
        const float d = __half2float(__ushort_as_half((unsigned short)d16));
        const int s = (int)(ld_u16(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2)));
        const float dl = l < 2 ? __fmul_rn(d, (float)(2 * (s & 7) + 1)) : __fmul_rn(d, (float)(2 * ((s >> 3) & 7) + 1));
        const int nib = (b[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 0x0F;
        const uint64_t e = t.iq1s[b[4 * ib + l] | ((nib & 7) << 8)];
        const float delta = (nib & 8) ? -0.125f : 0.125f;
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(dl, __fadd_rn((float)(int8_t)(uint8_t)(e >> (8 * j)), delta));
    }
};

// Values [8g, 8g+8) of a row of K values (K a multiple of the block size for block formats; plain types
// may end mid-group, the missing values read as 0).
template <GgmlType T>
__device__ __forceinline__ void decode8(const uint8_t* row, int64_t g, int64_t K, float* v, const QuantTables& t) {
    using D = Dq<T>;
    if constexpr (D::kElems == 1) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int64_t k = 8 * g + j;
            v[j] = k < K ? D::value(row + k * D::kBytes, 0, t) : 0.0f;
        }
    } else {
        constexpr int kGroups = D::kElems / 8;
        const uint8_t* b = row + (g / kGroups) * D::kBytes;
        Group8<T>::decode(b, (int)(g % kGroups), v, t);
    }
}

template <GgmlType T>
struct TypeTag {
    static constexpr GgmlType type = T;
};

// Call f(TypeTag<T>{}) for the weight format t: the one place a runtime type becomes a template parameter.
// Integer types (I8..I64) are not weight formats and abort, like an unknown id.
template <class F>
void dispatch_weight_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::F32: return f(TypeTag<GgmlType::F32>{});
        case GgmlType::F16: return f(TypeTag<GgmlType::F16>{});
        case GgmlType::BF16: return f(TypeTag<GgmlType::BF16>{});
        case GgmlType::F64: return f(TypeTag<GgmlType::F64>{});
        case GgmlType::Q4_0: return f(TypeTag<GgmlType::Q4_0>{});
        case GgmlType::Q4_1: return f(TypeTag<GgmlType::Q4_1>{});
        case GgmlType::Q5_0: return f(TypeTag<GgmlType::Q5_0>{});
        case GgmlType::Q5_1: return f(TypeTag<GgmlType::Q5_1>{});
        case GgmlType::Q8_0: return f(TypeTag<GgmlType::Q8_0>{});
        case GgmlType::Q8_1: return f(TypeTag<GgmlType::Q8_1>{});
        case GgmlType::MXFP4: return f(TypeTag<GgmlType::MXFP4>{});
        case GgmlType::IQ4_NL: return f(TypeTag<GgmlType::IQ4_NL>{});
        case GgmlType::Q2_K: return f(TypeTag<GgmlType::Q2_K>{});
        case GgmlType::Q3_K: return f(TypeTag<GgmlType::Q3_K>{});
        case GgmlType::Q4_K: return f(TypeTag<GgmlType::Q4_K>{});
        case GgmlType::Q5_K: return f(TypeTag<GgmlType::Q5_K>{});
        case GgmlType::Q6_K: return f(TypeTag<GgmlType::Q6_K>{});
        case GgmlType::Q8_K: return f(TypeTag<GgmlType::Q8_K>{});
        case GgmlType::IQ2_XXS: return f(TypeTag<GgmlType::IQ2_XXS>{});
        case GgmlType::IQ2_XS: return f(TypeTag<GgmlType::IQ2_XS>{});
        case GgmlType::IQ2_S: return f(TypeTag<GgmlType::IQ2_S>{});
        case GgmlType::IQ3_XXS: return f(TypeTag<GgmlType::IQ3_XXS>{});
        case GgmlType::IQ3_S: return f(TypeTag<GgmlType::IQ3_S>{});
        case GgmlType::IQ1_S: return f(TypeTag<GgmlType::IQ1_S>{});
        case GgmlType::IQ1_M: return f(TypeTag<GgmlType::IQ1_M>{});
        case GgmlType::IQ4_XS: return f(TypeTag<GgmlType::IQ4_XS>{});
        case GgmlType::TQ1_0: return f(TypeTag<GgmlType::TQ1_0>{});
        case GgmlType::TQ2_0: return f(TypeTag<GgmlType::TQ2_0>{});
        default: break;
    }
    DSV4_CHECK_MSG(false, "CUDA backend: %s is not a weight format", ggml_type_name(t).data());
}

}  // namespace dsv4::cuda
