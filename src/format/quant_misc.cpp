// Plain element types (F32, F16, BF16, F64, I8..I64) and the small odd formats: MXFP4 (decode and the
// numpy reference's encoder) and the ternary TQ1_0 / TQ2_0 decoders.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "format/quant_codecs.h"
#include "format/quant_nibble_lut.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {

void dequant_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, (size_t)n * sizeof(float)); }

void dequant_f16(const uint16_t* x, float* y, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    // The hardware conversion is exact for every half value, like the scalar one below.
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i*)(x + i));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void dequant_bf16(const uint16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

void dequant_f64(const double* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = (float)x[i];
}

void dequant_i8(const int8_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = (float)x[i];
}

void dequant_i16(const int16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = (float)x[i];
}

void dequant_i32(const int32_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = (float)x[i];
}

void dequant_i64(const int64_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = (float)x[i];
}

void quant_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, (size_t)n * sizeof(float)); }

void quant_f16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void quant_bf16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// ---- MXFP4 ----------------------------------------------------------------------------------------

void dequant_mxfp4(const BlockMxfp4* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) decode_nibbles_lut(x[i].qs, kMxfp4Values, e8m0_to_f32_half(x[i].e), y);
}

// The numpy reference: e = floor(log2(amax)) - 2 + 127 (in float32, so log2 may round up to the next
// integer just below a power of two, and the encoder must use the same float log2), then each value
// takes the first code of least |d*v - x|, so +0 wins over -0.
void quant_mxfp4(const float* x, BlockMxfp4* y, int64_t nb) {
    constexpr int half = kQK32 / 2;
    for (int64_t i = 0; i < nb; ++i, x += kQK32) {
        float amax = 0.0f;
        for (int j = 0; j < kQK32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        // Out-of-range exponents wrap like numpy's float -> uint8 cast on x86; unreachable for finite
        // weights above 2^-125.
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(std::floor(std::log2(amax)) - 2.0f + 127.0f) : 0;
        const float d = e8m0_to_f32_half(e);
        uint8_t q[kQK32];
        for (int j = 0; j < kQK32; ++j) {
            int best = 0;
            float best_err = std::fabs(d * (float)kMxfp4Values[0] - x[j]);
            for (int k = 1; k < 16; ++k) {
                const float err = std::fabs(d * (float)kMxfp4Values[k] - x[j]);
                if (err < best_err) {
                    best_err = err;
                    best = k;
                }
            }
            q[j] = (uint8_t)best;
        }
        y[i].e = e;
        for (int j = 0; j < half; ++j) y[i].qs[j] = (uint8_t)(q[j] | (q[j + half] << 4));
    }
}

// ---- ternary -------------------------------------------------------------------------------------

// A TQ1_0 byte holds trits in base 3 scaled by 256/243: multiplying by 3^n (mod 256) brings trit n to
// the top, and (b * 3) >> 8 reads it.
namespace {
inline float trit(uint8_t b, uint8_t pow3) {
    const uint8_t q = (uint8_t)(b * pow3);
    return (float)((((uint16_t)q * 3) >> 8) - 1);
}
}  // namespace

void dequant_tq1_0(const BlockTq1_0* __restrict x, float* __restrict y, int64_t nb) {
    constexpr uint8_t pow3[5] = {1, 3, 9, 27, 81};
    constexpr int qs_main = sizeof(x->qs) - sizeof(x->qs) % 32;  // 32 bytes, then a tail of 16
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        for (int n = 0; n < 5; ++n) {
            for (int m = 0; m < 32; ++m) *y++ = trit(x[i].qs[m], pow3[n]) * d;
        }
        for (int n = 0; n < 5; ++n) {
            for (int m = 0; m < 16; ++m) *y++ = trit(x[i].qs[qs_main + m], pow3[n]) * d;
        }
        for (int n = 0; n < 4; ++n) {
            for (int m = 0; m < (int)sizeof(x->qh); ++m) *y++ = trit(x[i].qh[m], pow3[n]) * d;
        }
    }
}

void dequant_tq2_0(const BlockTq2_0* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < (int)sizeof(x->qs); j += 32) {
            for (int l = 0; l < 4; ++l) {
                for (int m = 0; m < 32; ++m) *y++ = (float)(((x[i].qs[j + m] >> (2 * l)) & 3) - 1) * d;
            }
        }
    }
}

}  // namespace dsv4::quant
