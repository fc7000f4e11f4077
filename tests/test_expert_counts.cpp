// Files with other routed-expert counts than V4-Flash's 256/6: REAP-pruned models (fewer experts, e.g. 24 or
// 40), top-4 routing, every expert used, a single expert. Random-weight models of each count load on the CPU,
// give finite logits, and a prefill gives what token-by-token decoding gives, on hash-routed and
// score-routed layers alike; a hash table naming an expert beyond the count is refused naming the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "exec/step_runner.h"
#include "format/gguf_writer.h"
#include "model/deepseek4.h"
#include "model/synth.h"

using namespace dsv4;

namespace {

struct Counts {
    int n_expert, n_expert_used, n_layer;
};

std::string label(const Counts& c) {
    return std::to_string(c.n_expert) + " experts, top-" + std::to_string(c.n_expert_used);
}

SynthHparams hparams(const Counts& c) {
    auto hp = synth_preset("tiny", c.n_layer);
    EXPECT_TRUE(hp.ok());
    hp->n_expert = c.n_expert;
    hp->n_expert_used = c.n_expert_used;
    return *hp;
}

SynthWriteOptions write_options() {
    SynthWriteOptions o;
    o.seed = 7;
    o.n_threads = 2;
    o.random_quantized = true;  // the same decode work, built in a fraction of the time
    return o;
}

// Logits of every token of `toks`, fed in chunks of `chunk` tokens from position 0.
std::vector<float> logits(Model& m, const std::vector<int32_t>& toks, int64_t chunk) {
    StepRunner runner(m);
    auto cache = m.new_cache((int64_t)toks.size(), false);
    StepOptions opt;
    opt.all_logits = true;
    std::vector<float> out, l;
    for (size_t b = 0; b < toks.size(); b += chunk) {
        const size_t e = std::min(toks.size(), b + (size_t)chunk);
        Status s = runner.step(*cache, std::span<const int32_t>(toks.data() + b, e - b), opt, &l);
        EXPECT_TRUE(s.ok()) << s.error();
        if (!s.ok()) return {};
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

class ExpertCounts : public ::testing::TestWithParam<Counts> {};

TEST_P(ExpertCounts, LoadsAndPrefillEqualsDecode) {
    const Counts c = GetParam();
    const SynthHparams hp = hparams(c);
    ASSERT_GT(hp.hash_layer_count, 0) << "the preset should have hash-routed layers";
    auto backend = make_cpu_backend(2);
    auto m = synth_model(hp, SynthTypes{}, write_options(), *backend);
    ASSERT_TRUE(m.ok()) << label(c) << ": " << m.error();
    const ModelConfig& cfg = (*m)->config();
    EXPECT_EQ(cfg.n_expert, c.n_expert);
    EXPECT_EQ(cfg.n_expert_used, c.n_expert_used);
    EXPECT_EQ((*m)->weights().layers[0].gate_exps.n_experts, c.n_expert);

    // Longer than the window (16) and several compression blocks (ratios 4 and 8) of the tiny preset.
    std::mt19937 rng(3);
    std::vector<int32_t> toks(40);
    for (auto& t : toks) t = (int32_t)(rng() % cfg.n_vocab);
    const std::vector<float> prefill = logits(**m, toks, (int64_t)toks.size());
    const std::vector<float> decode = logits(**m, toks, 1);
    ASSERT_EQ(prefill.size(), toks.size() * (size_t)cfg.n_vocab);
    ASSERT_EQ(decode.size(), prefill.size());
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < prefill.size(); ++i) {
        ASSERT_TRUE(std::isfinite(prefill[i]) && std::isfinite(decode[i])) << label(c) << ": logit " << i;
        max_abs = std::max(max_abs, (double)std::fabs(prefill[i]));
        max_diff = std::max(max_diff, (double)std::fabs(prefill[i] - decode[i]));
    }
    EXPECT_GT(max_abs, 0.0) << label(c);
    std::printf("%s: max |logit| %.3g, max |prefill - decode| %.3g\n", label(c).c_str(), max_abs, max_diff);
    // The CPU backend gives the same bits either way today; the bound leaves room for a summation order
    // that differs between a prefill and single-token steps, as test_model.cpp's 1e-4 does.
    EXPECT_LT(max_diff, 1e-4 * std::max(1.0, max_abs)) << label(c);
}

INSTANTIATE_TEST_SUITE_P(Reap, ExpertCounts,
                         ::testing::Values(Counts{24, 4, 3}, Counts{40, 6, 3}, Counts{7, 7, 3}, Counts{1, 1, 2},
                                           Counts{256, 4, 2}),
                         [](const auto& info) {
                             std::string name = "e";  // appended step by step: GCC 12 warns on "e" + string
                             name += std::to_string(info.param.n_expert);
                             name += "_top";
                             name += std::to_string(info.param.n_expert_used);
                             return name;
                         });

// The same through a file on disk, as a REAP-pruned top-4 GGUF is loaded: the logits of the in-memory model.
TEST(ExpertCountsFile, PrunedTop4FileLoadsLikeTheModelInMemory) {
    const SynthHparams hp = hparams({40, 4, 3});
    const std::string path =
        (std::filesystem::temp_directory_path() / ("dsv4_reap_" + std::to_string(::getpid()) + ".gguf")).string();
    const Status w = synth_write(hp, SynthTypes{}, write_options(), path);
    ASSERT_TRUE(w.ok()) << w.error();
    auto backend = make_cpu_backend(2);
    auto from_file = Model::load(path, *backend);
    ASSERT_TRUE(from_file.ok()) << from_file.error();
    EXPECT_EQ((*from_file)->config().n_expert, 40);
    EXPECT_EQ((*from_file)->config().n_expert_used, 4);
    auto in_memory = synth_model(hp, SynthTypes{}, write_options(), *backend);
    ASSERT_TRUE(in_memory.ok()) << in_memory.error();
    std::vector<int32_t> toks(24);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = (int32_t)((i * 37 + 5) % hp.n_vocab);
    const std::vector<float> a = logits(**from_file, toks, 8), b = logits(**in_memory, toks, 8);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b);
    (*from_file).reset();  // unmaps the file
    std::filesystem::remove(path);
}

// The synth model's tensors, with one entry of one hash table replaced.
class EditedTable final : public TensorSource {
public:
    EditedTable(std::unique_ptr<TensorSource> inner, std::string name, int64_t entry, int32_t value)
        : inner_(std::move(inner)), name_(std::move(name)), entry_(entry), value_(value) {}
    Result<const uint8_t*> bytes(const GgufTensor& t, bool keep) override {
        DSV4_ASSIGN_OR_RETURN(const uint8_t* b, inner_->bytes(t, keep));
        if (t.name != name_) return b;
        std::vector<uint8_t>& copy = kept_[t.name];
        copy.assign(b, b + t.n_bytes);
        std::memcpy(copy.data() + entry_ * 4, &value_, 4);
        return copy.data();
    }
    void finish() override { inner_->finish(); }

private:
    std::unique_ptr<TensorSource> inner_;
    std::string name_;
    int64_t entry_;
    int32_t value_;
    std::map<std::string, std::vector<uint8_t>> kept_;
};

TEST(ExpertCountsHash, TableNamingAnExpertBeyondTheCountIsRefused) {
    const SynthHparams hp = hparams({24, 4, 3});
    auto backend = make_cpu_backend(2);
    for (int32_t bad : {24, 255, -1}) {
        auto src = synth_source(hp, SynthTypes{}, write_options());
        ASSERT_TRUE(src.ok()) << src.error();
        const std::string table = "blk.1.ffn_gate_tid2eid.weight";
        ASSERT_NE(src->file->tensor(table), nullptr);
        auto edited = std::make_unique<EditedTable>(std::move(src->tensors), table, 37, bad);
        auto m = Model::load(std::move(src->file), std::move(edited), *backend);
        ASSERT_FALSE(m.ok()) << "expert id " << bad << " accepted";
        EXPECT_NE(m.error().find("tensor '" + table + "' entry 37 is " + std::to_string(bad) + ", outside [0, 24)"),
                  std::string::npos)
            << m.error();
    }
}

TEST(ExpertCountsHash, MoreUsedThanExpertsIsRefused) {
    // The generator refuses such hyperparameters itself, so the metadata is written and edited by hand.
    GgufWriter w;
    synth_metadata(w, hparams({4, 4, 2}));
    w.set_u32("deepseek4.expert_used_count", 5);
    auto header = w.header();
    ASSERT_TRUE(header.ok()) << header.error();
    auto f = GgufFile::parse_header(std::move(*header), "used5.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto cfg = ModelConfig::from_gguf(**f);
    ASSERT_FALSE(cfg.ok());
    EXPECT_NE(cfg.error().find("key 'deepseek4.expert_used_count' (5) exceeds expert_count (4)"), std::string::npos)
        << cfg.error();
}

// A backend whose MoE kernels take fewer experts (the CUDA backend: 2048 routed, 32 per token) refuses such a
// file at load, naming the key; the CPU backend takes any count.
TEST(ExpertCountsLimits, FilesBeyondTheBackendsLimitsAreRefusedNamingTheKey) {
    GgufWriter w;
    synth_metadata(w, hparams({40, 6, 2}));
    auto header = w.header();
    ASSERT_TRUE(header.ok()) << header.error();
    auto f = GgufFile::parse_header(std::move(*header), "e40.gguf");
    ASSERT_TRUE(f.ok()) << f.error();
    auto cfg = ModelConfig::from_gguf(**f);
    ASSERT_TRUE(cfg.ok()) << cfg.error();
    EXPECT_TRUE(check_moe_limits(*cfg, Backend::MoeLimits{40, 6}, "test").ok());
    const Status experts = check_moe_limits(*cfg, Backend::MoeLimits{32, 32}, "test");
    ASSERT_FALSE(experts.ok());
    EXPECT_NE(experts.error().find("key 'deepseek4.expert_count' is 40; the test backend's MoE kernels take at most "
                                   "32 routed experts"),
              std::string::npos)
        << experts.error();
    const Status used = check_moe_limits(*cfg, Backend::MoeLimits{2048, 4}, "test");
    ASSERT_FALSE(used.ok());
    EXPECT_NE(used.error().find("key 'deepseek4.expert_used_count' is 6"), std::string::npos) << used.error();
    auto cpu = make_cpu_backend(1);
    EXPECT_TRUE(check_moe_limits(*cfg, cpu->moe_limits(), cpu->name()).ok());
}

}  // namespace
