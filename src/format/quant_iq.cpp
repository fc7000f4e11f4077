// IQ decoders (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS): each group of 8 (or
// 4) values is a point of a fixed grid chosen by index, times a sub-block scale, with sign bits or a
// shift. Arithmetic order follows ggml's dequantize_row_*, so results are bit-identical.
#include <cstring>

#include "core/fp16.h"
#include "format/quant_codecs.h"
#include "format/quant_nibble_lut.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {
namespace {

// Grid entries pack one value per byte, lowest byte first (the layout ggml reads through a byte pointer).
// 8 values = scale * grid point, negated where the sign byte has a bit set.
inline void emit8(float db, uint64_t entry, uint8_t signs, float* __restrict y) {
#if defined(__AVX2__)
    // The scalar loop below does not vectorise (8 values, a byte-to-float widening); spelled out it is
    // a widen, a convert, a multiply and a sign-bit xor (negation is exact, so this equals * -1).
    const __m256 g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)entry)));
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(signs), bit), bit);
    const __m256 flip = _mm256_castsi256_ps(_mm256_and_si256(set, _mm256_set1_epi32((int)0x80000000u)));
    _mm256_storeu_ps(y, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(db), g), flip));
#else
    for (int j = 0; j < 8; ++j) y[j] = db * (float)(uint8_t)(entry >> (8 * j)) * ((signs >> j) & 1 ? -1.f : 1.f);
#endif
}

// Two 4-value grid points (IQ3) under one sign byte.
inline void emit4x2(float db, uint32_t g1, uint32_t g2, uint8_t signs, float* __restrict y) {
    const uint64_t entry = g1 | ((uint64_t)g2 << 32);
    emit8(db, entry, signs, y);
}

// 8 ternary grid values shifted by +-delta, times the scale (IQ1_S / IQ1_M).
inline void emit_iq1(float dl, uint64_t entry, float delta, float* __restrict y) {
#if defined(__AVX2__)
    const __m256 g = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128((long long)entry)));
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_set1_ps(dl), _mm256_add_ps(g, _mm256_set1_ps(delta))));
#else
    for (int j = 0; j < 8; ++j) y[j] = dl * ((float)(int8_t)(uint8_t)(entry >> (8 * j)) + delta);
#endif
}

inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

}  // namespace

void dequant_iq2_xxs(const BlockIq2Xxs* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        for (int ib = 0; ib < kQKK / 32; ++ib) {
            // 8 bytes per 32 values: 4 grid indices, then a u32 of 4x7 sign bits and a 4-bit scale on top.
            const uint8_t* p = (const uint8_t*)(x[i].qs + 4 * ib);
            const uint32_t aux = load_u32(p + 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l, y += 8) emit8(db, kIq2xxsGrid[p[l]], kSigns.v[(aux >> (7 * l)) & 127], y);
        }
    }
}

void dequant_iq2_xs(const BlockIq2Xs* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        for (int ib = 0; ib < kQKK / 32; ++ib) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 0x0F)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint16_t q = x[i].qs[4 * ib + l];
                emit8(db[l / 2], kIq2xsGrid[q & 511], kSigns.v[q >> 9], y);
            }
        }
    }
}

void dequant_iq2_s(const BlockIq2S* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* qs = x[i].qs;
        const uint8_t* signs = x[i].qs + kQKK / 8;
        for (int ib = 0; ib < kQKK / 32; ++ib, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[ib] & 0x0F)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; ++l, y += 8) {
                const int idx = qs[l] | (((int)x[i].qh[ib] << (8 - 2 * l)) & 0x300);
                emit8(db[l / 2], kIq2sGrid[idx], signs[l], y);
            }
        }
    }
}

void dequant_iq3_xxs(const BlockIq3Xxs* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* qs = x[i].qs;
        const uint8_t* scales_and_signs = x[i].qs + kQKK / 4;
        for (int ib = 0; ib < kQKK / 32; ++ib, qs += 8) {
            const uint32_t aux = load_u32(scales_and_signs + 4 * ib);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l, y += 8) {
                emit4x2(db, kIq3xxsGrid[qs[2 * l]], kIq3xxsGrid[qs[2 * l + 1]], kSigns.v[(aux >> (7 * l)) & 127], y);
            }
        }
    }
}

void dequant_iq3_s(const BlockIq3S* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* qs = x[i].qs;
        const uint8_t* signs = x[i].signs;
        // 32 values use 8 grid indices; bit k of their qh byte is the 9th bit of index k.
        for (int ib = 0; ib < kQKK / 32; ++ib, qs += 8, signs += 4) {
            const uint8_t sc = x[i].scales[ib / 2];
            const float db = d * (float)(1 + 2 * ((ib % 2 == 0) ? (sc & 0x0F) : (sc >> 4)));
            const int qh = x[i].qh[ib];
            for (int l = 0; l < 4; ++l, y += 8) {
                const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
                const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
                emit4x2(db, kIq3sGrid[i1], kIq3sGrid[i2], signs[l], y);
            }
        }
    }
}

void dequant_iq1_s(const BlockIq1S* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* qs = x[i].qs;
        // Per 32 values, qh holds four 3-bit index tops, a 3-bit scale and the sign of the shift.
        for (int ib = 0; ib < kQKK / 32; ++ib, qs += 4) {
            const int qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000) ? -kIq1Delta : kIq1Delta;
            for (int l = 0; l < 4; ++l, y += 8) emit_iq1(dl, kIq1sGrid[qs[l] | (((qh >> (3 * l)) & 7) << 8)], delta, y);
        }
    }
}

void dequant_iq1_m(const BlockIq1M* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        uint16_t sc[4];
        std::memcpy(sc, x[i].scales, sizeof sc);
        // The f16 super-scale is assembled from the top nibble of each of the four scale words.
        const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = f16_to_f32(d16);
        const uint8_t* qs = x[i].qs;
        const uint8_t* qh = x[i].qh;
        for (int ib = 0; ib < kQKK / 32; ++ib, qs += 4, qh += 2) {
            const int s = sc[ib / 2] >> (6 * (ib % 2));
            const float dl1 = d * (float)(2 * (s & 7) + 1);
            const float dl2 = d * (float)(2 * ((s >> 3) & 7) + 1);
            // Each qh byte serves two groups of 8: low nibble for the first, high for the second; in
            // each nibble bits 0..2 are index bits 8..10 and bit 3 the sign of the shift.
            for (int l = 0; l < 4; ++l, y += 8) {
                const int nib = (qh[l / 2] >> (4 * (l % 2))) & 0x0F;
                const int idx = qs[l] | ((nib & 7) << 8);
                const float delta = (nib & 8) ? -kIq1Delta : kIq1Delta;
                emit_iq1(l < 2 ? dl1 : dl2, kIq1sGrid[idx], delta, y);
            }
        }
    }
}

void dequant_iq4_nl(const BlockIq4Nl* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK32) decode_nibbles_lut(x[i].qs, kIq4nlValues, f16_to_f32(x[i].d), y);
}

void dequant_iq4_xs(const BlockIq4Xs* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        for (int ib = 0; ib < kQKK / 32; ++ib, y += 32) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            decode_nibbles_lut(x[i].qs + 16 * ib, kIq4nlValues, d * (float)(ls - 32), y);
        }
    }
}

}  // namespace dsv4::quant
