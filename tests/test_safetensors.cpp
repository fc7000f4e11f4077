// The safetensors reader on good and hand-damaged files: truncation at every byte, lying header lengths,
// offsets out of range or overlapping, sizes that disagree with dtype x shape, unknown dtypes, bad JSON and
// seeded random byte flips. Each damaged case must give an Error naming the file (and the tensor, where the
// damage is in one), never a crash; the accepted ones must keep every tensor inside the buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "format/safetensors.h"

using namespace dsv4;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> out;
    out.reserve(8 + header.size() + data.size());
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.push_back((uint8_t)(n >> (8 * i)));
    for (char c : header) out.push_back((uint8_t)c);
    for (uint8_t b : data) out.push_back(b);
    return out;
}

// Two tensors: a BF16 [2, 3] (12 bytes) and an F32 [2] (8 bytes).
const std::string kGoodHeader =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
    R"("a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})";

std::vector<uint8_t> good_data() {
    std::vector<uint8_t> d(20);
    for (size_t i = 0; i < d.size(); ++i) d[i] = (uint8_t)(i + 1);
    return d;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
    auto r = SafetensorsFile::parse(bytes.data(), bytes.size(), "bad.safetensors");
    return r.ok() ? std::string() : r.error();
}

void expect_error(const std::string& header, const std::vector<uint8_t>& data, const std::string& needle,
                  const std::string& tensor = "") {
    const std::string e = parse_error(make_file(header, data));
    ASSERT_FALSE(e.empty()) << "accepted: " << header;
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find(needle), std::string::npos) << e;
    if (!tensor.empty()) {
        EXPECT_NE(e.find("tensor '" + tensor + "'"), std::string::npos) << e;
    }
}

void check_inside(const SafetensorsFile& f, const uint8_t* data, size_t size) {
    for (const StTensor& t : f.tensors()) {
        ASSERT_GE(t.data, data);
        ASSERT_LE(t.data + t.n_bytes, data + size);
        ASSERT_EQ(t.n_bytes, (size_t)t.n_elems() * st_dtype_bytes(t.dtype));
    }
}

}  // namespace

TEST(Safetensors, ParsesGoodFile) {
    const auto bytes = make_file(kGoodHeader, good_data());
    auto r = SafetensorsFile::parse(bytes.data(), bytes.size(), "good.safetensors");
    ASSERT_TRUE(r.ok()) << r.error();
    const SafetensorsFile& f = **r;
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensors()[0].name, "a");  // data order
    const StTensor* a = f.tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dtype, StDtype::BF16);
    EXPECT_EQ(a->shape_str(), "[2, 3]");
    EXPECT_EQ(a->n_bytes, 12u);
    EXPECT_EQ(a->data[0], 1);
    const StTensor* b = f.tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->dtype, StDtype::F32);
    EXPECT_EQ(b->data[0], 13);
    EXPECT_EQ(f.tensor("c"), nullptr);
    EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, OpensFromDiskAndNamesMissingFile) {
    const fs::path dir = fs::temp_directory_path() / ("dsv4_st_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto bytes = make_file(kGoodHeader, good_data());
    const std::string path = (dir / "x.safetensors").string();
    std::ofstream(path, std::ios::binary).write((const char*)bytes.data(), (std::streamsize)bytes.size());
    auto r = SafetensorsFile::open(path);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((*r)->tensors().size(), 2u);
    auto missing = SafetensorsFile::open((dir / "none.safetensors").string());
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().find("none.safetensors"), std::string::npos) << missing.error();
    fs::remove_all(dir);
}

TEST(Safetensors, ZeroSizedAndScalarTensors) {
    const std::string h = R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                          R"("s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
    const auto bytes = make_file(h, std::vector<uint8_t>(8, 7));
    auto r = SafetensorsFile::parse(bytes.data(), bytes.size());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((*r)->tensor("e")->n_bytes, 0u);
    EXPECT_EQ((*r)->tensor("s")->n_elems(), 1);
}

TEST(Safetensors, TruncationAtEveryByteIsAnError) {
    const auto bytes = make_file(kGoodHeader, good_data());
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + (ptrdiff_t)n);
        auto r = SafetensorsFile::parse(cut.data(), cut.size(), "cut.safetensors");
        ASSERT_FALSE(r.ok()) << "accepted a file cut to " << n << " bytes";
        EXPECT_NE(r.error().find("cut.safetensors"), std::string::npos);
    }
}

TEST(Safetensors, LyingHeaderLength) {
    auto bytes = make_file(kGoodHeader, good_data());
    const uint64_t huge = ~uint64_t(0);
    std::memcpy(bytes.data(), &huge, 8);
    EXPECT_NE(parse_error(bytes).find("runs past the end"), std::string::npos);
    // Shorter than the JSON: the header is cut mid-object.
    bytes = make_file(kGoodHeader, good_data());
    const uint64_t shorter = kGoodHeader.size() - 5;
    std::memcpy(bytes.data(), &shorter, 8);
    EXPECT_NE(parse_error(bytes).find("not valid JSON"), std::string::npos);
    // Longer than the JSON: the data bytes become trailing garbage in the JSON.
    bytes = make_file(kGoodHeader, good_data());
    const uint64_t longer = kGoodHeader.size() + 4;
    std::memcpy(bytes.data(), &longer, 8);
    EXPECT_FALSE(parse_error(bytes).empty());
}

TEST(Safetensors, BadEntriesNameTheTensor) {
    const auto d = good_data();
    expect_error(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", d, "unknown dtype 'F4'", "a");
    expect_error(R"({"a":{"shape":[2],"data_offsets":[0,4]}})", d, "no dtype", "a");
    expect_error(R"({"a":{"dtype":"U8","data_offsets":[0,4]}})", d, "no shape", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4]}})", d, "data_offsets", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", d, "data_offsets", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", d, "not a dimension", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4.5],"data_offsets":[0,4]}})", d, "not a dimension", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}})", d, "not a dimension", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", d, "ordered pair", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[-1,3]}})", d, "ordered pair", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[18,22]}})", d, "run past", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551615]}})", d, "run past", "a");
    expect_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,4]}})", d, "needs 16 bytes", "a");
    expect_error(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,4]}})",
                 d, "too large", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", d, "dimensions", "a");
    expect_error(R"({"a":[1,2]})", d, "not an object", "a");
    expect_error(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                 d, "overlap");
    expect_error(R"({"__metadata__":[1]})", d, "__metadata__");
    expect_error(R"([1,2,3])", d, "not a JSON object");
    expect_error(R"({"a":)", d, "not valid JSON");
    expect_error("{\"a\xff\":1}", d, "not valid JSON");
}

TEST(Safetensors, RandomByteFlipsNeverCrash) {
    const auto bytes = make_file(kGoodHeader, good_data());
    std::mt19937 rng(1234);
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<uint8_t> b = bytes;
        const int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; ++k) b[rng() % b.size()] = (uint8_t)rng();
        auto r = SafetensorsFile::parse(b.data(), b.size(), "flip.safetensors");
        if (r.ok()) {
            check_inside(**r, b.data(), b.size());
        } else {
            EXPECT_NE(r.error().find("flip.safetensors"), std::string::npos);
        }
    }
}
