// The GGUF reader on damaged and hostile input: hand-built files with one field broken at a time (huge
// counts and lengths, bad type ids, bad shapes, offsets and alignments), truncation at every byte and at
// every structure boundary, and thousands of seeded random byte flips. Each case must give an Error (or,
// for a harmless flip, a table whose every range is still inside the buffer): no crash, no hang, and no
// large allocation (checked by counting the largest operator-new request).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace fs = std::filesystem;
using namespace dsv4;

// ---- allocation probe ----
// The largest single operator-new request since the last reset. A global is unavoidable here: operator new
// has no context parameter. The replacements use malloc/free in pairs, which ASan accepts; GCC cannot see
// that pairing once they are inlined, hence the pragma.
static std::atomic<size_t> g_max_alloc{0};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(size_t n) {
    size_t cur = g_max_alloc.load(std::memory_order_relaxed);
    while (n > cur && !g_max_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
    }
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {

// No parse of a file of a few MB may ask for more than this in one piece.
constexpr size_t kAllocLimit = size_t(64) << 20;

// ---- a hand-built GGUF, one knob per field ----

struct KvSpec {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;
};

struct TensorSpec {
    std::string name;
    uint32_t n_dims;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
};

struct FileSpec {
    char magic[4] = {'G', 'G', 'U', 'F'};
    uint32_t version = 3;
    std::optional<uint64_t> n_tensors, n_kv;  // override the real counts
    std::vector<KvSpec> kvs;
    std::vector<TensorSpec> tensors;
    uint64_t pad_align = 32;  // padding written before the data section
    uint64_t data_bytes = 0;
};

template <class T>
void put(std::vector<uint8_t>& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& b, std::string_view s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
}

template <class T>
KvSpec kv_scalar(std::string key, uint32_t type, T v) {
    KvSpec k{std::move(key), type, {}};
    put<T>(k.payload, v);
    return k;
}
KvSpec kv_str(std::string key, std::string_view s) {
    KvSpec k{std::move(key), 8, {}};
    put_str(k.payload, s);
    return k;
}
KvSpec kv_arr_u32(std::string key, const std::vector<uint32_t>& v) {
    KvSpec k{std::move(key), 9, {}};
    put<uint32_t>(k.payload, 4);
    put<uint64_t>(k.payload, v.size());
    for (uint32_t x : v) put<uint32_t>(k.payload, x);
    return k;
}
KvSpec kv_arr_str(std::string key, const std::vector<std::string>& v) {
    KvSpec k{std::move(key), 9, {}};
    put<uint32_t>(k.payload, 8);
    put<uint64_t>(k.payload, v.size());
    for (const auto& s : v) put_str(k.payload, s);
    return k;
}

std::vector<uint8_t> build(const FileSpec& s) {
    std::vector<uint8_t> b(s.magic, s.magic + 4);
    put<uint32_t>(b, s.version);
    put<uint64_t>(b, s.n_tensors.value_or(s.tensors.size()));
    put<uint64_t>(b, s.n_kv.value_or(s.kvs.size()));
    for (const KvSpec& k : s.kvs) {
        put_str(b, k.key);
        put<uint32_t>(b, k.type);
        b.insert(b.end(), k.payload.begin(), k.payload.end());
    }
    for (const TensorSpec& t : s.tensors) {
        put_str(b, t.name);
        put<uint32_t>(b, t.n_dims);
        for (uint64_t n : t.ne) put<uint64_t>(b, n);
        put<uint32_t>(b, t.type);
        put<uint64_t>(b, t.offset);
    }
    while (b.size() % s.pad_align) b.push_back(0);
    for (uint64_t i = 0; i < s.data_bytes; ++i) b.push_back((uint8_t)(i * 7 + 1));
    return b;
}

// A valid file: F32 [8, 2] (64 bytes), Q8_0 [32] (34 bytes), F16 [4] (8 bytes), 32-byte alignment.
FileSpec base_spec() {
    FileSpec s;
    s.kvs = {kv_str("general.architecture", "test"), kv_scalar<uint32_t>("general.alignment", 4, 32),
             kv_arr_str("tokenizer.ggml.tokens", {"a", "bc", ""}), kv_arr_u32("ratios", {0, 4, 128}),
             kv_scalar<uint8_t>("flag", 7, 1)};
    s.tensors = {{"blk.0.attn_q_a.weight", 2, {8, 2}, 0, 0}, {"q", 1, {32}, 8, 64}, {"h", 1, {4}, 1, 128}};
    s.data_bytes = 136;
    return s;
}

// Parses a private heap copy of exactly `n` bytes, so ASan flags any read past the end.
Result<std::unique_ptr<GgufFile>> parse_copy(const uint8_t* data, size_t n) {
    std::unique_ptr<uint8_t[]> copy(new uint8_t[n ? n : 1]);
    if (n) std::memcpy(copy.get(), data, n);
    g_max_alloc = 0;
    auto r = GgufFile::parse(copy.get(), n, "damaged.gguf");
    EXPECT_LT(g_max_alloc.load(), kAllocLimit + n) << "a parse of " << n << " bytes asked for " << g_max_alloc.load();
    if (r.ok()) {
        // A table that parsed must stay inside the buffer; the caller's copy dies here, so check now.
        for (const GgufTensor& t : (*r)->tensors()) {
            EXPECT_GE(t.data, copy.get()) << t.name;
            EXPECT_LE(t.data + t.n_bytes, copy.get() + n) << t.name;
        }
    }
    return r;
}

Result<std::unique_ptr<GgufFile>> parse_vec(const std::vector<uint8_t>& b) { return parse_copy(b.data(), b.size()); }

void expect_error(const FileSpec& s, const std::string& want, const char* what) {
    auto r = parse_vec(build(s));
    ASSERT_FALSE(r.ok()) << what << ": parsed a damaged file";
    EXPECT_NE(r.error().find(want), std::string::npos) << what << ": error '" << r.error() << "' lacks '" << want << "'";
    EXPECT_EQ(r.error().rfind("damaged.gguf: ", 0), 0u) << what << ": error does not name the file: " << r.error();
}

// Independent invariants of a table that parsed: shape, size and placement agree with each other.
void check_invariants(const GgufFile& f, const uint8_t* base, size_t size) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const GgufTensor& t : f.tensors()) {
        const GgmlTypeTraits& tr = ggml_traits(t.type);
        EXPECT_LE(t.n_dims, 4u);
        for (int64_t ne : t.ne) EXPECT_GE(ne, 0);
        EXPECT_EQ(t.ne[0] % tr.block_elems, 0);
        EXPECT_EQ(t.n_bytes, (size_t)(t.n_elems() / tr.block_elems) * tr.block_bytes) << t.name;
        EXPECT_EQ((t.file_offset - f.data_offset()) % f.alignment(), 0u) << t.name;
        EXPECT_EQ(t.data, base + t.file_offset);
        EXPECT_LE(t.file_offset + t.n_bytes, size);
        if (t.n_bytes) ranges.emplace_back(t.file_offset, t.file_offset + t.n_bytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

std::vector<uint8_t> read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

uint64_t data_end(const GgufFile& f) {
    uint64_t end = 0;
    for (const GgufTensor& t : f.tensors()) end = std::max<uint64_t>(end, t.file_offset + t.n_bytes);
    return end;
}

// Cuts before the end of the last tensor's data must fail; cuts after it (inside trailing padding) may not.
void truncate_every_byte(const std::vector<uint8_t>& b, const char* what) {
    auto whole = parse_vec(b);
    ASSERT_TRUE(whole.ok()) << what << ": " << whole.error();
    const uint64_t end = data_end(**whole);
    for (size_t cut = 0; cut < b.size(); ++cut) {
        auto r = parse_copy(b.data(), cut);
        if (cut < end) {
            EXPECT_FALSE(r.ok()) << what << ": parsed when cut to " << cut << " of " << b.size() << " bytes";
        }
    }
}

}  // namespace

TEST(GgufDamaged, BaseFileIsValid) {
    const std::vector<uint8_t> b = build(base_spec());
    ASSERT_TRUE(parse_vec(b).ok());
    auto r = GgufFile::parse(b.data(), b.size());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((*r)->tensors().size(), 3u);
    EXPECT_EQ((*r)->tensor("q")->n_bytes, 34u);
    check_invariants(**r, b.data(), b.size());
}

TEST(GgufDamaged, HeaderMagicAndVersion) {
    FileSpec s = base_spec();
    std::memcpy(s.magic, "GGML", 4);
    expect_error(s, "not a GGUF file", "bad magic");
    s = base_spec();
    s.version = 1;
    expect_error(s, "v1", "version 1");
    s.version = 4;
    expect_error(s, "version 4", "version 4");
    s.version = 0x03000000;
    expect_error(s, "big-endian", "byte-swapped version");
    s.version = 2;  // v2 has the same layout as v3
    EXPECT_TRUE(parse_vec(build(s)).ok());
}

TEST(GgufDamaged, HugeCountsFailFast) {
    for (uint64_t n : {uint64_t(1) << 60, ~uint64_t(0), uint64_t(1) << 63, uint64_t(1000)}) {
        FileSpec s = base_spec();
        s.n_tensors = n;
        expect_error(s, "tensors", "huge n_tensors");
        s = base_spec();
        s.n_kv = n;
        expect_error(s, "metadata", "huge n_kv");
    }
    // One more entry than present: runs into the tensor infos and fails there.
    FileSpec s = base_spec();
    s.n_kv = s.kvs.size() + 1;
    EXPECT_FALSE(parse_vec(build(s)).ok());
    s = base_spec();
    s.n_tensors = s.tensors.size() + 1;
    EXPECT_FALSE(parse_vec(build(s)).ok());
}

TEST(GgufDamaged, HugeStringAndArrayLengths) {
    const uint64_t lens[] = {~uint64_t(0), ~uint64_t(0) - 7, uint64_t(1) << 63, uint64_t(1) << 62, uint64_t(1) << 61,
                             (uint64_t(1) << 62) + 1, 1000000};
    for (uint64_t len : lens) {
        SCOPED_TRACE(len);
        // A string value whose length field lies.
        FileSpec s = base_spec();
        s.kvs[0].payload.clear();
        put<uint64_t>(s.kvs[0].payload, len);
        s.kvs[0].payload.insert(s.kvs[0].payload.end(), {'t', 'e', 's', 't'});
        expect_error(s, "'general.architecture'", "huge string length");
        // A key whose length field lies.
        {
            std::vector<uint8_t> b = build(base_spec());
            const std::string key = "flag";
            auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
            ASSERT_NE(it, b.end());
            std::memcpy(&*(it - 8), &len, 8);
            EXPECT_FALSE(parse_vec(b).ok());
        }

        // Array lengths for 1-, 4- and 8-byte elements and for strings.
        for (uint32_t et : {0u, 4u, 10u, 8u, 7u}) {
            s = base_spec();
            KvSpec a{"arr", 9, {}};
            put<uint32_t>(a.payload, et);
            put<uint64_t>(a.payload, len);
            put<uint64_t>(a.payload, 1);  // a few payload bytes
            s.kvs.push_back(a);
            expect_error(s, "'arr'", "huge array length");
        }
        // A tensor name length.
        s = base_spec();
        std::vector<uint8_t> b = build(s);
        // The first tensor info starts right after the metadata: find its name and corrupt its length.
        const std::string name = "blk.0.attn_q_a.weight";
        auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
        ASSERT_NE(it, b.end());
        std::memcpy(&*(it - 8), &len, 8);
        EXPECT_FALSE(parse_vec(b).ok());
    }
}

TEST(GgufDamaged, BadValueTypes) {
    for (uint32_t t : {13u, 100u, 0xffffffffu}) {
        FileSpec s = base_spec();
        s.kvs.push_back(kv_scalar<uint32_t>("weird", t, 0));
        expect_error(s, "'weird' has unknown value type", "bad value type");
        s = base_spec();
        KvSpec a{"weird_arr", 9, {}};
        put<uint32_t>(a.payload, t);
        put<uint64_t>(a.payload, 1);
        put<uint32_t>(a.payload, 0);
        s.kvs.push_back(a);
        expect_error(s, "'weird_arr'", "bad array element type");
    }
    FileSpec s = base_spec();
    KvSpec nested{"nested", 9, {}};
    put<uint32_t>(nested.payload, 9);
    put<uint64_t>(nested.payload, 1);
    put<uint32_t>(nested.payload, 4);
    put<uint64_t>(nested.payload, 1);
    put<uint32_t>(nested.payload, 5);
    s.kvs.push_back(nested);
    expect_error(s, "array of arrays", "nested array");

    s = base_spec();
    s.kvs.push_back(kv_scalar<uint8_t>("b", 7, 2));
    expect_error(s, "bool", "bool value 2");
    s = base_spec();
    s.kvs.push_back(kv_str("general.architecture", "again"));
    expect_error(s, "duplicate metadata key 'general.architecture'", "duplicate key");
}

TEST(GgufDamaged, BadTensorTypes) {
    for (uint32_t t : {42u, 4u, 5u, 31u, 36u, 1000u, 0xffffffffu}) {
        FileSpec s = base_spec();
        s.tensors[0].type = t;
        expect_error(s, "tensor 'blk.0.attn_q_a.weight' has unknown ggml type " + std::to_string(t), "bad tensor type");
    }
}

TEST(GgufDamaged, BadShapes) {
    FileSpec s = base_spec();
    s.tensors[1].n_dims = 5;
    s.tensors[1].ne = {32, 1, 1, 1, 1};
    expect_error(s, "'q' has 5 dimensions", "n_dims 5");
    s.tensors[1].n_dims = 0xffffffffu;
    s.tensors[1].ne = {32};
    expect_error(s, "'q' has 4294967295 dimensions", "n_dims 2^32-1");

    const std::vector<std::vector<uint64_t>> overflowing = {
        {uint64_t(1) << 62, 4}, {uint64_t(1) << 32, uint64_t(1) << 32}, {uint64_t(1) << 63, 1},
        {~uint64_t(0), 1}, {2, 2, uint64_t(1) << 61, 2}, {uint64_t(1) << 61, 1}};
    for (const auto& ne : overflowing) {
        s = base_spec();
        s.tensors[0].n_dims = (uint32_t)ne.size();
        s.tensors[0].ne = ne;
        EXPECT_FALSE(parse_vec(build(s)).ok()) << ne[0];
    }
    // Element count fits in int64 but the byte count of an 8-byte type does not.
    s = base_spec();
    s.tensors[0].type = 28;  // F64
    s.tensors[0].ne = {uint64_t(1) << 61, 2};
    expect_error(s, "bytes", "byte count overflow");

    s = base_spec();
    s.tensors[1].ne = {33};
    expect_error(s, "not a multiple of the block size 32", "Q8_0 ne[0] = 33");

    // Empty tensors are allowed (ggml accepts ne = 0) and take no bytes; 0-D tensors hold one element.
    s = base_spec();
    s.tensors.push_back({"empty", 2, {0, 5}, 0, 160});
    s.tensors.push_back({"scalar", 0, {}, 0, 160});
    s.data_bytes = 164;
    auto r = parse_vec(build(s));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((*r)->tensor("empty")->n_bytes, 0u);
    EXPECT_EQ((*r)->tensor("scalar")->n_bytes, 4u);

    s = base_spec();
    s.tensors[1].name = "blk.0.attn_q_a.weight";
    expect_error(s, "duplicate tensor name 'blk.0.attn_q_a.weight'", "duplicate tensor");
    s = base_spec();
    s.tensors[1].name = "";
    expect_error(s, "empty name", "empty tensor name");
}

TEST(GgufDamaged, BadOffsets) {
    FileSpec s = base_spec();
    s.tensors[2].offset = 160;  // aligned, but the data section ends at 136
    expect_error(s, "'h' data", "offset past the end");
    s.tensors[2].offset = uint64_t(1) << 40;
    expect_error(s, "'h' data", "offset far past the end");
    s.tensors[2].offset = ~uint64_t(0) & ~uint64_t(31);  // offset + bytes wraps around
    expect_error(s, "'h' data", "wrapping offset");
    s = base_spec();
    s.tensors[1].offset = 65;
    expect_error(s, "'q' data offset 65 is not a multiple of the alignment 32", "misaligned");
    s.tensors[1].offset = 16;
    expect_error(s, "not a multiple of the alignment 32", "misaligned 16");
    s = base_spec();
    s.tensors[1].offset = 32;  // inside the first tensor's 64 bytes
    expect_error(s, "overlap", "overlapping tensors");
    s = base_spec();
    s.data_bytes = 135;  // the last tensor's final byte is missing
    expect_error(s, "'h' data", "short data section");
}

TEST(GgufDamaged, BadAlignment) {
    for (uint32_t a : {0u, 3u, 48u, 0xffffffffu, 100u}) {
        FileSpec s = base_spec();
        s.kvs[1] = kv_scalar<uint32_t>("general.alignment", 4, a);
        expect_error(s, "general.alignment is " + std::to_string(a), "bad alignment value");
    }
    FileSpec s = base_spec();
    s.kvs[1] = kv_scalar<uint64_t>("general.alignment", 10, 32);
    expect_error(s, "general.alignment has type u64", "alignment of type u64");
    s.kvs[1] = kv_str("general.alignment", "32");
    expect_error(s, "general.alignment has type string", "alignment of type string");

    // A larger alignment moves the data section; offsets must follow it.
    s = base_spec();
    s.kvs[1] = kv_scalar<uint32_t>("general.alignment", 4, 64);
    s.pad_align = 64;
    s.tensors[2].offset = 128;
    auto r = parse_vec(build(s));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ((*r)->alignment(), 64u);
    EXPECT_EQ((*r)->data_offset() % 64, 0u);
    s.tensors[1].offset = 96;  // 32-aligned but not 64-aligned
    s.tensors[2].offset = 160;
    s.data_bytes = 168;
    expect_error(s, "alignment 64", "offset aligned to 32 only");
    // Alignment 1: no padding at all.
    s = base_spec();
    s.kvs[1] = kv_scalar<uint32_t>("general.alignment", 4, 1);
    s.pad_align = 1;
    s.tensors[1].offset = 64;
    s.tensors[2].offset = 98;
    s.data_bytes = 106;
    EXPECT_TRUE(parse_vec(build(s)).ok());
    // An alignment of 2^31 puts the data section far past the end of a small file.
    s = base_spec();
    s.kvs[1] = kv_scalar<uint32_t>("general.alignment", 4, 0x80000000u);
    expect_error(s, "past the end", "alignment 2^31");
}

TEST(GgufDamaged, TruncatedAtEveryByte) {
    truncate_every_byte(build(base_spec()), "hand-built file");

    // A writer-made file with every value type and a few tensors.
    const fs::path p = fs::temp_directory_path() / ("dsv4_damaged_" + std::to_string(::getpid()) + ".gguf");
    GgufWriter w;
    w.set_u8("u8", 1);
    w.set_i16("i16", -2);
    w.set_u64("u64", 3);
    w.set_f64("f64", 0.5);
    w.set_bool("bool", true);
    w.set_str("str", "text");
    w.set_arr_str("strs", {"x", "yy", ""});
    w.set_arr_f32("f32s", {1, 2, 3});
    w.set_arr_bool("bools", {true, false});
    ASSERT_TRUE(w.add_tensor_data("a", GgmlType::Q4_K, {256}, std::vector<uint8_t>(144, 3)).ok());
    ASSERT_TRUE(w.add_tensor_data("b", GgmlType::BF16, {3, 2}, std::vector<uint8_t>(12, 1)).ok());
    ASSERT_TRUE(w.add_tensor_data("c", GgmlType::MXFP4, {32, 2}, std::vector<uint8_t>(34, 9)).ok());
    ASSERT_TRUE(w.write(p.string()).ok());
    const std::vector<uint8_t> b = read_file(p);
    fs::remove(p);
    truncate_every_byte(b, "writer-made file");
}

TEST(GgufDamaged, SharedFilesTruncatedAtStructureBoundaries) {
    const fs::path shared = DSV4_SHARED_DIR;
    const fs::path model = shared / "golden/flash-mini/model.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no golden model";
    const std::vector<uint8_t> b = read_file(model);
    auto whole = parse_vec(b);
    ASSERT_TRUE(whole.ok()) << whole.error();
    const uint64_t end = data_end(**whole);
    // Every byte of the header, metadata and tensor infos is a structure boundary or inside one.
    for (size_t cut = 0; cut < (*whole)->data_offset(); ++cut)
        EXPECT_FALSE(parse_copy(b.data(), cut).ok()) << "cut at " << cut;
    // Each tensor's first and last byte (the table is checked without the data copied).
    for (const GgufTensor& t : (*whole)->tensors()) {
        for (uint64_t cut : {t.file_offset, t.file_offset + t.n_bytes - 1}) {
            if (cut >= end) continue;
            EXPECT_FALSE(GgufFile::parse(b.data(), cut).ok()) << t.name << " cut at " << cut;
        }
    }

    // The vocabulary: 5 MB of strings; cut inside and at the edges of a spread of them.
    const fs::path vocab = shared / "fixtures/tokenizer/deepseek_v3/vocab.gguf";
    const std::vector<uint8_t> v = read_file(vocab);
    std::mt19937_64 rng(1234);
    for (int i = 0; i < 60; ++i) {
        // The last 32 bytes may be padding after the metadata, which a vocab-only file does not need.
        const size_t cut = i < 16 ? (size_t)i * 3 : (size_t)(rng() % (v.size() - 32));
        g_max_alloc = 0;
        EXPECT_FALSE(GgufFile::parse(v.data(), cut).ok()) << "vocab cut at " << cut;
        EXPECT_LT(g_max_alloc.load(), kAllocLimit);
    }
}

TEST(GgufDamaged, RandomByteFlips) {
    std::vector<std::vector<uint8_t>> bases = {build(base_spec())};
    {
        FileSpec s = base_spec();
        s.kvs.push_back(kv_scalar<uint64_t>("u64", 10, 5));
        s.kvs.push_back(kv_scalar<double>("f64", 12, 0.5));
        s.tensors.push_back({"k", 3, {256, 1, 2}, 12, 160});  // Q4_K, 288 bytes
        s.data_bytes = 160 + 288;
        bases.push_back(build(s));
    }
    std::mt19937 rng(20240601);
    int parsed = 0, rejected = 0;
    for (const auto& base : bases) {
        ASSERT_TRUE(parse_vec(base).ok());
        for (int iter = 0; iter < 2500; ++iter) {
            std::vector<uint8_t> b = base;
            const int n_flips = 1 + (int)(rng() % 4);
            for (int k = 0; k < n_flips; ++k) {
                const size_t at = rng() % b.size();
                switch (rng() % 4) {
                    case 0: b[at] ^= (uint8_t)(1u << (rng() % 8)); break;  // one bit
                    case 1: b[at] = (uint8_t)rng(); break;                // any byte
                    case 2: b[at] = 0xff; break;                          // max out a length
                    default: b[at] = 0; break;
                }
            }
            auto r = parse_copy(b.data(), b.size());
            if (r.ok()) {
                ++parsed;
                // Re-parse the same bytes in a buffer that lives through the checks.
                auto again = GgufFile::parse(b.data(), b.size(), "again");
                ASSERT_TRUE(again.ok());
                check_invariants(**again, b.data(), b.size());
                for (const auto& [key, value] : (*again)->metadata()) (void)gguf_value_str(value);
            } else {
                ++rejected;
                EXPECT_FALSE(r.error().empty());
            }
        }
    }
    std::printf("random flips: %d parsed, %d rejected\n", parsed, rejected);
    // Both outcomes must occur, or the flips are not reaching the structure.
    EXPECT_GT(parsed, 0);
    EXPECT_GT(rejected, 1000);
}

TEST(GgufDamaged, InspectCliReportsTheError) {
    if (!fs::exists(DSV4_BIN)) GTEST_SKIP() << "dsv4 not built at " << DSV4_BIN;
    const fs::path dir = fs::temp_directory_path() / ("dsv4_damaged_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    FileSpec s = base_spec();
    s.tensors[0].type = 42;
    const std::vector<uint8_t> bad = build(s);
    const std::vector<uint8_t> good = build(base_spec());
    struct Case {
        std::string file;
        std::vector<uint8_t> bytes;
        std::string want;
    };
    const std::vector<Case> cases = {
        {"type42.gguf", bad, "tensor 'blk.0.attn_q_a.weight' has unknown ggml type 42"},
        {"cut.gguf", std::vector<uint8_t>(good.begin(), good.begin() + 100), "cut.gguf"},
        {"empty.gguf", {}, "empty.gguf"},
    };
    for (const Case& c : cases) {
        const fs::path p = dir / c.file;
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(c.bytes.data()), (std::streamsize)c.bytes.size());
        std::string out;
        std::FILE* pipe = ::popen((std::string(DSV4_BIN) + " inspect " + p.string() + " 2>&1").c_str(), "r");
        ASSERT_TRUE(pipe);
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
        const int st = ::pclose(pipe);
        ASSERT_TRUE(WIFEXITED(st)) << c.file << ": dsv4 inspect did not exit normally:\n" << out;
        EXPECT_NE(WEXITSTATUS(st), 0) << c.file << ":\n" << out;
        EXPECT_NE(out.find(c.want), std::string::npos) << c.file << ": output lacks '" << c.want << "':\n" << out;
    }
    fs::remove_all(dir);
}
