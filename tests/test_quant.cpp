// Block-format codecs: every type's dequantizer against llama.cpp's numpy reference fixtures, the eight
// reference quantizers byte for byte, and properties beyond the fixtures (traits, id rejection, f16/bf16
// edge cases, round-trip error bounds, idempotence, finite output on random blocks, row splitting).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

namespace dsv4 {
namespace {

const std::string kFixtureDir = std::string(DSV4_SHARED_DIR) + "/fixtures/quant/";

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    EXPECT_TRUE(f.good()) << "cannot open " << path;
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_f32(const std::string& path) {
    const std::vector<uint8_t> b = read_bytes(path);
    std::vector<float> v(b.size() / 4);
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
    return v;
}

const nlohmann::json& manifest() {
    static const nlohmann::json m = [] {
        std::ifstream f(kFixtureDir + "manifest.json");
        return f.good() ? nlohmann::json::parse(f) : nlohmann::json::object();
    }();
    return m;
}

GgmlType type_named(const std::string& name) {
    const auto t = ggml_type_from_name(name);
    EXPECT_TRUE(t.has_value()) << name;
    return t.value_or(GgmlType::F32);
}

// Every type the fixtures cover; QuantManifest.ListsExactlyTheseTypes keeps this list and the manifest equal.
const std::vector<std::string> kFixtureTypes = {
    "Q4_0",   "Q4_1",  "Q5_0",    "Q5_1",  "Q8_0",  "Q2_K",   "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",  "IQ2_XXS", "IQ2_XS",
    "IQ2_S",  "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "BF16",    "F16"};

TEST(QuantManifest, ListsExactlyTheseTypes) {
    ASSERT_TRUE(manifest().contains("types")) << "missing " << kFixtureDir << "manifest.json";
    std::set<std::string> in_manifest, expected(kFixtureTypes.begin(), kFixtureTypes.end());
    for (const auto& [name, _] : manifest()["types"].items()) in_manifest.insert(name);
    EXPECT_EQ(in_manifest, expected);
}

class QuantFixture : public ::testing::TestWithParam<std::string> {};

// The numpy reference's dequantized values must come out exactly (the README allows relative 1e-6).
TEST_P(QuantFixture, DequantizeMatchesReference) {
    const std::string& name = GetParam();
    ASSERT_TRUE(manifest()["types"].contains(name));
    const auto& e = manifest()["types"][name];
    const auto traits = ggml_type_from_id(e["ggml_type"].get<uint32_t>());
    ASSERT_TRUE(traits.has_value()) << name;
    EXPECT_EQ(std::string(traits->name), name);
    EXPECT_EQ(traits->block_elems, e["block_elems"].get<int64_t>());
    EXPECT_EQ(traits->block_bytes, e["block_bytes"].get<size_t>());

    const int64_t rows = e["rows"], row_elems = e["blocks_per_row"].get<int64_t>() * traits->block_elems;
    const size_t row_bytes = ggml_row_bytes(*traits, row_elems);
    const std::vector<uint8_t> blocks = read_bytes(kFixtureDir + e["dequant"]["blocks"].get<std::string>());
    const std::vector<float> expected = read_f32(kFixtureDir + e["dequant"]["expected"].get<std::string>());
    ASSERT_EQ(blocks.size(), (size_t)rows * row_bytes);
    ASSERT_EQ(expected.size(), (size_t)(rows * row_elems));

    std::vector<float> got(expected.size());
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(traits->type, blocks.data() + r * row_bytes, got.data() + r * row_elems, row_elems);
    }
    size_t exact = 0, bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const float a = got[i], b = expected[i];
        if (f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b))) {
            ++exact;
        } else if (!(std::fabs(a - b) <= 1e-6f * std::fabs(b)) && bad++ < 5) {
            ADD_FAILURE() << name << " value " << i << ": got " << a << ", reference " << b;
        }
    }
    EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << got.size() << " values differ";
    RecordProperty("exact", (int)exact);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantFixture, ::testing::ValuesIn(kFixtureTypes),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// The types whose fixtures include reference-quantized blocks; QuantManifest.QuantizableTypesAreTheseEight checks it.
const std::vector<std::string> kEncodeFixtureTypes = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4", "BF16", "F16"};

