// Internal to src/format: decode 16 bytes of packed 4-bit codes through a 16-entry int8 table -- the
// inner step of MXFP4, IQ4_NL and IQ4_XS (low nibbles are values 0..15, high nibbles 16..31).
#pragma once

#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace dsv4::quant {

// y[j] = table[code_j] * scale for 32 values. Every product of an int8 level and an f16 or power-of-two
// scale is exact, so the vector path equals the scalar one bit for bit.
inline void decode_nibbles_lut(const uint8_t* qs, const int8_t* table, float scale, float* y) {
#if defined(__AVX2__)
    // A byte shuffle is a 16-entry table lookup; the compiler cannot derive it from the scalar loop.
    const __m128i tbl = _mm_loadu_si128((const __m128i*)table);
    const __m128i bytes = _mm_loadu_si128((const __m128i*)qs);
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(tbl, _mm_and_si128(bytes, mask));
    const __m128i hi = _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
    const __m256 d = _mm256_set1_ps(scale);
    auto store8 = [&](__m128i v8, float* out) {
        _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v8)), d));
    };
    store8(lo, y);
    store8(_mm_srli_si128(lo, 8), y + 8);
    store8(hi, y + 16);
    store8(_mm_srli_si128(hi, 8), y + 24);
#else
    for (int j = 0; j < 16; ++j) {
        y[j] = (float)table[qs[j] & 0x0F] * scale;
        y[j + 16] = (float)table[qs[j] >> 4] * scale;
    }
#endif
}

}  // namespace dsv4::quant
