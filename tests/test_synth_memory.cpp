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
#include "model/deepseek4.h"
#include "model/synth.h"

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
class CopyingBackend final : public Backend {
public:
    explicit CopyingBackend(int threads) : b_(make_cpu_backend(threads)) {}
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

    void* alloc(size_t bytes) override { return b_->alloc(bytes); }
    void free(void* p) override { b_->free(p); }
    void upload(void* dst, const void* src, size_t bytes) override { b_->upload(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { b_->download(dst, src, bytes); }
    void copy(void* dst, const void* src, size_t bytes) override { b_->copy(dst, src, bytes); }
    void fill(float* dst, float value, int64_t n) override { b_->fill(dst, value, n); }
    void synchronize() override { b_->synchronize(); }
    void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) override { b_->embed(out, w, ids, n); }
    void matmul(float* y, int64_t ys, const float* x, int64_t xs, const Weight& w, int64_t n) override {
        b_->matmul(y, ys, x, xs, w, n);
    }
    void rms_norm(float* y, const float* x, const float* w, int64_t n, int64_t dim, int64_t stride,
                  float eps) override {
        b_->rms_norm(y, x, w, n, dim, stride, eps);
    }
    void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) override {
        b_->hc_pre(x, post, comb, H, fn, scale, base, n, p, first);
    }
    void hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) override { b_->hc_post(a, n, p); }
    void hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                 const HcParams& p) override {
        b_->hc_head(y, H, fn, scale, base, n, p);
    }
    void rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
              const RopeParams& r, bool inverse) override {
        b_->rope(x, n, n_heads, head_dim, stride, pos, r, inverse);
    }
    void fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) override {
        b_->fp8_sim(x, n, n_dims, stride, block);
    }
    void hadamard(float* x, int64_t n, int dim, bool fp4_sim) override { b_->hadamard(x, n, dim, fp4_sim); }
    void compressor(const CompressorArgs& a) override { b_->compressor(a); }
    void indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys, const int32_t* n_visible,
                      int64_t n, int n_heads, int head_dim, int top_k) override {
        b_->indexer_topk(idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k);
    }
    void attention(const AttentionArgs& a) override { b_->attention(a); }
    void moe_route(int32_t* ids, float* weights, const float* logits, const float* bias, const int32_t* tid2eid,
                   const int32_t* tokens, int64_t n, int n_experts, int k, float scale, bool norm) override {
        b_->moe_route(ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale, norm);
    }
    void moe_experts(const MoeArgs& a) override { b_->moe_experts(a); }
    void swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                float clamp) override {
        b_->swiglu(h, g, u, n, f, gu_stride, clamp);
    }
    void add(float* y, const float* a, const float* b, int64_t n) override { b_->add(y, a, b, n); }
    void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                   int64_t cols) override {
        b_->copy_rows(dst, dst_stride, src, src_stride, n, cols);
    }
    void gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override {
        b_->gather_rows(dst, src, idx, n, cols);
    }
    void scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override {
        b_->scatter_rows(dst, src, idx, n, cols);
    }

private:
    std::unique_ptr<Backend> b_;
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
    StepOptions opt;
    opt.quant_sim = quant_sim;
    opt.all_logits = true;
    std::vector<float> out, logits, hidden;
    Status s = m.step(*cache, std::span<const int32_t>(toks.data(), n_prefill), opt, &logits, &hidden);
    EXPECT_TRUE(s.ok()) << s.error();
    out.insert(out.end(), logits.begin(), logits.end());
    if (m.has_mtp()) {
        // MTP on the prefill streams: the token after each position is the next prompt token.
        s = m.mtp_step(*cache, hidden, std::span<const int32_t>(toks.data() + 1, n_prefill), opt, &logits);
        EXPECT_TRUE(s.ok()) << s.error();
        out.insert(out.end(), logits.begin(), logits.end());
    }
    for (int64_t i = n_prefill; i < (int64_t)toks.size(); ++i) {
        s = m.step(*cache, std::span<const int32_t>(&toks[i], 1), opt, &logits);
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
