// GGUF reader and writer: a round trip through every metadata type and several tensor types, the typed
// getters and their errors, split models, the shared golden files checked against their manifests and the
// tokenizer JSON, and `dsv4 inspect` (its report and its f32 dump).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

// A fresh folder per test: ctest runs the tests of this binary in parallel processes.
fs::path test_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    fs::path d = fs::temp_directory_path() /
                 ("dsv4_gguf_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = (uint8_t)rng();
    return b;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

template <class T>
T elem(const GgufValue& v, uint64_t i) {
    T x;
    std::memcpy(&x, v.elems + i * sizeof(T), sizeof(T));
    return x;
}

std::unique_ptr<GgufFile> open_ok(const fs::path& p) {
    auto r = GgufFile::open(p.string());
    if (!r.ok()) ADD_FAILURE() << r.error();
    return r.ok() ? std::move(*r) : nullptr;
}

struct CliResult {
    int status = -1;
    std::string output;  // stdout and stderr together
};

CliResult run_dsv4(const std::string& args) {
    CliResult r;
    std::FILE* p = ::popen((std::string(DSV4_BIN) + " " + args + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

const std::string kShared = DSV4_SHARED_DIR;

}  // namespace

TEST(GgufRoundTrip, EveryValueTypeAndSeveralTensorTypes) {
    const fs::path dir = test_dir();
    GgufWriter w;
    w.set_u8("t.u8", 200);
    w.set_i8("t.i8", -100);
    w.set_u16("t.u16", 60000);
    w.set_i16("t.i16", -30000);
    w.set_u32("t.u32", 4000000000u);
    w.set_i32("t.i32", -2000000000);
    w.set_u64("t.u64", (uint64_t(1) << 63) + 5);
    w.set_i64("t.i64", std::numeric_limits<int64_t>::min());
    w.set_f32("t.f32", 1.5f);
    w.set_f64("t.f64", -2.25e300);
    w.set_bool("t.bool", true);
    w.set_str("t.str", "h\xc3\xa9llo\nworld");
    w.set_str("t.empty_str", "");
    w.set_arr_u8("a.u8", {0, 255, 7});
    w.set_arr_i8("a.i8", {-128, 127});
    w.set_arr_u16("a.u16", {1, 65535});
    w.set_arr_i16("a.i16", {-32768, 32767});
    w.set_arr_u32("a.u32", {0, 4294967295u});
    w.set_arr_i32("a.i32", {-5, 7, 2147483647});
    w.set_arr_u64("a.u64", {18446744073709551615ull});
    w.set_arr_i64("a.i64", {-9, 9});
    w.set_arr_f32("a.f32", {0.5f, -1e-30f, 3e38f});
    w.set_arr_f64("a.f64", {1e-300, -0.0});
    w.set_arr_bool("a.bool", {true, false, true});
    w.set_arr_str("a.str", {"a", "", "\xc3\xbc", std::string("nul\0in", 6)});
    w.set_arr_u32("a.empty", {});
    w.set_u32("t.replaced", 1);
    w.set_str("t.replaced", "second");  // same key again: replaces, keeps the first position
    w.set_u32("general.alignment", 4096);  // ignored: set_alignment owns it
    w.set_alignment(64);

    struct Spec {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        size_t n_bytes;
    };
    const std::vector<Spec> specs = {
        {"f32.odd", GgmlType::F32, {5, 3}, 5 * 3 * 4},
        {"f16", GgmlType::F16, {64}, 128},
        {"bf16.3d", GgmlType::BF16, {16, 2, 2}, 16 * 4 * 2},
        {"q8_0", GgmlType::Q8_0, {64, 3}, 2 * 34 * 3},
        {"q4_k", GgmlType::Q4_K, {256, 2}, 144 * 2},
        {"mxfp4.4d", GgmlType::MXFP4, {32, 1, 3, 2}, 17 * 6},
        {"i32", GgmlType::I32, {7}, 28},
        {"empty", GgmlType::F32, {0, 4}, 0},
    };
    std::vector<std::vector<uint8_t>> contents;
    for (size_t i = 0; i < specs.size(); ++i) {
        contents.push_back(random_bytes(specs[i].n_bytes, 100 + (uint32_t)i));
        ASSERT_TRUE(w.add_tensor_data(specs[i].name, specs[i].type, specs[i].ne, contents.back()).ok());
    }
    // A streamed tensor: the producer writes in pieces, as a converter would.
    const std::vector<uint8_t> streamed = random_bytes(3 * 1000 * 4, 7);
    ASSERT_TRUE(w.add_tensor("streamed", GgmlType::F32, {1000, 3}, [&](std::FILE* out) -> Status {
                     for (size_t at = 0; at < streamed.size(); at += 1000)
                         if (std::fwrite(streamed.data() + at, 1, 1000, out) != 1000) return make_error("short write");
                     return {};
                 }).ok());

    std::vector<std::pair<uint64_t, uint64_t>> progress;
    const fs::path path = dir / "all.gguf";
    Status st = w.write(path.string(), [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

    uint64_t total = streamed.size();
    for (const Spec& s : specs) total += s.n_bytes;
    ASSERT_EQ(progress.size(), specs.size() + 1);
    EXPECT_EQ(progress.back(), std::make_pair(total, total));
    for (size_t i = 1; i < progress.size(); ++i) EXPECT_GE(progress[i].first, progress[i - 1].first);

    auto f = open_ok(path);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->n_splits(), 1u);
    EXPECT_EQ(f->data_offset() % 64, 0u);

    // Metadata: order, types and values. general.alignment comes first (the writer's own), once.
    const auto& md = f->metadata();
    std::vector<std::string> keys;
    for (const auto& kv : md) keys.push_back(kv.first);
    const std::vector<std::string> want_keys = {
        "general.alignment", "t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32", "t.u64", "t.i64", "t.f32",
        "t.f64", "t.bool", "t.str", "t.empty_str", "a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.u64",
        "a.i64", "a.f32", "a.f64", "a.bool", "a.str", "a.empty", "t.replaced"};
    EXPECT_EQ(keys, want_keys);
    EXPECT_EQ(f->find("general.alignment")->type, GgufValueType::U32);
    EXPECT_EQ(f->find("general.alignment")->u64, 64u);

    EXPECT_EQ(f->find("t.u8")->type, GgufValueType::U8);
    EXPECT_EQ(f->find("t.u8")->u64, 200u);
    EXPECT_EQ(f->find("t.i8")->type, GgufValueType::I8);
    EXPECT_EQ(f->find("t.i8")->i64, -100);
    EXPECT_EQ(f->find("t.u16")->u64, 60000u);
    EXPECT_EQ(f->find("t.i16")->i64, -30000);
    EXPECT_EQ(f->find("t.u32")->u64, 4000000000u);
    EXPECT_EQ(f->find("t.i32")->i64, -2000000000);
    EXPECT_EQ(f->find("t.u64")->type, GgufValueType::U64);
    EXPECT_EQ(f->find("t.u64")->u64, (uint64_t(1) << 63) + 5);
    EXPECT_EQ(f->find("t.i64")->i64, std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f->find("t.f32")->type, GgufValueType::F32);
    EXPECT_EQ(f->find("t.f32")->f64, 1.5);
    EXPECT_EQ(f->find("t.f64")->type, GgufValueType::F64);
    EXPECT_EQ(f->find("t.f64")->f64, -2.25e300);
    EXPECT_EQ(f->find("t.bool")->type, GgufValueType::BOOL);
    EXPECT_TRUE(f->find("t.bool")->b);
    EXPECT_EQ(f->find("t.str")->str, "h\xc3\xa9llo\nworld");
    EXPECT_EQ(f->find("t.empty_str")->type, GgufValueType::STRING);
    EXPECT_EQ(f->find("t.empty_str")->str, "");
    EXPECT_EQ(f->find("t.replaced")->type, GgufValueType::STRING);
    EXPECT_EQ(f->find("t.replaced")->str, "second");

    auto check_arr = [&](const char* key, GgufValueType et, uint64_t n) {
        const GgufValue* v = f->find(key);
        EXPECT_TRUE(v) << key;
        if (!v) return (const GgufValue*)nullptr;
        EXPECT_EQ(v->type, GgufValueType::ARRAY) << key;
        EXPECT_EQ(v->elem_type, et) << key;
        EXPECT_EQ(v->n_elems, n) << key;
        return v;
    };
    const GgufValue* v = check_arr("a.u8", GgufValueType::U8, 3);
    EXPECT_EQ(elem<uint8_t>(*v, 1), 255);
    EXPECT_EQ(elem<uint8_t>(*v, 2), 7);
    v = check_arr("a.i8", GgufValueType::I8, 2);
    EXPECT_EQ(elem<int8_t>(*v, 0), -128);
    v = check_arr("a.u16", GgufValueType::U16, 2);
    EXPECT_EQ(elem<uint16_t>(*v, 1), 65535);
    v = check_arr("a.i16", GgufValueType::I16, 2);
    EXPECT_EQ(elem<int16_t>(*v, 0), -32768);
    v = check_arr("a.u32", GgufValueType::U32, 2);
    EXPECT_EQ(elem<uint32_t>(*v, 1), 4294967295u);
    v = check_arr("a.i32", GgufValueType::I32, 3);
    EXPECT_EQ(elem<int32_t>(*v, 0), -5);
    v = check_arr("a.u64", GgufValueType::U64, 1);
    EXPECT_EQ(elem<uint64_t>(*v, 0), 18446744073709551615ull);
    v = check_arr("a.i64", GgufValueType::I64, 2);
    EXPECT_EQ(elem<int64_t>(*v, 0), -9);
    v = check_arr("a.f32", GgufValueType::F32, 3);
    EXPECT_EQ(elem<float>(*v, 1), -1e-30f);
    v = check_arr("a.f64", GgufValueType::F64, 2);
    EXPECT_EQ(elem<double>(*v, 0), 1e-300);
    EXPECT_TRUE(std::signbit(elem<double>(*v, 1)));
    v = check_arr("a.bool", GgufValueType::BOOL, 3);
    EXPECT_EQ(std::vector<uint8_t>(v->elems, v->elems + 3), (std::vector<uint8_t>{1, 0, 1}));
    v = check_arr("a.str", GgufValueType::STRING, 4);
    ASSERT_EQ(v->strs.size(), 4u);
    EXPECT_EQ(v->strs[0], "a");
    EXPECT_EQ(v->strs[1], "");
    EXPECT_EQ(v->strs[2], "\xc3\xbc");
    EXPECT_EQ(v->strs[3], std::string_view("nul\0in", 6));
    check_arr("a.empty", GgufValueType::U32, 0);

    // Tensors: order, shapes, types, bytes, and aligned, non-overlapping placement.
    const auto& ts = f->tensors();
    ASSERT_EQ(ts.size(), specs.size() + 1);
    for (size_t i = 0; i < specs.size(); ++i) {
        const GgufTensor& t = ts[i];
        const Spec& s = specs[i];
        EXPECT_EQ(t.name, s.name);
        EXPECT_EQ(t.type, s.type) << s.name;
        EXPECT_EQ(t.n_dims, s.ne.size()) << s.name;
        for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < s.ne.size() ? s.ne[d] : 1) << s.name;
        EXPECT_EQ(t.n_bytes, s.n_bytes) << s.name;
        EXPECT_EQ(t.file_offset % 64, 0u) << s.name;
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), contents[i]) << s.name;
        EXPECT_EQ(f->tensor(s.name), &t);
    }
    EXPECT_EQ(ts[0].shape_str(), "[5, 3]");
    EXPECT_EQ(ts[5].shape_str(), "[32, 1, 3, 2]");
    EXPECT_EQ(ts[3].row_bytes(), 68u);
    EXPECT_EQ(ts.back().name, "streamed");
    EXPECT_EQ(std::vector<uint8_t>(ts.back().data, ts.back().data + ts.back().n_bytes), streamed);
    EXPECT_EQ(f->tensor("missing"), nullptr);

    uint64_t expect_size = f->data_offset();
    for (const GgufTensor& t : ts) expect_size += (t.n_bytes + 63) / 64 * 64;
    EXPECT_EQ(fs::file_size(path), expect_size);

    // Copying every value into a second writer reproduces the same metadata bytes.
    GgufWriter w2;
    for (const auto& [k, val] : md) w2.copy_value(k, val);
    w2.set_alignment(64);
    ASSERT_TRUE(w2.write((dir / "copy.gguf").string()).ok());
    auto f2 = open_ok(dir / "copy.gguf");
    ASSERT_TRUE(f2);
    ASSERT_EQ(f2->metadata().size(), md.size());
    for (size_t i = 0; i < md.size(); ++i) {
        EXPECT_EQ(f2->metadata()[i].first, md[i].first);
        EXPECT_EQ(gguf_value_type_str(f2->metadata()[i].second), gguf_value_type_str(md[i].second));
        EXPECT_EQ(gguf_value_str(f2->metadata()[i].second, 100, 100), gguf_value_str(md[i].second, 100, 100))
            << md[i].first;
    }
    fs::remove_all(dir);
}

TEST(GgufRoundTrip, DefaultAlignmentWritesNoAlignmentKey) {
    const fs::path dir = test_dir();
    GgufWriter w;
    w.set_str("general.architecture", "none");
    ASSERT_TRUE(w.add_tensor_data("x", GgmlType::F32, {3}, as_bytes(std::vector<float>{1, 2, 3})).ok());
    ASSERT_TRUE(w.add_tensor_data("y", GgmlType::F32, {1}, as_bytes(std::vector<float>{4})).ok());
    ASSERT_TRUE(w.write((dir / "a.gguf").string()).ok());
    auto f = open_ok(dir / "a.gguf");
    ASSERT_TRUE(f);
    EXPECT_FALSE(f->has("general.alignment"));
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->tensor("y")->file_offset - f->tensor("x")->file_offset, 32u);
    float y;
    std::memcpy(&y, f->tensor("y")->data, 4);
    EXPECT_EQ(y, 4.0f);
    fs::remove_all(dir);
}