TEST(QuantManifest, QuantizableTypesAreTheseEight) {
    ASSERT_TRUE(manifest().contains("types"));
    std::set<std::string> with_quantize, expected(kEncodeFixtureTypes.begin(), kEncodeFixtureTypes.end());
    for (const auto& [name, e] : manifest()["types"].items()) {
        if (e.contains("quantize")) with_quantize.insert(name);
    }
    EXPECT_EQ(with_quantize, expected);
}

class QuantFixtureEncode : public ::testing::TestWithParam<std::string> {};

// For the eight types the reference can quantize, our encoder must produce its bytes exactly.
TEST_P(QuantFixtureEncode, QuantizeMatchesReferenceBytes) {
    const std::string& name = GetParam();
    const auto& e = manifest()["types"][name];
    ASSERT_TRUE(e.contains("quantize")) << name;
    const GgmlType type = type_named(name);
    ASSERT_TRUE(has_quantizer(type));
    const std::vector<float> input = read_f32(kFixtureDir + e["quantize"]["input"].get<std::string>());
    const std::vector<uint8_t> expected = read_bytes(kFixtureDir + e["quantize"]["expected"].get<std::string>());
    const int64_t rows = e["rows"], row_elems = e["blocks_per_row"].get<int64_t>() * e["block_elems"].get<int64_t>();
    ASSERT_EQ(input.size(), (size_t)(rows * row_elems));
    const size_t row_bytes = ggml_row_bytes(ggml_traits(type), row_elems);
    ASSERT_EQ(expected.size(), (size_t)rows * row_bytes);

    std::vector<uint8_t> got(expected.size(), 0xAA);
    for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(quantize_row(type, input.data() + r * row_elems, got.data() + r * row_bytes, row_elems), row_bytes);
    }
    const size_t block_bytes = ggml_traits(type).block_bytes;
    int reported = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != expected[i] && reported++ < 5) {
            ADD_FAILURE() << name << " block " << i / block_bytes << " byte " << i % block_bytes << ": got "
                          << (int)got[i] << ", reference " << (int)expected[i];
        }
    }
    EXPECT_EQ(reported, 0) << name << ": " << reported << " differing bytes";
}

INSTANTIATE_TEST_SUITE_P(ReferenceQuantizers, QuantFixtureEncode, ::testing::ValuesIn(kEncodeFixtureTypes),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---- traits ---------------------------------------------------------------------------------------

// Bits per weight of every type, from ggml's block layouts (spec/gguf_deepseek4.md section 4).
TEST(GgmlTypeTraits, RowBytesMatchBitsPerWeight) {
    const std::map<std::string, double> bpw = {
        {"F32", 32},       {"F16", 16},       {"BF16", 16},      {"F64", 64},       {"I8", 8},         {"I16", 16},
        {"I32", 32},       {"I64", 64},       {"Q4_0", 4.5},     {"Q4_1", 5.0},     {"Q5_0", 5.5},     {"Q5_1", 6.0},
        {"Q8_0", 8.5},     {"Q8_1", 9.0},     {"Q2_K", 2.625},   {"Q3_K", 3.4375},  {"Q4_K", 4.5},     {"Q5_K", 5.5},
        {"Q6_K", 6.5625},  {"Q8_K", 9.125},   {"IQ2_XXS", 2.0625}, {"IQ2_XS", 2.3125}, {"IQ2_S", 2.5625},
        {"IQ3_XXS", 3.0625}, {"IQ3_S", 3.4375}, {"IQ1_S", 1.5625}, {"IQ1_M", 1.75}, {"IQ4_NL", 4.5},
        {"IQ4_XS", 4.25},  {"TQ1_0", 1.6875}, {"TQ2_0", 2.0625}, {"MXFP4", 4.25}};
    int known = 0;
    for (uint32_t id = 0; id < 64; ++id) {
        const auto t = ggml_type_from_id(id);
        if (!t) continue;
        ++known;
        SCOPED_TRACE(t->name);
        EXPECT_EQ((uint32_t)t->type, id);
        ASSERT_TRUE(bpw.count(t->name));
        EXPECT_EQ((double)ggml_row_bytes(*t, 4096) * 8.0, bpw.at(t->name) * 4096);
        EXPECT_EQ(&ggml_traits(t->type), &ggml_traits(t->type));
        EXPECT_EQ(ggml_type_name(t->type), t->name);
        EXPECT_EQ(ggml_type_from_name(t->name), t->type);
        const bool integer = std::set<std::string>{"I8", "I16", "I32", "I64"}.count(t->name) > 0;
        EXPECT_EQ(t->is_float_weight, !integer);
    }
    EXPECT_EQ(known, (int)bpw.size());
}

TEST(GgmlTypeTraits, RejectsUnknownIdsAndNames) {
    // 4 and 5 were removed from ggml, 31..33 and 36..38 are retired, 42 is a fork's FP8 in some files.
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 42u, 1000u, 0xffffffffu}) {
        EXPECT_FALSE(ggml_type_from_id(id).has_value()) << id;
    }
    EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::Q8_0);
    EXPECT_EQ(ggml_type_from_name("iq2_xxs"), GgmlType::IQ2_XXS);
    EXPECT_EQ(ggml_type_from_name("Bf16"), GgmlType::BF16);
    EXPECT_EQ(ggml_type_from_name("mxfp4"), GgmlType::MXFP4);
    for (const char* bad : {"", "Q9_0", "Q8_0 ", "Q8", "IQ2_XXXS", "F8_E4M3_B128"}) {
        EXPECT_FALSE(ggml_type_from_name(bad).has_value()) << bad;
    }
}

