// The activation digits of the CUDA decode GEMV (src/kernels/cuda/cuda_gemv_digits.cuh), run on the host:
// the representation error bound the file claims, its edge cases, and the integer dot products of the digit
// codecs (Q8_0, Q2_K, IQ3_XXS, IQ2_XS, IQ2_S, IQ3_S) against f32 dots of the CPU-dequantized
// weights. (The GPU kernels themselves are checked against the CPU backend by test-backend-ops on a CUDA machine.)
#include <gtest/gtest.h>

#if defined(DSV4_HAVE_CUDA)

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "format/quant_codecs.h"
#include "kernels/cuda/cuda_gemv_digits.cuh"

namespace dsv4::cuda::gemv {
namespace {

double reconstruct(const XDigits& q, int i) {
    return (double)q.scale * ((double)q.a0[i] + q.a1[i] / 256.0 + q.a2[i] / 65536.0);
}

// 32 random values in (-1, 1) times one magnitude 2^(-90 .. 90), every third trial's each also times 2^(-11 .. 11).
void random_block(std::mt19937& rng, int trial, float (&x)[32]) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-90, 90);
    const float mag = std::ldexp(1.0f, ex(rng));
    for (float& v : x) v = u(rng) * mag * (trial % 3 == 0 ? std::ldexp(1.0f, ex(rng) / 8) : 1.0f);
}

double abs_max(const float (&x)[32]) {
    double m = 0;
    for (float v : x) m = std::max(m, (double)std::fabs(v));
    return m;
}

TEST(GemvDigits, BlocksKeep22BitsOfTheirLargestValue) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 2000; ++trial) {
        float x[32];
        random_block(rng, trial, x);
        if (trial % 5 == 0) x[trial % 32] = -std::ldexp(1.0f, -140);  // a tiny negative next to large values
        XDigits q;
        quantize_block(x, q);
        const double m = abs_max(x);
        for (int i = 0; i < 32; ++i)
            ASSERT_LE(std::fabs(reconstruct(q, i) - x[i]), m * std::ldexp(1.0, -22)) << "trial " << trial << " i " << i;
        float s0 = 0, s1 = 0;
        for (int i = 0; i < 16; ++i) s0 += x[i], s1 += x[16 + i];
        EXPECT_NEAR(q.sum16[0], s0, 1e-5 * m * 16);
        EXPECT_NEAR(q.sum16[1], s1, 1e-5 * m * 16);
    }
}

// The two-plane digits of the bf16 mode's register kernels (digits2_of4): v = a0 + a1 / 2^8 rounded to nearest,
// so each value within half a unit of the second digit (2^-9 of the scale, clamped just under 128: 2^-8) of
// the block's largest magnitude m in [64, 128) units: 2^-15 of m relative; the same scale as the three planes.
TEST(GemvDigits, TwoPlanesKeep15BitsOfTheirLargestValue) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> ex(-90, 90);
    for (int trial = 0; trial < 2000; ++trial) {
        float x[32];
        random_block(rng, trial, x);
        if (trial % 7 == 0) x[trial % 32] = (trial % 2 ? 1.0f : -1.0f) * 127.999f * std::ldexp(1.0f, ex(rng) / 4);
        const double m = abs_max(x);
        float scale, inv;
        ASSERT_TRUE(digit_scale((float)m, scale, inv));
        XDigits q3;
        quantize_block(x, q3);
        EXPECT_EQ(scale, q3.scale);
        for (int i = 0; i < 8; ++i) {
            const float v[4] = {x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]};
            uint32_t w0, w1;
            digits2_of4(v, inv, w0, w1);
            for (int j = 0; j < 4; ++j) {
                const int a0 = (int8_t)(w0 >> (8 * j)), a1 = (int)((w1 >> (8 * j)) & 255);
                const double r = (double)scale * (a0 + a1 / 256.0);
                ASSERT_LE(std::fabs(r - v[j]), m * std::ldexp(1.0, -14)) << "trial " << trial << " value " << 4 * i + j;
                // Rounded to nearest: no other 16-bit number is closer.
                const double units = v[j] / (double)scale * 256.0, got = a0 * 256.0 + a1;
                if (got < 32767) {
                    EXPECT_LE(std::fabs(units - got), 0.5) << "trial " << trial;
                }
            }
        }
    }
}