TEST(GgufWriterErrors, RejectsBadTensorsAndProducers) {
    const fs::path dir = test_dir();
    GgufWriter w;
    EXPECT_FALSE(w.add_tensor_data("q", GgmlType::Q8_0, {33}, std::vector<uint8_t>(34)).ok());  // not a block multiple
    EXPECT_FALSE(w.add_tensor_data("short", GgmlType::F32, {4}, std::vector<uint8_t>(15)).ok());
    EXPECT_FALSE(w.add_tensor_data("neg", GgmlType::F32, {-1}, {}).ok());
    EXPECT_FALSE(w.add_tensor_data("five", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)).ok());
    EXPECT_FALSE(w.add_tensor_data("", GgmlType::F32, {1}, std::vector<uint8_t>(4)).ok());
    ASSERT_TRUE(w.add_tensor_data("ok", GgmlType::F32, {1}, std::vector<uint8_t>(4)).ok());
    auto dup = w.add_tensor_data("ok", GgmlType::F32, {1}, std::vector<uint8_t>(4));
    ASSERT_FALSE(dup.ok());
    EXPECT_NE(dup.error().find("'ok'"), std::string::npos) << dup.error();

    // A producer that writes the wrong number of bytes fails the write and leaves no file behind.
    ASSERT_TRUE(w.add_tensor("liar", GgmlType::F32, {4}, [](std::FILE* out) -> Status {
                     const uint8_t b[8] = {};
                     std::fwrite(b, 1, 8, out);
                     return {};
                 }).ok());
    const fs::path p = dir / "bad.gguf";
    Status st = w.write(p.string());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("liar"), std::string::npos) << st.error();
    EXPECT_NE(st.error().find("16"), std::string::npos) << st.error();
    EXPECT_FALSE(fs::exists(p));
    EXPECT_FALSE(fs::exists(p.string() + ".tmp"));

    // A producer's own error is passed through.
    GgufWriter w2;
    ASSERT_TRUE(w2.add_tensor("fails", GgmlType::F32, {1}, [](std::FILE*) -> Status {
                      return make_error("source tensor unreadable");
                  }).ok());
    st = w2.write(p.string());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("source tensor unreadable"), std::string::npos);

    GgufWriter w3;
    w3.set_alignment(48);
    EXPECT_FALSE(w3.write(p.string()).ok());
    fs::remove_all(dir);
}

