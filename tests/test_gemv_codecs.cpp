// The f32 codecs of the CUDA decode GEMV and MoE decode kernels (src/kernels/cuda/cuda_gemv_codec_list.cuh),
// run on the host: every weight a codec decodes must be the CPU codec's value bit for bit. With one-hot
// activations (x[t] = e_{i + t}) a codec's dot product is the weight itself times 1, added to zeros, so it has
// to equal dequantize_row's value exactly; random activations then check the sums over whole rows. Blocks are
// random bytes with finite scale fields (every bit pattern of the other fields is a valid code), so every
// grid index, sign pattern and scale code is reached. (The kernels themselves are checked against the CPU
// backend by test-backend-ops on a CUDA machine; IQ2_XXS's codec reads shared-memory tables the kernel builds
// and is covered there.)
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
#include "kernels/cuda/cuda_gemv_codec_list.cuh"

namespace dsv4::cuda::gemv {
namespace {

// Byte offsets of the f16 fields of a block (the scale, and the min of the formats with one); IQ1_M keeps its
// scale in the top nibbles of the scale words at 48..55 and is handled apart; MXFP4 has an E8M0 byte at 0.
std::vector<int> f16_fields(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q2_K: return {80, 82};
        case GgmlType::Q3_K: return {108};
        case GgmlType::Q6_K: return {208};
        case GgmlType::MXFP4:
        case GgmlType::IQ1_M: return {};
        default: return {0};
    }
}

// rows x K weights of type t: random bytes with finite scales (0.002 .. 0.05 in magnitude, either sign).
std::vector<uint8_t> random_rows(GgmlType t, int rows, int64_t K, std::mt19937& rng) {
    const GgmlTypeTraits& tr = ggml_traits(t);
    const size_t row_bytes = ggml_row_bytes(tr, K);
    std::vector<uint8_t> w(row_bytes * rows + 64, 0);  // the padding: the codecs' aligned over-reads
    std::uniform_real_distribution<float> u(0.002f, 0.05f), f(-1.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255), e8(118, 130);
    auto put16 = [&](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
    if (tr.block_elems == 1) {  // F32, F16, BF16
        for (int64_t i = 0; i < rows * K; ++i) {
            const float v = f(rng);
            if (t == GgmlType::F32) std::memcpy(w.data() + 4 * i, &v, 4);
            else put16(w.data() + 2 * i, t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v));
        }
        return w;
    }
    for (size_t i = 0; i < row_bytes * rows; ++i) w[i] = (uint8_t)byte(rng);
    for (size_t b = 0; b < row_bytes * rows / tr.block_bytes; ++b) {
        uint8_t* blk = w.data() + b * tr.block_bytes;
        for (int off : f16_fields(t)) put16(blk + off, f32_to_f16((byte(rng) & 1 ? -1.0f : 1.0f) * u(rng)));
        if (t == GgmlType::MXFP4) blk[0] = (uint8_t)e8(rng);
        if (t == GgmlType::IQ1_M) {
            const uint16_t d16 = f32_to_f16(u(rng));
            for (int k = 0; k < 4; ++k) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | ((d16 >> (4 * k)) & 15) << 4);
        }
    }
    return w;
}

Lut host_tables(GgmlType t) {
    using namespace dsv4::quant;
    Lut lut;
    lut.signs = kSigns.v;
    switch (t) {
        case GgmlType::IQ2_XS: lut.grid64 = kIq2xsGrid; break;
        case GgmlType::IQ2_S: lut.grid64 = kIq2sGrid; break;
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M: lut.grid64 = kIq1sGrid; break;
        case GgmlType::IQ3_XXS: lut.grid32 = kIq3xxsGrid; break;
        case GgmlType::IQ3_S: lut.grid32 = kIq3sGrid; break;
        default: break;
    }
    return lut;
}

float bits_of(float v, uint32_t* u) {
    std::memcpy(u, &v, 4);
    return v;
}