TEST(GemvDigits, TwoPlaneDotIsTheDotOfTheTwoPlaneValues) {
    // digit_dot with two planes against the exact integer dot of the reconstructed values (P = 2 skips s2).
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> b(0, 255);
    for (int trial = 0; trial < 200; ++trial) {
        uint32_t w[4], a0[4], a1[4], a2[4] = {};
        for (int i = 0; i < 4; ++i) {
            w[i] = a0[i] = a1[i] = 0;
            for (int j = 0; j < 4; ++j) {
                w[i] |= (uint32_t)b(rng) << (8 * j);
                a0[i] |= (uint32_t)b(rng) << (8 * j);
                a1[i] |= (uint32_t)b(rng) << (8 * j);
            }
        }
        DigitSums s;
        digit_dot<true, 4, 2>(w, a0, a1, a2, s);
        double want = 0;
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
                want += (double)(int8_t)(w[i] >> (8 * j)) *
                        ((int8_t)(a0[i] >> (8 * j)) + ((a1[i] >> (8 * j)) & 255) / 256.0);
        EXPECT_EQ(s.s2, 0);
        EXPECT_DOUBLE_EQ((double)s.s0 + s.s1 / 256.0, want);
    }
}

TEST(GemvDigits, ExactValuesAndEdgeCases) {
    float x[32] = {};
    XDigits q;
    quantize_block(x, q);  // all zeros: a zero scale, zero digits
    EXPECT_EQ(q.scale, 0.0f);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(reconstruct(q, i), 0.0);

    for (int i = 0; i < 32; ++i) x[i] = (float)(i - 16) * 0.125f;  // few bits: represented exactly
    quantize_block(x, q);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(reconstruct(q, i), (double)x[i]) << i;
    EXPECT_EQ(q.sum16[0], -17.0f);  // 0.125 * (-16 - 15 - ... - 1)
    EXPECT_EQ(q.sum16[1], 15.0f);   // 0.125 * (0 + 1 + ... + 15)

    x[3] = -127.99999f;  // the largest magnitude of its binade: a0 = -128 after the scaling
    quantize_block(x, q);
    EXPECT_LE(std::fabs(reconstruct(q, 3) - x[3]), 128.0 * std::ldexp(1.0, -22));

    for (float& v : x) v = 1e-35f;  // negligible block: zeros
    quantize_block(x, q);
    EXPECT_EQ(q.scale, 0.0f);

    x[5] = INFINITY;  // non-finite blocks poison their outputs
    quantize_block(x, q);
    EXPECT_TRUE(std::isnan(q.scale));
    x[5] = NAN;
    quantize_block(x, q);
    EXPECT_TRUE(std::isnan(q.scale));
}

// Activations with a wide dynamic range per block, as the model's hidden states have.
std::vector<float> activations(int64_t K, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)K);
    for (int64_t i = 0; i < K; ++i) x[(size_t)i] = nd(rng) * (i % 37 == 0 ? 50.0f : 1.0f);
    return x;
}

// A row of K weights of type T: the CPU quantizer's blocks of random values, or (a type without a quantizer:
// IQ3_XXS, IQ2_S, IQ3_S) random bytes with a moderate f16 scale in each block.
template <GgmlType T>
std::vector<uint8_t> weight_row(int64_t K, std::mt19937& rng) {
    std::vector<uint8_t> w(ggml_row_bytes(ggml_traits(T), K) + 16);
    if constexpr (T == GgmlType::IQ3_XXS || T == GgmlType::IQ2_S || T == GgmlType::IQ3_S) {
        std::uniform_int_distribution<int> byte(0, 255);
        std::uniform_real_distribution<float> u(0.01f, 0.1f);
        for (uint8_t& v : w) v = (uint8_t)byte(rng);
        const size_t bytes = ggml_traits(T).block_bytes;
        for (int64_t b = 0; b < K / 256; ++b) {
            uint8_t* blk = w.data() + b * bytes;
            const uint16_t d16 = f32_to_f16(u(rng));
            std::memcpy(blk, &d16, 2);
        }
    } else {
        std::vector<float> wf = activations(K, rng);
        quantize_row(T, wf.data(), w.data(), K);
    }
    return w;
}

