// Random-weight models built in memory (synth_source / synth_model, `dsv4 bench --synth`) against the file
// synth_write writes with the same seed: the same metadata, tensor table and tensor bytes, bit-identical
// logits on the CPU backend (in place, and through a staging buffer as a GPU backend loads), and errors
// rather than crashes for bad input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "model/synth.h"
#include "util/forwarding_backend.h"

namespace dsv4 {
namespace {

struct TmpFile {
    explicit TmpFile(const std::string& tag)
        : path((std::filesystem::temp_directory_path() /
                ("dsv4_test_synth_memory_" + std::to_string(::getpid()) + "_" + tag + ".gguf"))
                   .string()) {}
    ~TmpFile() { std::remove(path.c_str()); }
    std::string path;
};

SynthHparams tiny() {
    auto hp = synth_preset("tiny");
    EXPECT_TRUE(hp.ok());
    return *hp;
}

SynthWriteOptions options(uint64_t seed, int threads) {
    SynthWriteOptions o;
    o.seed = seed;
    o.n_threads = threads;
    return o;
}

void write_tiny(const std::string& path, uint64_t seed) {
    Status st = synth_write(tiny(), SynthTypes{}, options(seed, 2), path);
    ASSERT_TRUE(st.ok()) << st.error();
}

// A CPU backend that makes weights resident the way a GPU backend does: it copies the bytes in weight_data
// and says it is not host memory, so the loader hands it transient bytes from the staging buffer.
class CopyingBackend final : public test::ForwardingBackend {
public:
    explicit CopyingBackend(int threads) : ForwardingBackend(threads) {}
    ~CopyingBackend() override {
        for (uint8_t* p : copies_) ::operator delete[](p, std::align_val_t{64});
    }
    const char* name() const override { return "cpu-copying"; }
    bool is_host() const override { return false; }
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override {
        auto* p = static_cast<uint8_t*>(::operator new[](std::max<size_t>(n_bytes, 1), std::align_val_t{64}));
        std::memcpy(p, host_bytes, n_bytes);
        copies_.push_back(p);
        return p;
    }

private:
    std::vector<uint8_t*> copies_;
};

// Everything a short session reads out of a model: the logits of a prefill (every row), of three decode
// steps, and of the MTP block on the prefill's final streams.
std::vector<float> session_logits(Model& m, bool quant_sim) {
    const int64_t V = m.config().n_vocab;
    std::mt19937 rng(123);
    std::vector<int32_t> toks(12);
    for (auto& t : toks) t = (int32_t)(rng() % V);
    const int64_t n_prefill = 9;
    auto cache = m.new_cache((int64_t)toks.size() + 1, true);
    StepRunner runner(m);  // decode steps through step graphs, as the engine runs them
    StepOptions opt;
    opt.quant_sim = quant_sim;
    opt.all_logits = true;
    std::vector<float> out, logits, hidden;
    Status s = runner.step(*cache, std::span<const int32_t>(toks.data(), n_prefill), opt, &logits, &hidden);
    EXPECT_TRUE(s.ok()) << s.error();
    out.insert(out.end(), logits.begin(), logits.end());
    if (m.has_mtp()) {
        // MTP on the prefill streams: the token after each position is the next prompt token.
        s = m.mtp_step(*cache, hidden, std::span<const int32_t>(toks.data() + 1, n_prefill), opt, &logits);
        EXPECT_TRUE(s.ok()) << s.error();
        out.insert(out.end(), logits.begin(), logits.end());
    }
    for (int64_t i = n_prefill; i < (int64_t)toks.size(); ++i) {
        s = runner.step(*cache, std::span<const int32_t>(&toks[i], 1), opt, &logits);
        EXPECT_TRUE(s.ok()) << s.error();
        out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SynthMemory, HeaderAndTensorBytesMatchTheFile) {
    TmpFile tmp("bytes");
    write_tiny(tmp.path, 11);
    auto file = GgufFile::open(tmp.path);
    ASSERT_TRUE(file.ok()) << file.error();
    // A different thread count than the file's: the bytes must not depend on it.
    auto src = synth_source(tiny(), SynthTypes{}, options(11, 3));
    ASSERT_TRUE(src.ok()) << src.error();
    const GgufFile& f = **file;
    const GgufFile& g = *src->file;

    ASSERT_EQ(g.metadata().size(), f.metadata().size());
    const size_t all = std::numeric_limits<size_t>::max();
    for (size_t i = 0; i < f.metadata().size(); ++i) {
        EXPECT_EQ(g.metadata()[i].first, f.metadata()[i].first);
        EXPECT_EQ(gguf_value_str(g.metadata()[i].second, all, all), gguf_value_str(f.metadata()[i].second, all, all))
            << f.metadata()[i].first;
    }
    EXPECT_EQ(g.data_offset(), f.data_offset());
    ASSERT_EQ(g.tensors().size(), f.tensors().size());
    size_t n_compared = 0;
    for (size_t i = 0; i < f.tensors().size(); ++i) {
        const GgufTensor& a = f.tensors()[i];
        const GgufTensor& b = g.tensors()[i];
        EXPECT_EQ(b.name, a.name);
        EXPECT_EQ(b.type, a.type) << a.name;
        EXPECT_EQ(b.shape_str(), a.shape_str()) << a.name;
        EXPECT_EQ(b.file_offset, a.file_offset) << a.name;
        ASSERT_EQ(b.n_bytes, a.n_bytes) << a.name;
        EXPECT_EQ(b.data, nullptr) << "a header-only file has no tensor data";
        // Both delivery modes: kept (CPU weights) and staged (what a GPU backend gets).
        auto bytes = src->tensors->bytes(b, i % 2 == 0);
        ASSERT_TRUE(bytes.ok()) << bytes.error();
        EXPECT_EQ(std::memcmp(*bytes, a.data, a.n_bytes), 0) << "tensor " << a.name << " differs from the file";
        ++n_compared;
    }
    EXPECT_EQ(n_compared, f.tensors().size());
    EXPECT_GT(n_compared, 100u);
}

TEST(SynthMemory, LogitsBitIdenticalToTheFileModel) {
    TmpFile tmp("logits");
    write_tiny(tmp.path, 5);
    auto backend = make_cpu_backend(2);
    auto from_file = Model::load(tmp.path, *backend);
    ASSERT_TRUE(from_file.ok()) << from_file.error();
    auto in_memory = synth_model(tiny(), SynthTypes{}, options(5, 2), *backend);
    ASSERT_TRUE(in_memory.ok()) << in_memory.error();
    ASSERT_TRUE((*in_memory)->has_mtp());
    EXPECT_EQ((*in_memory)->config().n_layer, (*from_file)->config().n_layer);
    EXPECT_EQ((*in_memory)->weights().bytes_matrices, (*from_file)->weights().bytes_matrices);
    for (bool qsim : {true, false}) {
        const std::vector<float> want = session_logits(**from_file, qsim);
        const std::vector<float> got = session_logits(**in_memory, qsim);
        ASSERT_FALSE(want.empty());
        EXPECT_TRUE(bit_identical(got, want)) << (qsim ? "quant_sim" : "exact") << " logits differ";
    }
    // A different seed is a different model.
    auto other = synth_model(tiny(), SynthTypes{}, options(6, 2), *backend);
    ASSERT_TRUE(other.ok()) << other.error();
    EXPECT_FALSE(bit_identical(session_logits(**other, true), session_logits(**from_file, true)));
}

TEST(SynthMemory, StagedLoadOntoACopyingBackendMatchesTheFile) {
    TmpFile tmp("staged");
    write_tiny(tmp.path, 8);
    auto cpu = make_cpu_backend(2);
    auto from_file = Model::load(tmp.path, *cpu);
    ASSERT_TRUE(from_file.ok()) << from_file.error();
    CopyingBackend device_like(2);
    auto staged = synth_model(tiny(), SynthTypes{}, options(8, 2), device_like);
    ASSERT_TRUE(staged.ok()) << staged.error();
    EXPECT_TRUE(bit_identical(session_logits(**staged, true), session_logits(**from_file, true)));
}

TEST(SynthMemory, InvalidInputIsAnErrorNotACrash) {
    auto backend = make_cpu_backend(1);
    auto expect_error = [&](const SynthHparams& hp, const SynthTypes& types, const std::string& needle) {
        auto m = synth_model(hp, types, options(0, 1), *backend);
        ASSERT_FALSE(m.ok()) << "expected an error mentioning '" << needle << "'";
        EXPECT_NE(m.error().find(needle), std::string::npos) << m.error();
    };
    SynthHparams hp = tiny();
    hp.o_groups = 3;  // 4 heads do not split into 3 groups
    expect_error(hp, SynthTypes{}, "o_groups");
    hp = tiny();
    hp.compress_ratios.pop_back();
    expect_error(hp, SynthTypes{}, "compress_ratios");
    hp = tiny();
    hp.n_layer = 0;
    hp.compress_ratios.clear();
    expect_error(hp, SynthTypes{}, "n_layer");
    hp = tiny();
    hp.rope_dim = hp.head_dim + 2;
    expect_error(hp, SynthTypes{}, "rope_dim");
    SynthTypes bad;
    bad.expert_down = GgmlType::Q8_K;  // an activation format, not a weight format
    expect_error(tiny(), bad, "Q8_K");
}

TEST(SynthMemory, HeaderOnlyParseKeepsOffsetsAndRejectsTruncation) {
    GgufWriter w;
    w.set_str("general.architecture", "test");
    w.set_arr_i32("test.list", {1, 2, 3});
    ASSERT_TRUE(w.add_tensor_data("a", GgmlType::F32, {3}, std::vector<uint8_t>(12, 1)).ok());
    ASSERT_TRUE(w.add_tensor_data("b", GgmlType::F16, {32, 2}, std::vector<uint8_t>(128, 2)).ok());
    auto header = w.header();
    ASSERT_TRUE(header.ok()) << header.error();
    auto f = GgufFile::parse_header(*header, "header");
    ASSERT_TRUE(f.ok()) << f.error();
    ASSERT_EQ((*f)->tensors().size(), 2u);
    EXPECT_EQ((*f)->tensors()[0].data, nullptr);
    EXPECT_EQ((*f)->tensors()[1].file_offset - (*f)->tensors()[0].file_offset, 32u);  // 12 bytes, aligned to 32
    auto list = (*f)->get_arr_i32("test.list");
    ASSERT_TRUE(list.ok()) << list.error();
    EXPECT_EQ(*list, (std::vector<int32_t>{1, 2, 3}));
    // Every truncation is an error naming the input, never a crash.
    for (size_t n = 0; n < header->size(); ++n) {
        auto bad = GgufFile::parse_header(std::vector<uint8_t>(header->begin(), header->begin() + n), "cut");
        ASSERT_FALSE(bad.ok()) << "accepted a header cut to " << n << " bytes";
        EXPECT_EQ(bad.error().rfind("cut", 0), 0u) << bad.error();
    }
}

TEST(SynthMemory, HeaderOnlyFileWithoutASourceIsAnError) {
    auto src = synth_source(tiny(), SynthTypes{}, options(0, 1));
    ASSERT_TRUE(src.ok()) << src.error();
    auto backend = make_cpu_backend(1);
    auto m = Model::load(std::move(src->file), nullptr, *backend);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("has no data"), std::string::npos) << m.error();
}

}  // namespace
}  // namespace dsv4