// Two rows (R = 2) of K weights against NT = 4 activation rows (3 live), every unit of every block.
template <GgmlType T>
void check_codec(uint32_t seed) {
    using C = Codec<T>;
    constexpr int R = 2, NT = 4;
    const int64_t K = 4 * C::kElems;
    std::mt19937 rng(seed);
    const std::vector<uint8_t> w = random_rows(T, R, K, rng);
    const size_t row_bytes = ggml_row_bytes(ggml_traits(T), K);
    std::vector<float> deq((size_t)(R * K));
    for (int r = 0; r < R; ++r) dequantize_row(T, w.data() + r * row_bytes, deq.data() + r * K, K);
    const Lut lut = host_tables(T);
    // acc[r][t] = row r . x[t] over the whole row, through the codec.
    auto run = [&](const std::vector<float>& xs, int nt, float (&acc)[R][NT]) {
        for (auto& a : acc)
            for (float& v : a) v = 0.0f;
        for (int64_t b = 0; b < K / C::kElems; ++b) {
            const uint8_t* blk[R];
            for (int r = 0; r < R; ++r) blk[r] = w.data() + r * row_bytes + b * C::kBytes;
            const float* xb[NT];
            for (int t = 0; t < NT; ++t) xb[t] = xs.data() + t * K + b * C::kElems;
            for (int u = 0; u < C::kUnits; ++u) C::template dot<R, NT>(blk, u, xb, nt, acc, lut);
        }
    };
    // One-hot activations: every decoded weight, exactly.
    std::vector<float> x((size_t)(NT * K), 0.0f);
    int mismatches = 0;
    for (int64_t i = 0; i + NT <= K; i += NT) {
        for (int t = 0; t < NT; ++t) x[(size_t)(t * K + i + t)] = 1.0f;
        float acc[R][NT];
        run(x, NT, acc);
        for (int r = 0; r < R; ++r)
            for (int t = 0; t < NT; ++t) {
                uint32_t got, want;
                bits_of(acc[r][t] + 0.0f, &got);  // + 0: -0 and +0 both read as +0
                bits_of(deq[(size_t)(r * K + i + t)] + 0.0f, &want);
                if (got != want && ++mismatches <= 5)
                    ADD_FAILURE() << ggml_type_name(T) << " seed " << seed << ": row " << r << " value " << i + t
                                  << " decodes to " << acc[r][t] << ", the CPU codec to " << deq[(size_t)(r * K + i + t)];
            }
        for (int t = 0; t < NT; ++t) x[(size_t)(t * K + i + t)] = 0.0f;
    }
    EXPECT_EQ(mismatches, 0) << ggml_type_name(T);
    // Random activations, 3 live rows: the f32 sums of K products, against double dots of the CPU weights
    // (the bound: K roundings of the running sum, each at most 2^-24 of the sum of |w x|).
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    float acc[R][NT];
    run(x, 3, acc);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < 3; ++t) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = (double)deq[(size_t)(r * K + k)] * x[(size_t)(t * K + k)];
                want += p;
                mag += std::fabs(p);
            }
            EXPECT_NEAR(acc[r][t], want, (double)K * std::ldexp(mag, -24)) << ggml_type_name(T) << " row " << r;
        }
    for (int r = 0; r < R; ++r) EXPECT_EQ(acc[r][3], 0.0f) << "activation row 3 is not live";
}

template <GgmlType T>
void check_seeds() {
    for (uint32_t seed = 1; seed <= 3; ++seed) check_codec<T>(seed);
}

TEST(GemvCodecs, LegacyFormatsDecodeAsTheCpu) {
    check_seeds<GgmlType::Q4_0>();
    check_seeds<GgmlType::Q4_1>();
    check_seeds<GgmlType::Q5_0>();
    check_seeds<GgmlType::Q5_1>();
    check_seeds<GgmlType::Q8_0>();
    check_seeds<GgmlType::MXFP4>();
}

TEST(GemvCodecs, KFormatsDecodeAsTheCpu) {
    check_seeds<GgmlType::Q2_K>();
    check_seeds<GgmlType::Q3_K>();
    check_seeds<GgmlType::Q4_K>();
    check_seeds<GgmlType::Q5_K>();
    check_seeds<GgmlType::Q6_K>();
}

TEST(GemvCodecs, NonLinearFourBitFormatsDecodeAsTheCpu) {
    check_seeds<GgmlType::IQ4_NL>();
    check_seeds<GgmlType::IQ4_XS>();
}

TEST(GemvCodecs, GridFormatsDecodeAsTheCpu) {
    check_seeds<GgmlType::IQ2_XS>();
    check_seeds<GgmlType::IQ2_S>();
    check_seeds<GgmlType::IQ3_XXS>();
    check_seeds<GgmlType::IQ3_S>();
    check_seeds<GgmlType::IQ1_S>();
    check_seeds<GgmlType::IQ1_M>();
}

TEST(GemvCodecs, PlainFormatsDecodeAsTheCpu) {
    check_seeds<GgmlType::F16>();
    check_seeds<GgmlType::BF16>();
    check_seeds<GgmlType::F32>();
}

// Every format dispatch_codec takes is checked above (IQ2_XXS: by test-backend-ops), and the list is the one
// the kernels serve.
TEST(GemvCodecs, DispatchCoversTheCheckedFormats) {
    int n = 0;
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::MXFP4,
                       GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                       GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                       GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::F16, GgmlType::BF16, GgmlType::F32})
        n += dispatch_codec(t, [](auto) {}) ? 1 : 0;
    EXPECT_EQ(n, 23);
    for (GgmlType t : {GgmlType::F64, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::TQ1_0, GgmlType::TQ2_0})
        EXPECT_FALSE(dispatch_codec(t, [](auto) {})) << ggml_type_name(t);
}

}  // namespace
}  // namespace dsv4::cuda::gemv

#else

TEST(GemvCodecs, NeedsTheCudaHeaders) {
    GTEST_SKIP() << "built without the CUDA backend";
}

#endif