// ---- f16 / bf16 conversion edge cases (expected bits from the IEEE-754 definitions) --------------

uint16_t encode16(GgmlType t, float f) {
    uint16_t h = 0;
    quantize_row(t, &f, &h, 1);
    return h;
}

float decode16(GgmlType t, uint16_t h) {
    float f = 0;
    dequantize_row(t, &h, &f, 1);
    return f;
}

TEST(HalfConversion, F16RoundsToNearestEven) {
    const float tiny = std::ldexp(1.0f, -25);  // half of the smallest f16 subnormal
    const std::vector<std::pair<float, uint16_t>> cases = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.1f, 0x2e66},
        {65504.0f, 0x7bff},                       // largest finite
        {65519.0f, 0x7bff}, {65520.0f, 0x7c00},   // below / at the overflow tie (odd mantissa -> inf)
        {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
        {std::ldexp(1.0f, -14), 0x0400},          // smallest normal
        {std::ldexp(1.0f, -24), 0x0001},          // smallest subnormal
        {tiny, 0x0000}, {3 * tiny, 0x0002}, {5 * tiny, 0x0002},  // subnormal ties go to even
        {1.0f + std::ldexp(1.0f, -11), 0x3c00},   // tie between 1 and 1+2^-10 -> even
        {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},
        {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},  // just above the tie
    };
    for (const auto& [f, h] : cases) EXPECT_EQ(encode16(GgmlType::F16, f), h) << f;
    const uint16_t nan = encode16(GgmlType::F16, NAN);
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
}

