// Internal to src/format: the packed sub-block scale layouts shared by the K-quant decoders and encoders.
#pragma once

#include <cstdint>
#include <cstring>

namespace dsv4::quant {

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins in 12 bytes. Bytes 0..3 hold scales 0..3 and bytes
// 4..7 mins 0..3 in their low 6 bits; scales/mins 4..7 keep their low nibbles in bytes 8..11 and their
// top 2 bits in the spare top bits of bytes 0..3 / 4..7.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Q3_K: 16 six-bit scales (stored +32) in 12 bytes. Bytes 0..7 hold the low nibbles (scales 0..7 in the
// low halves, 8..15 in the high halves); bytes 8..11 hold the 2-bit tops, scale j at bits 2*(j/4) of
// byte 8 + j%4.
inline void unpack_q3_k_scales(const uint8_t* packed, int8_t* scales) {
    for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (packed[j] & 0x0F) : (packed[j - 8] >> 4);
        const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        scales[j] = (int8_t)(low | (high << 4));
    }
}

}  // namespace dsv4::quant
