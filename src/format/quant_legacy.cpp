// Legacy 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1 decode): dequantizers as ggml
// computes them, quantizers that reproduce llama.cpp's numpy reference (gguf-py quants.py) bit for bit.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "format/quant_codecs.h"

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {
namespace {

constexpr int kHalf = kQK32 / 2;

// The reference picks the signed value of largest magnitude (first one on ties) as the scale anchor.
float signed_absmax(const float* x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK32; ++j) {
        const float a = std::fabs(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    return max;
}

void min_max(const float* x, float* mn, float* mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK32; ++j) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo;
    *mx = hi;
}

// Symmetric formats (Q4_0, Q5_0): numpy multiplies in float64, adds the offset+0.5, rounds that sum to
// float32 and truncates. The product of two floats is exact in double, so this is x*id + off in one
// rounding to double, then one to float -- the "depends on FMA" rounding of the C reference.
inline int trunc_shifted(float x, float id, double offset_half) {
    const float s = (float)((double)x * (double)id + offset_half);
    return (int)std::trunc(s);
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Quantize one symmetric block to codes 0..2*half-1 (Q4_0: half = 8, Q5_0: half = 16). Returns f16 d.
uint16_t quant_symmetric(const float* x, int half, uint8_t* q) {
    const float max = signed_absmax(x);
    const float d = max / (float)-half;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int j = 0; j < kQK32; ++j) q[j] = (uint8_t)clamp_int(trunc_shifted(x[j], id, half + 0.5), 0, 2 * half - 1);
    return f32_to_f16(d);
}

// Quantize one min/max block to codes 0..levels (Q4_1: 15, Q5_1: 31), all in float32 as numpy does.
void quant_affine(const float* x, int levels, uint8_t* q, uint16_t* d16, uint16_t* m16) {
    float mn, mx;
    min_max(x, &mn, &mx);
    const float d = (mx - mn) / (float)levels;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int j = 0; j < kQK32; ++j) {
        const float s = (x[j] - mn) * id + 0.5f;
        q[j] = (uint8_t)clamp_int((int)std::trunc(s), 0, levels);
    }
    *d16 = f32_to_f16(d);
    *m16 = f32_to_f16(mn);
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < kHalf; ++j) qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + kHalf] << 4));
}

void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
    uint32_t h = 0;
    for (int j = 0; j < kQK32; ++j) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    std::memcpy(qh, &h, 4);  // little-endian, as in the file
}

inline uint32_t load_qh(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return h;
}

}  // namespace

void dequant_q4_0(const BlockQ4_0* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        DSV4_QUANT_VECTOR_LOOP
        for (int j = 0; j < kHalf; ++j) {
            y[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + kHalf] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const BlockQ4_1* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        DSV4_QUANT_VECTOR_LOOP
        for (int j = 0; j < kHalf; ++j) {
            y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[j + kHalf] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void dequant_q5_0(const BlockQ5_0* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < kHalf; ++j) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + kHalf)) & 1) << 4;
            y[j] = (float)(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + kHalf] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dequant_q5_1(const BlockQ5_1* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < kHalf; ++j) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + kHalf)) & 1) << 4;
            y[j] = (float)((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + kHalf] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void dequant_q8_0(const BlockQ8_0* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK32; ++j) y[j] = (float)x[i].qs[j] * d;
    }
}

void dequant_q8_1(const BlockQ8_1* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK32; ++j) y[j] = (float)x[i].qs[j] * d;
    }
}

void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
    uint8_t q[kQK32];
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        y[i].d = quant_symmetric(x, 8, q);
        pack_nibbles(q, y[i].qs);
    }
}

void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
    uint8_t q[kQK32];
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        y[i].d = quant_symmetric(x, 16, q);
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

void quant_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
    uint8_t q[kQK32];
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        quant_affine(x, 15, q, &y[i].d, &y[i].m);
        pack_nibbles(q, y[i].qs);
    }
}

void quant_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
    uint8_t q[kQK32];
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        quant_affine(x, 31, q, &y[i].d, &y[i].m);
        pack_fifth_bits(q, y[i].qh);
        pack_nibbles(q, y[i].qs);
    }
}

// Q8_0: d = amax/127, codes = round-half-away(x * (1/d)) -- C roundf, which numpy emulates.
void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        float amax = 0.0f;
        for (int j = 0; j < kQK32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d == 0.0f ? 0.0f : 1.0f / d;
        for (int j = 0; j < kQK32; ++j) y[i].qs[j] = (int8_t)std::round(x[j] * id);
        y[i].d = f32_to_f16(d);
    }
}

}  // namespace dsv4::quant