TEST(HalfConversion, F16DecodesEveryPatternExactly) {
    EXPECT_EQ(decode16(GgmlType::F16, 0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(decode16(GgmlType::F16, 0x03ff), 1023 * std::ldexp(1.0f, -24));
    EXPECT_EQ(decode16(GgmlType::F16, 0x7bff), 65504.0f);
    EXPECT_EQ(decode16(GgmlType::F16, 0x3555), 0.333251953125f);
    EXPECT_EQ(decode16(GgmlType::F16, 0xfc00), -INFINITY);
    EXPECT_TRUE(std::signbit(decode16(GgmlType::F16, 0x8000)));
    EXPECT_TRUE(std::isnan(decode16(GgmlType::F16, 0x7e00)));
    // A whole-row decode (vectorised where the CPU allows) must agree with one-at-a-time decode, and
    // every non-NaN pattern must survive decode -> encode.
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = (uint16_t)i;
    std::vector<float> row(all.size());
    dequantize_row(GgmlType::F16, all.data(), row.data(), (int64_t)all.size());
    for (uint32_t i = 0; i < all.size(); ++i) {
        const float one = decode16(GgmlType::F16, (uint16_t)i);
        if (std::isnan(one)) {
            ASSERT_TRUE(std::isnan(row[i])) << std::hex << i;
            continue;
        }
        ASSERT_EQ(f32_bits(row[i]), f32_bits(one)) << std::hex << i;
        ASSERT_EQ(encode16(GgmlType::F16, one), i) << std::hex << i;
    }
}

TEST(HalfConversion, Bf16RoundsToNearestEvenAndKeepsNan) {
    const std::vector<std::pair<float, uint16_t>> cases = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3f80}, {-2.0f, 0xc000},
        {1.0f + std::ldexp(1.0f, -8), 0x3f80},      // tie -> even
        {1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82},  // tie -> even (up)
        {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3f81},
        {3.4028235e38f, 0x7f80},                    // FLT_MAX rounds up to inf
        {INFINITY, 0x7f80}, {-INFINITY, 0xff80},
        {f32_from_bits(0x00000001), 0x0000},        // smallest f32 subnormal
    };
    for (const auto& [f, h] : cases) EXPECT_EQ(encode16(GgmlType::BF16, f), h) << f;
    // A signalling NaN whose payload sits in the low bits would round to inf without the quiet-bit rule.
    for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff80ffffu}) {
        const uint16_t h = encode16(GgmlType::BF16, f32_from_bits(nan_bits));
        EXPECT_EQ(h & 0x7f80, 0x7f80) << std::hex << nan_bits;
        EXPECT_NE(h & 0x007f, 0) << std::hex << nan_bits;
    }
    EXPECT_EQ(f32_bits(decode16(GgmlType::BF16, 0x3f80)), 0x3f800000u);
    EXPECT_EQ(f32_bits(decode16(GgmlType::BF16, 0x0001)), 0x00010000u);
    EXPECT_EQ(f32_bits(decode16(GgmlType::BF16, 0xff80)), 0xff800000u);
}

TEST(PlainTypes, IntegersAndF64ConvertToFloat) {
    const int8_t i8[4] = {-128, -1, 0, 127};
    const int16_t i16[4] = {-32768, -1, 0, 32767};
    const int32_t i32[4] = {-2147483647 - 1, -7, 0, 16777217};
    const int64_t i64[4] = {-(int64_t)1 << 40, -7, 0, (int64_t)1 << 53};
    const double f64[4] = {-1.5, 0.1, 1e300, 3.0};
    float y[4];
    dequantize_row(GgmlType::I8, i8, y, 4);
    EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-128, -1, 0, 127}));
    dequantize_row(GgmlType::I16, i16, y, 4);
    EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-32768, -1, 0, 32767}));
    dequantize_row(GgmlType::I32, i32, y, 4);
    EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-2147483648.0f, -7, 0, 16777216.0f}));
    dequantize_row(GgmlType::I64, i64, y, 4);
    EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-1099511627776.0f, -7, 0, 9007199254740992.0f}));
    dequantize_row(GgmlType::F64, f64, y, 4);
    EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{-1.5f, 0.1f, INFINITY, 3.0f}));
}

// ---- round trips of random data -----------------------------------------------------------------

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x((size_t)n);
    for (float& v : x) v = dist(rng);
    return x;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(ggml_row_bytes(ggml_traits(t), (int64_t)x.size()));
    EXPECT_EQ(quantize_row(t, x.data(), q.data(), (int64_t)x.size()), q.size());
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), (int64_t)y.size());
    return y;
}

// Root-mean-square error relative to the signal's RMS.
double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
    double err = 0, sig = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        err += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        sig += (double)x[i] * x[i];
    }
    return std::sqrt(err / sig);
}

// Plain round-to-nearest with exact float scales per group: codes in [-nmax, nmax-1] scaled so the
// largest magnitude maps to -nmax (symmetric), or `levels` codes spanning [min, max] (affine). This is
// the naive baseline the search-based K quantizers must beat despite storing their scales in 4-8 bits.
std::vector<float> naive_rtn(const std::vector<float>& x, int group, int nmax, bool affine) {
    std::vector<float> y(x.size());
    for (size_t g = 0; g < x.size(); g += group) {
        float lo = x[g], hi = x[g], amax = 0, max = 0;
        for (int i = 0; i < group; ++i) {
            const float v = x[g + i];
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            if (std::fabs(v) > amax) amax = std::fabs(v), max = v;
        }
        for (int i = 0; i < group; ++i) {
            const float v = x[g + i];
            if (affine) {
                const float d = (hi - lo) / (float)nmax;
                y[g + i] = lo + d * std::round((v - lo) / d);
            } else {
                const float d = max / (float)-nmax;
                y[g + i] = d * std::clamp(std::round(v / d), (float)-nmax, (float)(nmax - 1));
            }
        }
    }
    return y;
}

