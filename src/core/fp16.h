// Scalar conversions between f32 and the 16-bit float formats (IEEE half, bfloat16), exact and branch-light.
#pragma once

#include <cstdint>
#include <cstring>

namespace dsv4 {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// IEEE binary16 -> f32, exact for every input (subnormals, inf, nan).
inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: man * 2^-24
        float v = (float)man * 5.9604644775390625e-08f;
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

// f32 -> IEEE binary16 with round-to-nearest-even (matches numpy's astype(float16)).
inline uint16_t f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));  // inf/nan
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to inf
    if (ax < 0x38800000u) {
        // subnormal or zero in half: value / 2^-24, rounded to nearest even
        float v = f32_from_bits(ax) * 16777216.0f;  // exact scaling by 2^24
        // round half to even via float arithmetic on integers < 2^11
        uint32_t i = (uint32_t)v;
        float frac = v - (float)i;
        if (frac > 0.5f || (frac == 0.5f && (i & 1u))) i++;
        return (uint16_t)(sign | i);
    }
    uint32_t mant = ax & 0x7fffffu;
    uint32_t exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

// f32 -> bf16 with round-to-nearest-even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

// Round an f32 to the nearest bf16 value, returned as f32.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace dsv4
