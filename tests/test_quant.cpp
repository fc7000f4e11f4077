// Block-format codecs: every type's dequantizer against llama.cpp's numpy reference fixtures, the eight
// reference quantizers byte for byte, and properties beyond the fixtures (traits, id rejection, f16/bf16
// edge cases, round-trip error bounds, idempotence, finite output on random blocks, row splitting).
#include <gtest/gtest.h>

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

// Every type the fixtures cover; ManifestListsExactlyTheseTypes keeps this list and the manifest equal.
const std::vector<std::string> kFixtureTypes = {
    "Q4_0",   "Q4_1",  "Q5_0",    "Q5_1",  "Q8_0",  "Q2_K",   "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",  "IQ2_XXS", "IQ2_XS",
    "IQ2_S",  "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "BF16",    "F16"};

TEST(QuantFixture, ManifestListsExactlyTheseTypes) {
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

// For the eight types the reference can quantize, our encoder must produce its bytes exactly.
TEST_P(QuantFixture, QuantizeMatchesReferenceBytes) {
    const std::string& name = GetParam();
    const auto& e = manifest()["types"][name];
    if (!e.contains("quantize")) GTEST_SKIP() << name << " has no reference quantizer";
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

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantFixture, ::testing::ValuesIn(kFixtureTypes),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace dsv4
