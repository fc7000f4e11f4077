// The 8-bit float codes of official DeepSeek checkpoints: FP8 E4M3 (fn: no infinities, 0x7f/0xff NaN), the
// E8M0 power-of-two scale byte (2^(b-127), 0xff NaN) and FP4 E2M1 codes. Every decode is exact in f32.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/fp16.h"

namespace dsv4 {

inline float fp8_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    const uint32_t exp = (b >> 3) & 0xfu;
    const uint32_t man = b & 0x7u;
    if (exp == 0xf && man == 0x7) return f32_from_bits(sign | 0x7fc00000u);  // NaN
    if (exp == 0) return f32_from_bits(f32_bits((float)man * 0.001953125f) | sign);  // man * 2^-9
    return f32_from_bits(sign | ((exp + 120) << 23) | (man << 20));
}

// 2^(b-127) as f32 (b = 0 gives the subnormal 2^-127); NaN for 0xff.
inline float e8m0_to_f32(uint8_t b) {
    if (b == 0xff) return f32_from_bits(0x7fc00000u);
    if (b == 0) return f32_from_bits(0x00400000u);
    return f32_from_bits((uint32_t)b << 23);
}

// E2M1 code (0..15) as f32: 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline float fp4_e2m1_to_f32(uint8_t code) {
    static constexpr float kValues[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    return kValues[code & 0xf];
}

}  // namespace dsv4
