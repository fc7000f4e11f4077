// K-quant encoders (Q2_K..Q6_K): without importance weights the bytes are pinned (digests of the reference
// searches' output on fixed data, taken before the vectorized searches replaced the one-candidate-at-a-time
// loops); with an imatrix's weights the weighted squared error drops for every K type, and weights that are
// all zero in a block leave that block as without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "format/quant.h"

using namespace dsv4;

namespace {

constexpr GgmlType kKTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
float unit(uint64_t& s) {
    return (float)(splitmix(s) >> 40) * (1.0f / 16777216.0f);
}

// Values made with exact float operations only, so every platform gets the same bits: near-Gaussian blocks
// (a sum of four uniforms), heavy-tailed ones (a ratio), blocks with zeros and all-positive blocks.
std::vector<float> pinned_data(int64_t n, uint64_t seed) {
    std::vector<float> x((size_t)n);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t block = i / 256;
        float v = block % 3 == 2 ? 0.01f * (unit(seed) - 0.5f) / (unit(seed) + 0.05f)
                                 : 0.02f * (unit(seed) + unit(seed) + unit(seed) + unit(seed) - 2.0f);
        if (block % 5 == 4 && i % 7 == 0) v = 0.0f;
        if (block % 7 == 6 && v < 0) v = -v;
        x[(size_t)i] = v;
    }
    return x;
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
    uint64_t h = 1469598103934665603ull;
    for (uint8_t b : bytes) {
        h ^= b;
        h *= 1099511628211ull;
    }
    return h;
}

std::vector<uint8_t> quantize(GgmlType t, const std::vector<float>& x, const float* w) {
    std::vector<uint8_t> q(ggml_row_bytes(ggml_traits(t), (int64_t)x.size()));
    quantize_row_weighted(t, x.data(), q.data(), (int64_t)x.size(), w);
    return q;
}

// sum_k w[k % n_cols] (x - dequantized)^2 over rows of n_cols values.
double weighted_sse(GgmlType t, const std::vector<float>& x, const std::vector<uint8_t>& q,
                    const std::vector<float>& w) {
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), (int64_t)x.size());
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += (double)w[i % w.size()] * (y[i] - x[i]) * (y[i] - x[i]);
    return e;
}

}  // namespace

TEST(QuantK, BytesWithoutImportanceArePinned) {
    const std::vector<float> x = pinned_data(256 * 64, 42);
    const uint64_t want[] = {0x550379aac2eef13full, 0xd734ce2aac1ba445ull, 0xb6260a49f3d95065ull, 0xc4c3cd610295a628ull,
                             0xfbc9edb37b109c44ull};
    for (size_t k = 0; k < std::size(kKTypes); ++k) {
        EXPECT_EQ(fnv1a(quantize(kKTypes[k], x, nullptr)), want[k]) << ggml_type_name(kKTypes[k]);
    }
}

// Importance 100x on every 16th column, as an imatrix gives columns that meet large activations. Measured
// weighted-error ratios (with / without) on this data: Q2_K ~0.2, Q3_K ~0.4, Q4_K ~0.3, Q5_K ~0.45,
// Q6_K ~0.4; the bound leaves room for data and rounding differences, and the plain error may not blow up.
TEST(QuantK, ImportanceLowersTheWeightedError) {
    const int64_t n_cols = 1024, n_rows = 32;
    const std::vector<float> x = pinned_data(n_cols * n_rows, 7);
    std::vector<float> w_row((size_t)n_cols), w((size_t)(n_cols * n_rows)), ones((size_t)n_cols, 1.0f);
    for (int64_t k = 0; k < n_cols; ++k) w_row[(size_t)k] = k % 16 == 0 ? 100.0f : 1.0f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = w_row[i % w_row.size()];
    for (GgmlType t : kKTypes) {
        ASSERT_TRUE(uses_importance(t)) << ggml_type_name(t);
        const std::vector<uint8_t> plain = quantize(t, x, nullptr), weighted = quantize(t, x, w.data());
        EXPECT_LT(weighted_sse(t, x, weighted, w_row), 0.7 * weighted_sse(t, x, plain, w_row)) << ggml_type_name(t);
        EXPECT_LT(weighted_sse(t, x, weighted, ones), 2.0 * weighted_sse(t, x, plain, ones)) << ggml_type_name(t);
    }
}

// A block whose importance is all zero (no activation reached its columns) is quantized as without weights;
// the other blocks of the row still use theirs.
TEST(QuantK, ZeroImportanceBlockFallsBackToThePlainSearch) {
    const std::vector<float> x = pinned_data(256 * 4, 9);
    std::vector<float> w(x.size(), 0.0f);
    for (size_t i = 512; i < w.size(); ++i) w[i] = i % 16 == 0 ? 100.0f : 1.0f;
    for (GgmlType t : kKTypes) {
        const std::vector<uint8_t> plain = quantize(t, x, nullptr), weighted = quantize(t, x, w.data());
        const size_t block = ggml_traits(t).block_bytes;
        EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + 2 * block, weighted.begin())) << ggml_type_name(t);
        EXPECT_FALSE(std::equal(plain.begin() + 2 * block, plain.end(), weighted.begin() + 2 * block))
            << ggml_type_name(t);
    }
}