// One row of K weights of type T (weight_row) times x, through DigitCodec<T>::dot over every unit, against the
// f32 dot of the CPU-dequantized row. The bound: per value, the activation error (m * 2^-22 of its block)
// times |w|, plus f32 rounding of the sums.
template <GgmlType T>
void check_codec(int64_t K, uint32_t seed) {
    using C = DigitCodec<T>;
    std::mt19937 rng(seed);
    const std::vector<uint8_t> w = weight_row<T>(K, rng);
    std::vector<float> deq((size_t)K);
    dequantize_row(T, w.data(), deq.data(), K);
    const std::vector<float> x = activations(K, rng);
    std::vector<XDigits> xq((size_t)(K / 32));
    for (int64_t b = 0; b < K / 32; ++b) quantize_block(x.data() + 32 * b, xq[(size_t)b]);

    double want = 0, bound = 0;
    for (int64_t b = 0; b < K / 32; ++b) {
        double m = 0;
        for (int i = 0; i < 32; ++i) m = std::max(m, (double)std::fabs(x[(size_t)(32 * b + i)]));
        for (int i = 0; i < 32; ++i) {
            const double wv = deq[(size_t)(32 * b + i)];
            want += wv * x[(size_t)(32 * b + i)];
            bound += std::fabs(wv) * (m * std::ldexp(1.0, -22) + std::fabs(x[(size_t)(32 * b + i)]) * 1e-6);
        }
    }
    float acc[1][1] = {{0.0f}};
    Lut lut;  // the tables the codecs read (Q8_0 and Q2_K none)
    lut.grid64 = T == GgmlType::IQ2_XS ? quant::kIq2xsGrid : quant::kIq2sGrid;
    lut.grid32 = T == GgmlType::IQ3_S ? quant::kIq3sGrid : quant::kIq3xxsGrid;
    lut.signs = quant::kSigns.v;
    for (int64_t b = 0; b < K / C::kElems; ++b) {
        const uint8_t* blk[1] = {w.data() + b * C::kBytes};
        const XDigits* xb[1] = {xq.data() + b * C::kXPerBlock};
        for (int u = 0; u < C::kUnits; ++u) C::template dot<1, 1>(blk, u, xb, 1, acc, lut);
    }
    EXPECT_NEAR(acc[0][0], want, bound) << ggml_type_name(T) << " K=" << K;
    EXPECT_GT(std::fabs(want), 10 * bound);  // the check is not vacuous
}

TEST(GemvDigits, Q8_0DotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::Q8_0>(4096, seed);
}

TEST(GemvDigits, Q2_KDotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::Q2_K>(2048, seed);
}

// Every 4-byte word of a grid's n entries (E: u32, or u64 as two words) under every sign nibble, through
// signed_bytes: the bytes must be 1..127, so a negated byte never carries.
template <class E>
void check_signed_grid(const char* name, const E* grid, int n) {
    for (int e = 0; e < n; ++e)
        for (int half = 0; half < (int)sizeof(E) / 4; ++half) {
            const uint32_t g = (uint32_t)((uint64_t)grid[e] >> (32 * half));
            for (uint32_t s = 0; s < 16; ++s) {
                const uint32_t w = signed_bytes(g, s);
                for (int j = 0; j < 4; ++j) {
                    const int gj = (int)((g >> (8 * j)) & 255);
                    ASSERT_TRUE(gj >= 1 && gj < 128) << name << " entry " << e;
                    ASSERT_EQ((int)(int8_t)(w >> (8 * j)), (s >> j) & 1 ? -gj : gj)
                        << name << " entry " << e << " word " << half << " signs " << s;
                }
            }
        }
}

// The grids of the codecs that sign their bytes with signed_bytes.
TEST(GemvDigits, SignedGridBytesAreTheGridTimesItsSigns) {
    check_signed_grid("IQ3_XXS", quant::kIq3xxsGrid, 256);
    check_signed_grid("IQ3_S", quant::kIq3sGrid, 512);
    check_signed_grid("IQ2_XS", quant::kIq2xsGrid, 512);
    check_signed_grid("IQ2_S", quant::kIq2sGrid, 1024);
}

// iq1_word on every IQ1 grid word (bytes -1, 0, 1) with both shift signs: the bytes 8 g + 1 or 8 g - 1.
TEST(GemvDigits, Iq1WordsAreEightTimesTheGridPlusTheShift) {
    for (int e = 0; e < 2048; ++e)
        for (int half = 0; half < 2; ++half) {
            const uint32_t g = (uint32_t)(quant::kIq1sGrid[e] >> (32 * half));
            for (bool neg : {false, true}) {
                const uint32_t w = iq1_word(g, neg);
                for (int j = 0; j < 4; ++j) {
                    const int gj = (int)(int8_t)(g >> (8 * j));
                    ASSERT_TRUE(gj >= -1 && gj <= 1) << "IQ1 entry " << e;
                    ASSERT_EQ((int)(int8_t)(w >> (8 * j)), 8 * gj + (neg ? -1 : 1)) << "entry " << e << " neg " << neg;
                }
            }
        }
}

TEST(GemvDigits, Iq3_XXSDotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::IQ3_XXS>(2048, seed);
}

TEST(GemvDigits, Iq2_XSDotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::IQ2_XS>(2048, seed);
}

TEST(GemvDigits, Iq2_SDotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::IQ2_S>(2048, seed);
}

TEST(GemvDigits, Iq3_SDotMatchesTheF32Dot) {
    for (uint32_t seed = 1; seed <= 20; ++seed) check_codec<GgmlType::IQ3_S>(2048, seed);
}

}  // namespace
}  // namespace dsv4::cuda::gemv

#else

TEST(GemvDigits, NeedsTheCudaHeaders) {
    GTEST_SKIP() << "built without the CUDA backend";
}

#endif