struct ErrorBound {
    const char* type;
    double max_rel_rmse;
};

// Bounds for N(0,1) data, derived from the bits: round-to-nearest with step s leaves an RMS error of
// s/sqrt(12), and s is a group's span over its code count. Spans use the RMS order statistics of
// N(0,1) samples: max|x| 2.13 (16 values) / 2.39 (32), max-min 3.61 (16) / 4.19 (32) (Monte Carlo).
// Each bound is that estimate plus <= 5% for clipping and rounded sub-scales; the scale searches of the
// K quantizers land below it (KQuantsBeatNaiveRoundToNearest checks they beat plain rounding).
const ErrorBound kBounds[] = {
    {"F16", 0.0003},   // 11-bit significand: relative step 2^-11..2^-10 -> at most 2^-10/sqrt(12) = 0.028%
    {"BF16", 0.0025},  // 8-bit significand: at most 2^-7/sqrt(12) = 0.23%
    {"Q8_0", 0.006},   // 2.39/127 -> 0.54%
    {"Q6_K", 0.02},    // 2.13/32 over groups of 16 -> 1.9%
    {"Q5_1", 0.041},   // 4.19/31 -> 3.9%
    {"Q5_0", 0.045},   // 2.39/16 -> 4.3%
    {"Q5_K", 0.041},   // as Q5_1 (32-value groups, 32 codes)
    {"Q4_1", 0.085},   // 4.19/15 -> 8.1%
    {"Q4_0", 0.09},    // 2.39/8 -> 8.6%
    {"Q4_K", 0.085},   // as Q4_1 (32-value groups, 16 codes)
    // E2M1 steps are 1/8, 1/4, 1/2 of the block's top octave for |x| below 1/4, 1/2, 1 of it; with the
    // Gaussian mass in those bands (68%, 27%, 5% for amax ~2.4) the error is sqrt(0.16/12) = 11.5%.
    {"MXFP4", 0.12},
    {"Q3_K", 0.16},    // 2.13/4 over groups of 16 -> 15.4%
    {"Q2_K", 0.35},    // 3.61/3 over groups of 16 -> 34.8%
};

TEST(QuantRoundTrip, ErrorWithinBitsBound) {
    const std::vector<float> x = gaussian(256 * 64, 7);
    for (const ErrorBound& b : kBounds) {
        const double e = rel_rmse(x, round_trip(type_named(b.type), x));
        EXPECT_LT(e, b.max_rel_rmse) << b.type;
    }
}

TEST(QuantRoundTrip, KQuantsBeatNaiveRoundToNearest) {
    const std::vector<float> x = gaussian(256 * 64, 11);
    struct Case {
        const char* type;
        int group, nmax;
        bool affine;
    };
    for (const Case& c : {Case{"Q2_K", 16, 3, true}, Case{"Q3_K", 16, 4, false}, Case{"Q4_K", 32, 15, true},
                          Case{"Q5_K", 32, 31, true}, Case{"Q6_K", 16, 32, false}}) {
        const double k = rel_rmse(x, round_trip(type_named(c.type), x));
        const double naive = rel_rmse(x, naive_rtn(x, c.group, c.nmax, c.affine));
        EXPECT_LT(k, naive) << c.type;
    }
    // Same bits per weight, different design: the K formats should not lose to the legacy ones.
    EXPECT_LT(rel_rmse(x, round_trip(GgmlType::Q4_K, x)), rel_rmse(x, round_trip(GgmlType::Q4_0, x)));
    EXPECT_LT(rel_rmse(x, round_trip(GgmlType::Q5_K, x)), rel_rmse(x, round_trip(GgmlType::Q5_0, x)));
}