TEST(GgufGetters, ConvertWhereTheValueFitsAndNameTheKeyOtherwise) {
    const fs::path dir = test_dir();
    GgufWriter w;
    w.set_u8("u8", 7);
    w.set_i32("neg", -1);
    w.set_i32("pos_i32", 12);
    w.set_u64("big", uint64_t(1) << 40);
    w.set_u64("huge", ~uint64_t(0));
    w.set_f32("f32", 0.25f);
    w.set_f64("f64", 0.125);
    w.set_bool("flag", false);
    w.set_str("name", "deepseek4");
    w.set_arr_u32("ratios", {0, 4, 128});
    w.set_arr_i32("ids", {-1, 5});
    w.set_arr_u8("bytes", {1, 2});
    w.set_arr_f64("f64s", {0.5, 2.0});
    w.set_arr_str("strs", {"x", "y"});
    ASSERT_TRUE(w.write((dir / "g.gguf").string()).ok());
    auto f = open_ok(dir / "g.gguf");
    ASSERT_TRUE(f);

    EXPECT_EQ(*f->get_u32("u8"), 7u);
    EXPECT_EQ(*f->get_u32("pos_i32"), 12u);
    EXPECT_EQ(*f->get_i64("neg"), -1);
    EXPECT_EQ(*f->get_u64("big"), uint64_t(1) << 40);
    EXPECT_EQ(*f->get_u64("huge"), ~uint64_t(0));
    EXPECT_EQ(*f->get_f32("f32"), 0.25f);
    EXPECT_EQ(*f->get_f32("f64"), 0.125f);
    EXPECT_FALSE(*f->get_bool("flag"));
    EXPECT_EQ(*f->get_str("name"), "deepseek4");
    EXPECT_EQ(*f->get_arr_u32("ratios"), (std::vector<uint32_t>{0, 4, 128}));
    EXPECT_EQ(*f->get_arr_i32("ratios"), (std::vector<int32_t>{0, 4, 128}));
    EXPECT_EQ(*f->get_arr_i32("ids"), (std::vector<int32_t>{-1, 5}));
    EXPECT_EQ(*f->get_arr_u32("bytes"), (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(*f->get_arr_f32("f64s"), (std::vector<float>{0.5f, 2.0f}));
    EXPECT_EQ(*f->get_arr_str("strs"), (std::vector<std::string_view>{"x", "y"}));

    auto expect_err = [](const auto& r, std::vector<std::string> parts) {
        ASSERT_FALSE(r.ok());
        for (const auto& p : parts) EXPECT_NE(r.error().find(p), std::string::npos) << r.error() << " lacks " << p;
    };
    expect_err(f->get_u32("absent.key"), {"'absent.key'", "not found"});
    expect_err(f->get_u32("neg"), {"'neg'", "-1", "u32"});
    expect_err(f->get_u32("big"), {"'big'", "1099511627776", "u32"});
    expect_err(f->get_u64("neg"), {"'neg'", "u64"});
    expect_err(f->get_i64("huge"), {"'huge'", "18446744073709551615"});
    expect_err(f->get_u32("name"), {"'name'", "string", "u32"});
    expect_err(f->get_f32("u8"), {"'u8'", "u8", "f32"});
    expect_err(f->get_bool("u8"), {"'u8'", "u8", "bool"});
    expect_err(f->get_str("f32"), {"'f32'", "f32", "string"});
    expect_err(f->get_arr_u32("ids"), {"'ids'", "element 0", "-1"});
    expect_err(f->get_arr_u32("strs"), {"'strs'", "array[string]", "array[u32]"});
    expect_err(f->get_arr_f32("ratios"), {"'ratios'", "array[u32]", "array[f32]"});
    expect_err(f->get_arr_str("ratios"), {"'ratios'", "array[u32]", "array[string]"});
    expect_err(f->get_arr_u32("u8"), {"'u8'", "u8"});
    fs::remove_all(dir);
}

namespace {

// Writes part `no` (zero-based) of a split model with the given tensors, as llama.cpp's gguf-split does.
void write_part(const fs::path& p, uint16_t no, uint16_t count, int32_t total_tensors,
                const std::vector<std::pair<std::string, float>>& tensors) {
    GgufWriter w;
    if (no == 0) w.set_str("general.architecture", "deepseek4");
    w.set_u16("split.no", no);
    w.set_u16("split.count", count);
    w.set_i32("split.tensors.count", total_tensors);
    for (const auto& [name, value] : tensors)
        ASSERT_TRUE(w.add_tensor_data(name, GgmlType::F32, {2}, as_bytes(std::vector<float>{value, -value})).ok());
    Status st = w.write(p.string());
    ASSERT_TRUE(st.ok()) << st.error();
}

}  // namespace

TEST(GgufSplit, MergesPartsAndNamesWhatIsWrong) {
    const fs::path dir = test_dir();
    auto part = [&](int i) { return dir / ("m-0000" + std::to_string(i) + "-of-00003.gguf"); };
    write_part(part(1), 0, 3, 5, {{"a", 1}, {"b", 2}});
    write_part(part(2), 1, 3, 5, {{"c", 3}});
    write_part(part(3), 2, 3, 5, {{"d", 4}, {"e", 5}});

    {
        auto f = open_ok(part(1));
        ASSERT_TRUE(f);
        EXPECT_EQ(f->n_splits(), 3u);
        ASSERT_EQ(f->tensors().size(), 5u);
        const char* names[] = {"a", "b", "c", "d", "e"};
        const uint32_t splits[] = {0, 0, 1, 2, 2};
        for (int i = 0; i < 5; ++i) {
            const GgufTensor* t = f->tensor(names[i]);
            ASSERT_TRUE(t) << names[i];
            EXPECT_EQ(&f->tensors()[i], t);
            EXPECT_EQ(t->split, splits[i]);
            float v[2];
            std::memcpy(v, t->data, 8);
            EXPECT_EQ(v[0], (float)(i + 1));
            EXPECT_EQ(v[1], -(float)(i + 1));
        }
        EXPECT_EQ(*f->get_str("general.architecture"), "deepseek4");  // metadata comes from the first part
    }

    auto expect_open_error = [&](const fs::path& p, const std::string& part_of_message) {
        auto r = GgufFile::open(p.string());
        ASSERT_FALSE(r.ok()) << p;
        EXPECT_NE(r.error().find(part_of_message), std::string::npos) << r.error();
    };
    // Opening a later part directly points at the first one.
    expect_open_error(part(2), "first part");

    // A part whose split.no is wrong.
    write_part(part(2), 2, 3, 5, {{"c", 3}});
    expect_open_error(part(1), "split.no = 2");
    // A tensor present in two parts.
    write_part(part(2), 1, 3, 5, {{"a", 3}});
    expect_open_error(part(1), "'a'");
    // split.tensors.count (from the first part) disagreeing with the parts.
    write_part(part(2), 1, 3, 5, {{"c", 3}});
    write_part(part(1), 0, 3, 7, {{"a", 1}, {"b", 2}});
    expect_open_error(part(1), "split.tensors.count");
    write_part(part(1), 0, 3, 5, {{"a", 1}, {"b", 2}});
    ASSERT_TRUE(GgufFile::open(part(1).string()).ok());

    // A missing part is named.
    fs::remove(part(3));
    expect_open_error(part(1), "m-00003-of-00003.gguf");
    // A first part whose name does not follow the pattern.
    fs::copy_file(part(1), dir / "renamed.gguf");
    expect_open_error(dir / "renamed.gguf", "-00001-of-");
    fs::remove_all(dir);
}

TEST(GgufGolden, ModelsMatchTheirManifests) {
    int checked = 0;
    for (const char* set : {"flash-mini", "pro-mini", "quant-mini"}) {
        const fs::path dir = fs::path(kShared) / "golden" / set;
        if (!fs::exists(dir / "model.gguf")) continue;
        SCOPED_TRACE(set);
        auto f = open_ok(dir / "model.gguf");
        ASSERT_TRUE(f);
        ++checked;
        std::ifstream in(dir / "manifest.json");
        const nlohmann::json m = nlohmann::json::parse(in);
        const auto& c = m["config"];
        EXPECT_EQ(f->version(), 3u);
        EXPECT_EQ(*f->get_str("general.architecture"), "deepseek4");
        EXPECT_EQ(*f->get_u32("deepseek4.embedding_length"), c["dim"].get<uint32_t>());
        EXPECT_EQ(*f->get_u32("deepseek4.vocab_size"), c["vocab_size"].get<uint32_t>());
        EXPECT_EQ(*f->get_u32("deepseek4.attention.head_count"), c["n_heads"].get<uint32_t>());
        EXPECT_EQ(*f->get_u32("deepseek4.expert_count"), c["n_routed_experts"].get<uint32_t>());
        const uint32_t n_mtp = c.value("n_mtp_layers", 0u);
        const uint32_t blocks = *f->get_u32("deepseek4.block_count");
        EXPECT_TRUE(blocks == c["n_layers"].get<uint32_t>() + n_mtp || blocks == c["n_layers"].get<uint32_t>())
            << blocks;

        // Every tensor lies inside the file, aligned, and the embedding has the manifest's shape.
        const uint64_t size = fs::file_size(dir / "model.gguf");
        for (const GgufTensor& t : f->tensors()) {
            EXPECT_LE(t.file_offset + t.n_bytes, size) << t.name;
            EXPECT_EQ(t.file_offset % f->alignment(), 0u) << t.name;
        }
        const GgufTensor* emb = f->tensor("token_embd.weight");
        ASSERT_TRUE(emb);
        EXPECT_EQ(emb->ne[0], c["dim"].get<int64_t>());
        EXPECT_EQ(emb->ne[1], c["vocab_size"].get<int64_t>());
        // quant-mini lists the ggml type id of its quantized tensors.
        if (m.contains("tensor_types")) {
            for (const auto& [name, id] : m["tensor_types"].items()) {
                const GgufTensor* t = f->tensor(name);
                ASSERT_TRUE(t) << name;
                EXPECT_EQ((uint32_t)t->type, id.get<uint32_t>()) << name;
            }
        }
    }
    if (checked == 0) GTEST_SKIP() << "no golden models under " << kShared;
}

TEST(GgufGolden, VocabMatchesTokenizerJson) {
    const fs::path dir = fs::path(kShared) / "fixtures/tokenizer/deepseek_v3";
    if (!fs::exists(dir / "vocab.gguf")) GTEST_SKIP() << "no vocab fixture";
    auto f = open_ok(dir / "vocab.gguf");
    ASSERT_TRUE(f);
    EXPECT_TRUE(f->tensors().empty());
    auto tokens = f->get_arr_str("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.error();
    auto types = f->get_arr_i32("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.ok()) << types.error();
    EXPECT_EQ(types->size(), tokens->size());
    auto merges = f->get_arr_str("tokenizer.ggml.merges");
    ASSERT_TRUE(merges.ok()) << merges.error();

    std::ifstream in(dir / "tokenizer.json");
    const nlohmann::json tj = nlohmann::json::parse(in);
    const auto& vocab = tj["model"]["vocab"];
    size_t matched = 0;
    for (const auto& [tok, id] : vocab.items()) {
        const size_t i = id.get<size_t>();
        ASSERT_LT(i, tokens->size()) << tok;
        EXPECT_EQ((*tokens)[i], tok) << "id " << i;
        ++matched;
    }
    EXPECT_GT(matched, 100000u);
    EXPECT_EQ(merges->size(), tj["model"]["merges"].size());
}

TEST(InspectCli, PrintsReportAndDumpsDequantizedRows) {
    if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
    const fs::path dir = test_dir();
    // Values chosen so F16, BF16 and Q8_0 hold them exactly; the expected floats come from the format
    // definitions, not from the engine's dequantizer.
    std::vector<float> vals(64 * 3);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = (float)((int)i - 90) * 0.5f;
    std::vector<uint16_t> f16, bf16;
    for (float x : vals) {
        f16.push_back(f32_to_f16(x));
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        bf16.push_back((uint16_t)(bits >> 16));  // exact: these values have at most 8 significant bits
    }
    // Q8_0: per 32 values an f16 scale d then 32 int8 q; value = d * q. d = 0.5 and q = 2 * value.
    std::vector<uint8_t> q8;
    for (size_t b = 0; b < vals.size() / 32; ++b) {
        const uint16_t d = f32_to_f16(0.5f);
        q8.push_back((uint8_t)(d & 0xff));
        q8.push_back((uint8_t)(d >> 8));
        for (size_t j = 0; j < 32; ++j) q8.push_back((uint8_t)(int8_t)(vals[b * 32 + j] * 2.0f));
    }
    GgufWriter w;
    w.set_str("general.architecture", "test");
    ASSERT_TRUE(w.add_tensor_data("t.f32", GgmlType::F32, {64, 3}, as_bytes(vals)).ok());
    ASSERT_TRUE(w.add_tensor_data("t.f16", GgmlType::F16, {32, 2, 3}, as_bytes(f16)).ok());
    ASSERT_TRUE(w.add_tensor_data("t.bf16", GgmlType::BF16, {64, 3}, as_bytes(bf16)).ok());
    ASSERT_TRUE(w.add_tensor_data("t.q8_0", GgmlType::Q8_0, {64, 3}, q8).ok());
    ASSERT_TRUE(w.add_tensor_data("t.i64", GgmlType::I64, {2}, std::vector<uint8_t>(16)).ok());
    const fs::path model = dir / "t.gguf";
    ASSERT_TRUE(w.write(model.string()).ok());

    CliResult r = run_dsv4("inspect " + model.string());
    ASSERT_EQ(r.status, 0) << r.output;
    for (const char* s : {"GGUF v3", "general.architecture", "\"test\"", "no DeepSeek-V4 model config", "t.q8_0",
                          "Q8_0", "[32, 2, 3]", "totals by type"})
        EXPECT_NE(r.output.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.output;
    r = run_dsv4("inspect --no-tensors " + model.string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("[32, 2, 3]"), std::string::npos) << r.output;

    for (const char* name : {"t.f32", "t.f16", "t.bf16", "t.q8_0"}) {
        SCOPED_TRACE(name);
        const fs::path out = dir / (std::string(name) + ".f32");
        r = run_dsv4("inspect " + model.string() + " --tensor " + name + " --dequant " + out.string());
        ASSERT_EQ(r.status, 0) << r.output;
        ASSERT_EQ(fs::file_size(out), vals.size() * 4);
        std::vector<float> got(vals.size());
        std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(got.data()), (std::streamsize)(got.size() * 4));
        EXPECT_EQ(got, vals);
    }
    r = run_dsv4("inspect " + model.string() + " --tensor t.i64 --dequant " + (dir / "x.f32").string());
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find("I64"), std::string::npos) << r.output;
    r = run_dsv4("inspect " + model.string() + " --tensor nope");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find("'nope'"), std::string::npos) << r.output;
    r = run_dsv4("inspect " + (dir / "absent.gguf").string());
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find("absent.gguf"), std::string::npos) << r.output;
    fs::remove_all(dir);
}
