// Byte layouts of the ggml block formats, exactly as ggml writes them into GGUF files (ggml-common.h).
// f16 scales are kept as raw uint16_t bits and widened with core/fp16.h. ggml_type.cpp checks every size
// against the traits table with a static_assert, so a layout typo cannot compile.
//
// Alignment: every struct with a uint16_t/float member has an even (or 4-byte) size, so the rows of a
// tensor whose data starts 32-byte aligned (GGUF's default) keep every block suitably aligned.
#pragma once

#include <cstdint>

namespace dsv4 {

inline constexpr int kQK32 = 32;   // values per block of the legacy formats, IQ4_NL and MXFP4
inline constexpr int kQKK = 256;   // values per super-block of the K, IQ and TQ formats

// ---- legacy formats: 32 values, one scale (and min) per block -------------------------------------

struct BlockQ4_0 {  // x = d * (q - 8)
    uint16_t d;
    uint8_t qs[kQK32 / 2];  // low nibble: value j, high nibble: value j + 16
};

struct BlockQ4_1 {  // x = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQK32 / 2];
};

struct BlockQ5_0 {  // x = d * (q - 16); bit 4 of value j is bit j of qh
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[kQK32 / 2];
};

struct BlockQ5_1 {  // x = d * q + m
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQK32 / 2];
};

struct BlockQ8_0 {  // x = d * q
    uint16_t d;
    int8_t qs[kQK32];
};

struct BlockQ8_1 {  // x = d * q; s = d * sum(q) (used by dot products only)
    uint16_t d;
    uint16_t s;
    int8_t qs[kQK32];
};

struct BlockMxfp4 {  // x = 2^(e-128) * kMxfp4Values[q] (values stored doubled, scale halved)
    uint8_t e;               // E8M0 shared exponent
    uint8_t qs[kQK32 / 2];   // E2M1 codes: low nibble value j, high nibble value j + 16
};

// ---- K formats: 256 values in sub-blocks of 16 or 32 with quantized sub-scales --------------------

struct BlockQ2K {  // x = d * sc * q - dmin * m over 16 sub-blocks of 16
    uint8_t scales[kQKK / 16];  // low nibble: scale, high nibble: min
    uint8_t qs[kQKK / 4];       // 2-bit quants
    uint16_t d;
    uint16_t dmin;
};

struct BlockQ3K {  // x = d * (sc - 32) * (q - 4 * !hbit) over 16 sub-blocks of 16
    uint8_t hmask[kQKK / 8];  // high bit of each quant
    uint8_t qs[kQKK / 4];     // low 2 bits
    uint8_t scales[12];       // 16 six-bit scales
    uint16_t d;
};

struct BlockQ4K {  // x = d * sc * q - dmin * m over 8 sub-blocks of 32
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];     // 8 six-bit scales and 8 six-bit mins
    uint8_t qs[kQKK / 2];   // 4-bit quants
};

struct BlockQ5K {  // as Q4_K with a fifth bit per quant
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[kQKK / 8];
    uint8_t qs[kQKK / 2];
};

struct BlockQ6K {  // x = d * sc * (q - 32) over 16 sub-blocks of 16
    uint8_t ql[kQKK / 2];  // low 4 bits
    uint8_t qh[kQKK / 4];  // high 2 bits
    int8_t scales[kQKK / 16];
    uint16_t d;
};

struct BlockQ8K {  // x = d * q; intermediate format of ggml's K dot products
    float d;
    int8_t qs[kQKK];
    int16_t bsums[kQKK / 16];
};

// ---- IQ formats: 8- or 4-value grid points selected by index, plus sign bits ----------------------

struct BlockIq2Xxs {  // per 32 values: 4 grid bytes, then 4x7 sign bits + 4-bit scale in one u32
    uint16_t d;
    uint16_t qs[kQKK / 8];
};

struct BlockIq2Xs {  // per 8 values: 9-bit grid index + 7-bit sign index
    uint16_t d;
    uint16_t qs[kQKK / 8];
    uint8_t scales[kQKK / 32];
};

struct BlockIq2S {  // 10-bit grid index (qs low 8 bits + 2 bits of qh), explicit sign bytes
    uint16_t d;
    uint8_t qs[kQKK / 4];  // first half: grid index low bits, second half: signs
    uint8_t qh[kQKK / 32];
    uint8_t scales[kQKK / 32];
};

struct BlockIq3Xxs {  // 64 grid bytes (4 values each), then per 32 values one u32 of signs + scale
    uint16_t d;
    uint8_t qs[3 * kQKK / 8];
};

struct BlockIq3S {  // 9-bit grid index (qs + one qh bit), explicit signs, 4-bit scales
    uint16_t d;
    uint8_t qs[kQKK / 4];
    uint8_t qh[kQKK / 32];
    uint8_t signs[kQKK / 8];
    uint8_t scales[kQKK / 64];
};

struct BlockIq1S {  // 11-bit index into a ternary grid; qh holds index high bits, scale, delta sign
    uint16_t d;
    uint8_t qs[kQKK / 8];
    uint16_t qh[kQKK / 32];
};

struct BlockIq1M {  // no d field: the f16 scale is spread over the top nibbles of the 4 scale words
    uint8_t qs[kQKK / 8];
    uint8_t qh[kQKK / 16];
    uint8_t scales[kQKK / 32];
};

struct BlockIq4Nl {  // x = d * kIq4nlValues[q]
    uint16_t d;
    uint8_t qs[kQK32 / 2];
};

struct BlockIq4Xs {  // 6-bit sub-scales (4 low bits in scales_l, 2 high bits in scales_h)
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQKK / 64];
    uint8_t qs[kQKK / 2];
};

// ---- ternary formats ------------------------------------------------------------------------------

struct BlockTq1_0 {  // base-3 packing: 5 trits per qs byte, 4 per qh byte
    uint8_t qs[(kQKK - 4 * kQKK / 64) / 5];
    uint8_t qh[kQKK / 64];
    uint16_t d;
};

struct BlockTq2_0 {  // 2 bits per trit
    uint8_t qs[kQKK / 4];
    uint16_t d;
};

}  // namespace dsv4