// The reference quantizers are fixed points on their own output: re-quantizing dequantized blocks gives
// the same bytes (the anchor value maps back to the same scale and every code sits on a level).
TEST(QuantRoundTrip, ReferenceQuantizersAreIdempotent) {
    std::vector<float> x = gaussian(32 * 64, 21, 3.0f);
    for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;         // an all-zero block
    for (int i = 0; i < 32; ++i) x[64 + i] = 1e-3f * (float)(i - 16);  // a ramp with small scale
    for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4", "F16", "BF16"}) {
        const GgmlType t = type_named(name);
        const int64_t n = (int64_t)x.size();
        std::vector<uint8_t> q1(ggml_row_bytes(ggml_traits(t), n)), q2(q1.size());
        quantize_row(t, x.data(), q1.data(), n);
        std::vector<float> y(x.size());
        dequantize_row(t, q1.data(), y.data(), n);
        quantize_row(t, y.data(), q2.data(), n);
        EXPECT_EQ(q1, q2) << name;
    }
}

// Every quantizer maps an all-zero row to blocks that decode to exact zeros.
TEST(QuantRoundTrip, ZerosStayZero) {
    const std::vector<float> zeros(512, 0.0f);
    int quantizers = 0;
    for (uint32_t id = 0; id < 64; ++id) {
        const auto t = ggml_type_from_id(id);
        if (!t || !has_quantizer(t->type)) continue;
        ++quantizers;
        for (float v : round_trip(t->type, zeros)) ASSERT_EQ(v, 0.0f) << t->name;
    }
    EXPECT_EQ(quantizers, 17);  // F32, F16, BF16, 5 legacy, MXFP4, Q2_K..Q6_K, IQ2_XXS, IQ2_XS, IQ1_S
}

// ---- decoding arbitrary blocks -------------------------------------------------------------------

// Random block bytes, with the scale fields made finite: ggml itself decodes an inf/NaN f16 scale
// (exponent 31) to inf/NaN values, and an MXFP4 exponent byte >= 253 to inf (2^125 * 6 > FLT_MAX), so
// those encodings say nothing about the decoder and are steered to finite ones.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t nb, std::mt19937& rng) {
    const GgmlTypeTraits& tr = ggml_traits(t);
    std::vector<uint8_t> b(nb * tr.block_bytes);
    for (uint8_t& v : b) v = (uint8_t)rng();
    auto finite_f16 = [](uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        if (((h >> 10) & 0x1f) == 0x1f) h &= (uint16_t)~0x4000;
        std::memcpy(p, &h, 2);
    };
    std::vector<size_t> f16_fields;
    switch (t) {
        case GgmlType::Q4_0: f16_fields = {offsetof(BlockQ4_0, d)}; break;
        case GgmlType::Q4_1: f16_fields = {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}; break;
        case GgmlType::Q5_0: f16_fields = {offsetof(BlockQ5_0, d)}; break;
        case GgmlType::Q5_1: f16_fields = {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}; break;
        case GgmlType::Q8_0: f16_fields = {offsetof(BlockQ8_0, d)}; break;
        case GgmlType::Q8_1: f16_fields = {offsetof(BlockQ8_1, d), offsetof(BlockQ8_1, s)}; break;
        case GgmlType::Q2_K: f16_fields = {offsetof(BlockQ2K, d), offsetof(BlockQ2K, dmin)}; break;
        case GgmlType::Q3_K: f16_fields = {offsetof(BlockQ3K, d)}; break;
        case GgmlType::Q4_K: f16_fields = {offsetof(BlockQ4K, d), offsetof(BlockQ4K, dmin)}; break;
        case GgmlType::Q5_K: f16_fields = {offsetof(BlockQ5K, d), offsetof(BlockQ5K, dmin)}; break;
        case GgmlType::Q6_K: f16_fields = {offsetof(BlockQ6K, d)}; break;
        case GgmlType::IQ2_XXS: f16_fields = {offsetof(BlockIq2Xxs, d)}; break;
        case GgmlType::IQ2_XS: f16_fields = {offsetof(BlockIq2Xs, d)}; break;
        case GgmlType::IQ2_S: f16_fields = {offsetof(BlockIq2S, d)}; break;
        case GgmlType::IQ3_XXS: f16_fields = {offsetof(BlockIq3Xxs, d)}; break;
        case GgmlType::IQ3_S: f16_fields = {offsetof(BlockIq3S, d)}; break;
        case GgmlType::IQ1_S: f16_fields = {offsetof(BlockIq1S, d)}; break;
        case GgmlType::IQ4_NL: f16_fields = {offsetof(BlockIq4Nl, d)}; break;
        case GgmlType::IQ4_XS: f16_fields = {offsetof(BlockIq4Xs, d)}; break;
        case GgmlType::TQ1_0: f16_fields = {offsetof(BlockTq1_0, d)}; break;
        case GgmlType::TQ2_0: f16_fields = {offsetof(BlockTq2_0, d)}; break;
        default: break;
    }
    for (int64_t i = 0; i < nb; ++i) {
        uint8_t* blk = b.data() + i * tr.block_bytes;
        for (size_t off : f16_fields) finite_f16(blk + off);
        if (t == GgmlType::IQ1_M) {
            // The scale's exponent bits 10..14 are bits 14..15 of scale word 2 and 12..14 of word 3;
            // clearing bit 14 of word 3 makes an all-ones exponent finite.
            uint8_t* sc = blk + offsetof(BlockIq1M, scales);
            if ((sc[5] & 0xc0) == 0xc0 && (sc[7] & 0x70) == 0x70) sc[7] &= (uint8_t)~0x40;
        }
        if (t == GgmlType::MXFP4 && blk[0] > 252) blk[0] = (uint8_t)(blk[0] % 253);
        if (t == GgmlType::Q8_K) {
            const float d = std::ldexp((float)(rng() % 1000) / 1000.0f, (int)(rng() % 40) - 20);
            std::memcpy(blk + offsetof(BlockQ8K, d), &d, 4);
        }
    }
    return b;
}

