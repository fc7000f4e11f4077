// Internal to src/format: the per-type codecs behind quant.h's dequantize_row / quantize_row, split by
// family (quant_legacy.cpp, quant_k.cpp, quant_k_quantize.cpp, quant_iq.cpp, quant_misc.cpp), plus the
// small lookup tables they share. Every function takes whole blocks (nb = number of blocks) or, for the
// plain types, n values; the dispatcher in quant.cpp has already checked the counts.
#pragma once

#include <bit>
#include <cstdint>

#include "format/quant_blocks.h"

// The byte-exact references (ggml's C code and gguf-py's numpy code) evaluate `a * b + c` with two
// roundings. Fusing it into one FMA (GCC's default under -march=native) changes low bits and, in
// quantizers, the chosen code, so every codec file switches contraction off right after its includes.
#if defined(__clang__)
#define DSV4_QUANT_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define DSV4_QUANT_NO_FP_CONTRACT _Pragma("GCC optimize(\"fp-contract=off\")")
#else
#define DSV4_QUANT_NO_FP_CONTRACT
#endif

// GCC fully unrolls short fixed-count loops (16 or 32 values of one block) before its loop vectoriser
// runs and then packs the scalar copies poorly -- Q4_0 decoding ran 3x slower. Marking such a loop
// "unroll 1" keeps it a loop, which the vectoriser turns into a handful of vector instructions.
#define DSV4_QUANT_VECTOR_LOOP _Pragma("GCC unroll 1")

namespace dsv4::quant {

// Non-linear 4-bit levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 levels doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), as ggml stores them for MXFP4.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr float kIq1Delta = 0.125f;  // IQ1_S / IQ1_M grid shift

// IQ2/IQ3 store 7 sign bits per 8 values; the 8th is implied by even parity. Entry i is the full byte.
struct SignTable {
    uint8_t v[128];
};
inline constexpr SignTable make_sign_table() {
    SignTable t{};
    for (int i = 0; i < 128; ++i) {
        int bits = 0;
        for (int b = 0; b < 7; ++b) bits += (i >> b) & 1;
        t.v[i] = (uint8_t)(i | ((bits & 1) << 7));
    }
    return t;
}
inline constexpr SignTable kSigns = make_sign_table();

// IQ grids (quant_iq_tables.cpp, quant_iq1_tables.cpp): each entry packs 8 (or 4) grid values, one per byte.
extern const uint64_t kIq2xxsGrid[256];
extern const uint64_t kIq2xsGrid[512];
extern const uint64_t kIq2sGrid[1024];
extern const uint32_t kIq3xxsGrid[256];
extern const uint32_t kIq3sGrid[512];
extern const uint64_t kIq1sGrid[2048];  // bytes are int8 -1, 0, +1

// E8M0 exponent -> 2^(e-128), i.e. half the MXFP4 block scale (values are stored doubled).
// e < 2 gives the subnormals 2^-128 and 2^-127.
inline float e8m0_to_f32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return std::bit_cast<float>(bits);
}

// ---- plain types (n values) ----
void dequant_f32(const float* x, float* y, int64_t n);
void dequant_f16(const uint16_t* x, float* y, int64_t n);
void dequant_bf16(const uint16_t* x, float* y, int64_t n);
void dequant_f64(const double* x, float* y, int64_t n);
void dequant_i8(const int8_t* x, float* y, int64_t n);
void dequant_i16(const int16_t* x, float* y, int64_t n);
void dequant_i32(const int32_t* x, float* y, int64_t n);
void dequant_i64(const int64_t* x, float* y, int64_t n);
void quant_f32(const float* x, float* y, int64_t n);
void quant_f16(const float* x, uint16_t* y, int64_t n);
void quant_bf16(const float* x, uint16_t* y, int64_t n);

// ---- legacy (quant_legacy.cpp) ----
void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb);
void dequant_q4_1(const BlockQ4_1* x, float* y, int64_t nb);
void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb);
void dequant_q5_1(const BlockQ5_1* x, float* y, int64_t nb);
void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb);
void dequant_q8_1(const BlockQ8_1* x, float* y, int64_t nb);
void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb);
void quant_q4_1(const float* x, BlockQ4_1* y, int64_t nb);
void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb);
void quant_q5_1(const float* x, BlockQ5_1* y, int64_t nb);
void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb);

// ---- MXFP4 and ternary (quant_misc.cpp) ----
void dequant_mxfp4(const BlockMxfp4* x, float* y, int64_t nb);
void quant_mxfp4(const float* x, BlockMxfp4* y, int64_t nb);
void dequant_tq1_0(const BlockTq1_0* x, float* y, int64_t nb);
void dequant_tq2_0(const BlockTq2_0* x, float* y, int64_t nb);

// ---- K (quant_k.cpp: dequantizers, quant_k_quantize.cpp: quantizers; `w` as for the IQ quantizers) ----
void dequant_q2_k(const BlockQ2K* x, float* y, int64_t nb);
void dequant_q3_k(const BlockQ3K* x, float* y, int64_t nb);
void dequant_q4_k(const BlockQ4K* x, float* y, int64_t nb);
void dequant_q5_k(const BlockQ5K* x, float* y, int64_t nb);
void dequant_q6_k(const BlockQ6K* x, float* y, int64_t nb);
void dequant_q8_k(const BlockQ8K* x, float* y, int64_t nb);
void quant_q2_k(const float* x, const float* w, BlockQ2K* y, int64_t nb);
void quant_q3_k(const float* x, const float* w, BlockQ3K* y, int64_t nb);
void quant_q4_k(const float* x, const float* w, BlockQ4K* y, int64_t nb);
void quant_q5_k(const float* x, const float* w, BlockQ5K* y, int64_t nb);
void quant_q6_k(const float* x, const float* w, BlockQ6K* y, int64_t nb);

// ---- IQ (quant_iq.cpp) ----
void dequant_iq2_xxs(const BlockIq2Xxs* x, float* y, int64_t nb);
void dequant_iq2_xs(const BlockIq2Xs* x, float* y, int64_t nb);
void dequant_iq2_s(const BlockIq2S* x, float* y, int64_t nb);
void dequant_iq3_xxs(const BlockIq3Xxs* x, float* y, int64_t nb);
void dequant_iq3_s(const BlockIq3S* x, float* y, int64_t nb);
void dequant_iq1_s(const BlockIq1S* x, float* y, int64_t nb);
void dequant_iq1_m(const BlockIq1M* x, float* y, int64_t nb);
void dequant_iq4_nl(const BlockIq4Nl* x, float* y, int64_t nb);
void dequant_iq4_xs(const BlockIq4Xs* x, float* y, int64_t nb);
// quant_iq_quantize.cpp: grid searches; `w` (nullable) holds one importance weight per value.
void quant_iq2_xxs(const float* x, const float* w, BlockIq2Xxs* y, int64_t nb);
void quant_iq2_xs(const float* x, const float* w, BlockIq2Xs* y, int64_t nb);
void quant_iq1_s(const float* x, const float* w, BlockIq1S* y, int64_t nb);

}  // namespace dsv4::quant