std::vector<GgmlType> block_types() {
    std::vector<GgmlType> v;
    for (uint32_t id = 0; id < 64; ++id) {
        const auto t = ggml_type_from_id(id);
        if (t && t->block_elems > 1) v.push_back(t->type);
    }
    return v;
}

// Plain float types carry NaN/inf by design and are covered bit-exactly above; every block format must
// turn any bytes (with finite scales) into finite values.
TEST(QuantDecode, RandomBlocksDecodeToFiniteValues) {
    std::mt19937 rng(5);
    const std::vector<GgmlType> types = block_types();
    EXPECT_EQ(types.size(), 24u);  // all block formats including Q8_1 and Q8_K
    for (GgmlType t : types) {
        const int64_t nb = 64, n = nb * ggml_traits(t).block_elems;
        const std::vector<uint8_t> b = random_blocks(t, nb, rng);
        std::vector<float> y(n, NAN);
        dequantize_row(t, b.data(), y.data(), n);
        int64_t non_finite = 0;
        for (float v : y) non_finite += !std::isfinite(v);
        EXPECT_EQ(non_finite, 0) << ggml_type_name(t);
    }
}

// Decoding is block-local: one call over 3 blocks equals three single-block calls, and nothing is
// written past the row.
TEST(QuantDecode, RowOfThreeBlocksEqualsThreeSingleBlocks) {
    std::mt19937 rng(9);
    for (uint32_t id = 0; id < 64; ++id) {
        const auto t = ggml_type_from_id(id);
        if (!t) continue;
        const int64_t be = t->block_elems;
        std::vector<uint8_t> b = t->block_elems > 1 ? random_blocks(t->type, 3, rng) : std::vector<uint8_t>(3 * t->block_bytes);
        if (t->block_elems == 1) {
            for (uint8_t& v : b) v = (uint8_t)rng();
        }
        std::vector<float> whole(3 * be + 1, 12345.0f), parts(3 * be + 1, 12345.0f);
        dequantize_row(t->type, b.data(), whole.data(), 3 * be);
        for (int k = 0; k < 3; ++k) dequantize_row(t->type, b.data() + k * t->block_bytes, parts.data() + k * be, be);
        EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0) << t->name;
        EXPECT_EQ(whole.back(), 12345.0f) << t->name;
    }
}

}  // namespace
}  // namespace dsv4
