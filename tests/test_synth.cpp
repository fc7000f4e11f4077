// Tests of the random-weight GGUF generator (model/synth.h): preset sizes against the V4 spec, the exact
// tensor layout and metadata of the golden files, read-back through GgufFile and ModelConfig, the value
// distribution of every tensor class (dequantized), random valid blocks for the quantizer-less types, and
// byte reproducibility. SynthSlow.* writes a multi-GB V4-Flash file and runs only under the "slow" label.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/quant.h"
#include "model/config.h"
#include "model/synth.h"

namespace dsv4 {
namespace {

std::string tmp_path(const std::string& tag) {
    return (std::filesystem::temp_directory_path() /
            ("dsv4_test_synth_" + std::to_string(::getpid()) + "_" + tag + ".gguf"))
        .string();
}

struct TmpFile {
    explicit TmpFile(const std::string& tag) : path(tmp_path(tag)) {}
    ~TmpFile() { std::remove(path.c_str()); }
    std::string path;
};

std::string golden(const std::string& set) { return std::string(DSV4_SHARED_DIR) + "/golden/" + set + "/model.gguf"; }

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::unique_ptr<GgufFile> open_or_die(const std::string& path) {
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error());
    if (!f.ok()) return nullptr;
    return std::move(*f);
}

SynthHparams tiny(int n_layer = 0) {
    auto hp = synth_preset("tiny", n_layer);
    EXPECT_TRUE(hp.ok());
    return *hp;
}

void write_or_fail(const SynthHparams& hp, const SynthTypes& types, const std::string& path, uint64_t seed = 0,
                   int threads = 2, const GgufFile* vocab = nullptr) {
    SynthWriteOptions opt;
    opt.seed = seed;
    opt.n_threads = threads;
    opt.vocab = vocab;
    Status st = synth_write(hp, types, opt, path);
    ASSERT_TRUE(st.ok()) << st.error();
}

// The hyperparameters of an existing file, as the generator takes them.
SynthHparams hparams_from(const ModelConfig& c) {
    SynthHparams h;
    h.name = "from-config";
    h.n_vocab = c.n_vocab;
    h.n_embd = c.n_embd;
    h.n_layer = c.n_layer;
    h.mtp = c.n_nextn > 0;
    h.n_ctx_train = c.n_ctx_train;
    h.n_head = c.n_head;
    h.head_dim = c.head_dim;
    h.rope_dim = c.rope_dim;
    h.q_lora_rank = c.q_lora_rank;
    h.o_lora_rank = c.o_lora_rank;
    h.o_groups = c.o_groups;
    h.window = c.window;
    h.compress_ratios = c.compress_ratios;
    h.rope_freq_base = c.rope_freq_base;
    h.compress_rope_freq_base = c.compress_rope_freq_base;
    h.norm_eps = c.norm_eps;
    h.rope_scaling_factor = c.rope_scaling_factor;
    h.rope_orig_ctx = c.rope_orig_ctx;
    h.yarn_beta_fast = c.yarn_beta_fast;
    h.yarn_beta_slow = c.yarn_beta_slow;
    h.index_n_head = c.index_n_head;
    h.index_head_dim = c.index_head_dim;
    h.index_top_k = c.index_top_k;
    h.n_expert = c.n_expert;
    h.n_expert_used = c.n_expert_used;
    h.n_expert_shared = c.n_expert_shared;
    h.n_ff_exp = c.n_ff_exp;
    h.expert_weights_scale = c.expert_weights_scale;
    h.hash_layer_count = c.hash_layer_count;
    h.swiglu_clamp = c.swiglu_clamp_exp.empty() ? 10.0f : c.swiglu_clamp_exp[0];
    h.hc = c.hc;
    h.hc_sinkhorn_iters = c.hc_sinkhorn_iters;
    h.hc_eps = c.hc_eps;
    return h;
}

std::vector<int64_t> shape(const GgufTensor& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

// Mean and standard deviation of the dequantized values of rows [0, n_rows) of a tensor.
struct Moments {
    double mean = 0, std = 0;
    int64_t n = 0;
};
Moments moments(const GgufTensor& t, int64_t max_rows = -1) {
    int64_t rows = t.n_elems() / t.ne[0];
    if (max_rows > 0) rows = std::min(rows, max_rows);
    std::vector<float> row(t.ne[0]);
    double s = 0, ss = 0;
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t.type, t.data + r * t.row_bytes(), row.data(), t.ne[0]);
        for (float v : row) {
            EXPECT_TRUE(std::isfinite(v)) << t.name;
            s += v;
            ss += (double)v * v;
        }
    }
    Moments m;
    m.n = rows * t.ne[0];
    m.mean = s / m.n;
    m.std = std::sqrt(std::max(0.0, ss / m.n - m.mean * m.mean));
    return m;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What each tensor class should look like, written from the assignment's rules (not from synth.cpp):
// projections N(0, 1/fan_in), residual writers times 0.5/sqrt(n_layer), norms ~1, small biases.
struct Want {
    double mean, std;
    bool loose_std;  // small-noise classes: only "small" is specified
};
Want want_for(const GgufTensor& t, int n_layer) {
    const std::string& n = t.name;
    const double fan_in = (double)t.ne[0];
    if (ends_with(n, "norm.weight")) return {1.0, 0.05, true};
    if (contains(n, "hc_") && ends_with(n, "_fn.weight")) return {0.0, 0.02, false};
    if (ends_with(n, "_scale.weight")) return {1.0, 0.05, true};
    if (contains(n, "attn_sinks")) return {0.0, 0.1, true};
    if (ends_with(n, "exp_probs_b.bias")) return {0.0, 0.02, true};
    if (ends_with(n, "_base.weight") || contains(n, "_ape.")) return {0.0, 0.05, true};
    if (n == "token_embd.weight") return {0.0, 1.0, false};
    const double resid = 0.5 / std::sqrt((double)n_layer);
    if (contains(n, "attn_output_b") || contains(n, "ffn_down_")) return {0.0, resid / std::sqrt(fan_in), false};
    return {0.0, 1.0 / std::sqrt(fan_in), false};
}

// bits per weight of a type: low-bit formats only promise the std within a factor of 2.
double bpw(GgmlType t) {
    const auto& tr = ggml_traits(t);
    return 8.0 * (double)tr.block_bytes / (double)tr.block_elems;
}

void check_distribution(const GgufTensor& t, int n_layer) {
    const Want w = want_for(t, n_layer);
    const Moments m = moments(t);
    SCOPED_TRACE(t.name + " " + std::string(ggml_type_name(t.type)) + " mean " + std::to_string(m.mean) + " std " +
                 std::to_string(m.std) + " want std " + std::to_string(w.std));
    if (w.loose_std) {
        // norm weights near 1, biases/sinks/ape near 0: centred (4 standard errors) with only small noise
        EXPECT_NEAR(m.mean, w.mean, 4.0 * w.std / std::sqrt((double)m.n) + 0.01);
        EXPECT_LE(m.std, 0.25);
        if (m.n >= 16) {
            EXPECT_GT(m.std, 0.0);
        }
        return;
    }
    if (m.n < 64) return;  // too few samples for a std estimate
    const double ratio = m.std / w.std;
    if (bpw(t.type) < 4.0) {
        EXPECT_GT(ratio, 0.5);
        EXPECT_LT(ratio, 2.0);
    } else {
        // sampling error of a std over n values is ~1/sqrt(2n); 10% covers n >= 64 and Q8_0 rounding
        EXPECT_NEAR(ratio, 1.0, 0.1);
    }
    EXPECT_LT(std::fabs(m.mean - w.mean), 0.25 * w.std + 4.0 * w.std / std::sqrt((double)m.n));
}

// ---------------------------------------------------------------------------------------------------------

TEST(SynthPreset, FlashMatchesSpec) {
    auto hp = synth_preset("flash");
    ASSERT_TRUE(hp.ok()) << hp.error();
    EXPECT_EQ(hp->n_embd, 4096);
    EXPECT_EQ(hp->n_layer, 43);
    EXPECT_EQ(hp->n_head, 64);
    EXPECT_EQ(hp->head_dim, 512);
    EXPECT_EQ(hp->rope_dim, 64);
    EXPECT_EQ(hp->q_lora_rank, 1024);
    EXPECT_EQ(hp->o_lora_rank, 1024);
    EXPECT_EQ(hp->o_groups, 8);
    EXPECT_EQ(hp->window, 128);
    EXPECT_EQ(hp->n_expert, 256);
    EXPECT_EQ(hp->n_expert_used, 6);
    EXPECT_EQ(hp->n_ff_exp, 2048);
    EXPECT_EQ(hp->hash_layer_count, 3);
    EXPECT_EQ(hp->hc, 4);
    EXPECT_EQ(hp->hc_sinkhorn_iters, 20);
    EXPECT_EQ(hp->index_n_head, 64);
    EXPECT_EQ(hp->index_head_dim, 128);
    EXPECT_EQ(hp->index_top_k, 512);
    EXPECT_EQ(hp->n_vocab, 129280);
    EXPECT_FLOAT_EQ(hp->rope_scaling_factor, 16.0f);
    EXPECT_EQ(hp->rope_orig_ctx, 65536);
    EXPECT_FLOAT_EQ(hp->compress_rope_freq_base, 160000.0f);
    EXPECT_FLOAT_EQ(hp->rope_freq_base, 10000.0f);
    EXPECT_FLOAT_EQ(hp->expert_weights_scale, 1.5f);
    EXPECT_FLOAT_EQ(hp->swiglu_clamp, 10.0f);
    EXPECT_TRUE(hp->mtp);
    // 2 window layers, then 21 ratio-4 and 20 ratio-128 layers alternating (spec §1.1)
    ASSERT_EQ(hp->compress_ratios.size(), 43u);
    int n4 = 0, n128 = 0;
    for (int i = 0; i < 43; ++i) {
        int r = hp->compress_ratios[i];
        const int want = i < 2 ? 0 : (i % 2 == 0 ? 4 : 128);
        EXPECT_EQ(r, want) << i;
        n4 += r == 4;
        n128 += r == 128;
    }
    EXPECT_EQ(n4, 21);
    EXPECT_EQ(n128, 20);
}

TEST(SynthPreset, ProMatchesSpec) {
    auto hp = synth_preset("pro");
    ASSERT_TRUE(hp.ok());
    EXPECT_EQ(hp->n_embd, 7168);
    EXPECT_EQ(hp->n_layer, 61);
    EXPECT_EQ(hp->n_head, 128);
    EXPECT_EQ(hp->q_lora_rank, 1536);
    EXPECT_EQ(hp->o_groups, 16);
    EXPECT_EQ(hp->n_expert, 384);
    EXPECT_EQ(hp->n_ff_exp, 3072);
    EXPECT_EQ(hp->index_top_k, 1024);
    EXPECT_FLOAT_EQ(hp->expert_weights_scale, 2.5f);
    // layers 0-1 HCA, then 30 ratio-4 and 31 ratio-128 in all (spec §1.1)
    int n4 = 0, n128 = 0;
    for (int r : hp->compress_ratios) n4 += r == 4, n128 += r == 128;
    EXPECT_EQ(hp->compress_ratios[0], 128);
    EXPECT_EQ(hp->compress_ratios[1], 128);
    EXPECT_EQ(hp->compress_ratios[2], 4);
    EXPECT_EQ(n4, 30);
    EXPECT_EQ(n128, 31);
}

TEST(SynthPreset, TinyHasEveryLayerKind) {
    SynthHparams hp = tiny();
    ASSERT_TRUE(synth_validate(hp).ok());
    bool window = false, csa = false, hca = false;
    for (int r : hp.compress_ratios) window |= r == 0, csa |= r == 4, hca |= r > 4;
    EXPECT_TRUE(window && csa && hca);
    EXPECT_GT(hp.hash_layer_count, 0);
    EXPECT_LT(hp.hash_layer_count, hp.n_layer);
    EXPECT_TRUE(hp.mtp);
    EXPECT_LE(hp.window, 32);
    EXPECT_EQ((hp.head_dim - hp.rope_dim) % 64, 0);
    EXPECT_GE(hp.index_head_dim, 32);
    EXPECT_EQ(hp.index_head_dim & (hp.index_head_dim - 1), 0);
}

TEST(SynthPreset, LayersOverrideFollowsPattern) {
    auto hp = synth_preset("flash", 5);
    ASSERT_TRUE(hp.ok());
    EXPECT_EQ(hp->compress_ratios, (std::vector<int>{0, 0, 4, 128, 4}));
    auto pro = synth_preset("pro", 3);
    ASSERT_TRUE(pro.ok());
    EXPECT_EQ(pro->compress_ratios, (std::vector<int>{128, 128, 4}));
    auto one = synth_preset("flash", 1);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->hash_layer_count, 1);  // cannot exceed the layer count
    auto bad = synth_preset("huge");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("huge"), std::string::npos);
}

// The spec's count check: 6 + 43*24 + 41*4 + 21*6 = 1328 tensors without MTP.
TEST(SynthPlan, FlashTensorCountAndShapes) {
    auto hp = synth_preset("flash");
    ASSERT_TRUE(hp.ok());
    hp->mtp = false;
    auto plan = synth_plan(*hp, SynthTypes{});
    EXPECT_EQ(plan.size(), 1328u);
    std::map<std::string, const SynthTensor*> by_name;
    for (const auto& t : plan) by_name[t.name] = &t;
    auto expect = [&](const std::string& name, std::vector<int64_t> ne, GgmlType type) {
        ASSERT_TRUE(by_name.count(name)) << name;
        EXPECT_EQ(by_name[name]->ne, ne) << name;
        EXPECT_EQ(by_name[name]->type, type) << name;
    };
    expect("token_embd.weight", {4096, 129280}, GgmlType::Q8_0);
    expect("output.weight", {4096, 129280}, GgmlType::Q8_0);
    expect("output_hc_fn.weight", {16384, 4}, GgmlType::F16);
    expect("blk.2.ffn_gate_exps.weight", {4096, 2048, 256}, GgmlType::IQ2_XXS);
    expect("blk.2.ffn_up_exps.weight", {4096, 2048, 256}, GgmlType::IQ2_XXS);
    expect("blk.2.ffn_down_exps.weight", {2048, 4096, 256}, GgmlType::Q2_K);
    expect("blk.2.attn_q_b.weight", {1024, 32768}, GgmlType::Q8_0);
    expect("blk.2.attn_output_a.weight", {4096, 8192}, GgmlType::Q8_0);
    expect("blk.2.attn_output_b.weight", {8192, 4096}, GgmlType::Q8_0);
    expect("blk.0.hc_attn_fn.weight", {16384, 24}, GgmlType::F16);
    expect("blk.0.hc_attn_base.weight", {24}, GgmlType::F32);
    expect("blk.0.hc_attn_scale.weight", {3}, GgmlType::F32);
    expect("blk.0.ffn_gate_tid2eid.weight", {6, 129280}, GgmlType::I32);
    expect("blk.3.exp_probs_b.bias", {256}, GgmlType::F32);
    expect("blk.2.attn_compressor_kv.weight", {4096, 1024}, GgmlType::F16);
    expect("blk.2.attn_compressor_ape.weight", {1024, 4}, GgmlType::F32);
    expect("blk.3.attn_compressor_kv.weight", {4096, 512}, GgmlType::F16);
    expect("blk.3.attn_compressor_ape.weight", {512, 128}, GgmlType::F32);
    expect("blk.2.indexer.attn_q_b.weight", {1024, 8192}, GgmlType::Q8_0);
    expect("blk.2.indexer.proj.weight", {4096, 64}, GgmlType::F16);
    expect("blk.2.indexer_compressor_kv.weight", {4096, 256}, GgmlType::F16);
    expect("blk.2.indexer_compressor_ape.weight", {256, 4}, GgmlType::F32);
    expect("blk.2.indexer_compressor_norm.weight", {128}, GgmlType::F32);
    EXPECT_FALSE(by_name.count("blk.3.indexer.proj.weight"));
    EXPECT_FALSE(by_name.count("blk.1.attn_compressor_kv.weight"));
    EXPECT_FALSE(by_name.count("blk.3.ffn_gate_tid2eid.weight"));
    EXPECT_FALSE(by_name.count("blk.2.exp_probs_b.bias"));
}

TEST(SynthPlan, FallbackWhenBlocksDoNotFit) {
    SynthHparams hp = tiny();
    SynthTypes types;
    types.dense = GgmlType::Q4_K;  // 256-value blocks; q_lora_rank 64 rows do not fit
    std::vector<std::string> notes;
    auto plan = synth_plan(hp, types, &notes);
    EXPECT_FALSE(notes.empty());
    for (const auto& t : plan) {
        EXPECT_EQ(t.ne[0] % ggml_traits(t.type).block_elems, 0) << t.name;
        if (t.name == "blk.0.attn_q_b.weight") {
            EXPECT_EQ(t.type, GgmlType::Q8_0);
        }
        if (t.name == "blk.0.attn_q_a.weight") {
            EXPECT_EQ(t.type, GgmlType::Q4_K);
        }
    }
}

// Hyperparameters read from each golden file give exactly its tensor names and shapes; flash-mini and
// pro-mini also in the same order (quant-mini's producer put the expert stacks first instead of last).
TEST(SynthGolden, SameTensorLayoutAsGoldenFiles) {
    for (std::string set : {"flash-mini", "pro-mini", "quant-mini"}) {
        SCOPED_TRACE(set);
        auto g = open_or_die(golden(set));
        ASSERT_TRUE(g);
        auto cfg = ModelConfig::from_gguf(*g);
        ASSERT_TRUE(cfg.ok()) << cfg.error();
        SynthHparams hp = hparams_from(*cfg);
        ASSERT_TRUE(synth_validate(hp).ok());
        auto plan = synth_plan(hp, SynthTypes{GgmlType::F32, GgmlType::F32, GgmlType::F32});
        ASSERT_EQ(plan.size(), g->tensors().size());
        std::map<std::string, std::vector<int64_t>> ours, theirs;
        for (const auto& t : plan) ours[t.name] = t.ne;
        for (const auto& t : g->tensors()) theirs[t.name] = shape(t);
        EXPECT_EQ(ours, theirs);
        if (set == "quant-mini") continue;
        for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].name, g->tensors()[i].name) << i;
    }
}

// Written from a golden file's hyperparameters, the metadata has the golden key set, types and values.
TEST(SynthGolden, SameMetadataAsGoldenFiles) {
    for (const char* set : {"flash-mini", "pro-mini"}) {
        SCOPED_TRACE(set);
        auto g = open_or_die(golden(set));
        ASSERT_TRUE(g);
        auto cfg = ModelConfig::from_gguf(*g);
        ASSERT_TRUE(cfg.ok()) << cfg.error();
        SynthHparams hp = hparams_from(*cfg);
        TmpFile out(std::string("golden_") + set);
        write_or_fail(hp, SynthTypes{GgmlType::F16, GgmlType::F16, GgmlType::F16}, out.path);
        auto f = open_or_die(out.path);
        ASSERT_TRUE(f);
        std::set<std::string> ours, theirs;
        for (const auto& [k, v] : f->metadata()) ours.insert(k);
        // Our writer owns general.alignment and writes it only when it is not GGUF's default 32.
        for (const auto& [k, v] : g->metadata())
            if (k != "general.alignment") theirs.insert(k);
        EXPECT_EQ(ours, theirs);
        for (const auto& [k, gv] : g->metadata()) {
            if (k.rfind("deepseek4.", 0) != 0) continue;
            const GgufValue* v = f->find(k);
            ASSERT_TRUE(v) << k;
            EXPECT_EQ(v->type, gv.type) << k;
            EXPECT_EQ(gguf_value_str(*v, 100), gguf_value_str(gv, 100)) << k;
        }
    }
}

TEST(SynthWrite, TinyReadsBackWithIntendedValues) {
    SynthHparams hp = tiny();
    SynthTypes types;
    TmpFile out("tiny");
    write_or_fail(hp, types, out.path, 42);
    auto f = open_or_die(out.path);
    ASSERT_TRUE(f);
    auto cfg = ModelConfig::from_gguf(*f);
    ASSERT_TRUE(cfg.ok()) << cfg.error();
    EXPECT_EQ(cfg->n_layer, hp.n_layer);
    EXPECT_EQ(cfg->n_nextn, 1);
    EXPECT_EQ(cfg->n_embd, hp.n_embd);
    EXPECT_EQ(cfg->n_vocab, hp.n_vocab);
    EXPECT_EQ(cfg->compress_ratios, hp.compress_ratios);
    EXPECT_EQ(cfg->window, hp.window);
    EXPECT_EQ(cfg->hash_layer_count, hp.hash_layer_count);
    EXPECT_EQ(cfg->index_head_dim, hp.index_head_dim);
    EXPECT_EQ(f->has("deepseek4.vocab_size"), true);
    for (const auto& [k, v] : f->metadata()) EXPECT_NE(k.rfind("tokenizer.", 0), 0u) << k;

    auto plan = synth_plan(hp, types);
    ASSERT_EQ(f->tensors().size(), plan.size());
    for (const auto& p : plan) {
        const GgufTensor* t = f->tensor(p.name);
        ASSERT_TRUE(t) << p.name;
        EXPECT_EQ(shape(*t), p.ne) << p.name;
        EXPECT_EQ(t->type, p.type) << p.name;
    }
    // the classes the assignment names, with the default types
    EXPECT_EQ(f->tensor("blk.1.ffn_gate_exps.weight")->type, GgmlType::IQ2_XXS);
    EXPECT_EQ(f->tensor("blk.1.ffn_down_exps.weight")->type, GgmlType::Q2_K);
    EXPECT_EQ(f->tensor("blk.1.attn_q_b.weight")->type, GgmlType::Q8_0);
    EXPECT_EQ(f->tensor("blk.1.attn_norm.weight")->type, GgmlType::F32);
    EXPECT_EQ(f->tensor("blk.1.hc_ffn_fn.weight")->type, GgmlType::F16);
    EXPECT_EQ(f->tensor("blk.1.indexer.proj.weight")->type, GgmlType::F16);
    EXPECT_EQ(f->tensor("blk.1.attn_compressor_gate.weight")->type, GgmlType::F16);
    EXPECT_EQ(f->tensor("blk.1.attn_compressor_ape.weight")->type, GgmlType::F32);
    const std::string mtp = "blk." + std::to_string(hp.n_layer) + ".";
    for (const char* n : {"nextn.e_proj.weight", "nextn.h_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                          "nextn.shared_head_norm.weight", "nextn.hc_head_fn.weight", "nextn.hc_head_base.weight",
                          "nextn.hc_head_scale.weight", "ffn_gate_exps.weight", "exp_probs_b.bias"})
        EXPECT_TRUE(f->tensor(mtp + n)) << mtp + n;
    EXPECT_FALSE(f->tensor(mtp + "attn_compressor_kv.weight"));

    for (const auto& t : f->tensors()) {
        if (t.type == GgmlType::I32) continue;
        check_distribution(t, hp.n_layer);
    }

    // tid2eid: n_expert_used distinct valid ids per token, every expert used somewhere
    for (int l = 0; l < hp.hash_layer_count; ++l) {
        const GgufTensor* t = f->tensor("blk." + std::to_string(l) + ".ffn_gate_tid2eid.weight");
        ASSERT_TRUE(t);
        ASSERT_EQ(t->ne[0], hp.n_expert_used);
        ASSERT_EQ(t->ne[1], hp.n_vocab);
        const int32_t* ids = reinterpret_cast<const int32_t*>(t->data);
        std::vector<int> uses(hp.n_expert);
        for (int64_t tok = 0; tok < t->ne[1]; ++tok) {
            std::set<int32_t> row(ids + tok * t->ne[0], ids + (tok + 1) * t->ne[0]);
            EXPECT_EQ((int64_t)row.size(), t->ne[0]) << tok;
            for (int32_t id : row) {
                ASSERT_GE(id, 0);
                ASSERT_LT(id, hp.n_expert);
                uses[id]++;
            }
        }
        // uniform choice: each expert gets n_vocab*used/n_expert picks, far more than 0
        for (int e = 0; e < hp.n_expert; ++e) EXPECT_GT(uses[e], hp.n_vocab * hp.n_expert_used / hp.n_expert / 2);
    }
}

// Types without a quantizer get random valid blocks whose scale gives the wanted std (within 2x).
TEST(SynthWrite, RandomBlockTypesHaveWantedStd) {
    SynthHparams hp = tiny(1);
    hp.mtp = false;
    for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                          GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::TQ1_0,
                          GgmlType::TQ2_0, GgmlType::MXFP4, GgmlType::Q3_K, GgmlType::Q4_K}) {
        SCOPED_TRACE(std::string(ggml_type_name(type)));
        ASSERT_TRUE(synth_type_supported(type));
        SynthTypes types{type, type, GgmlType::Q8_0};
        TmpFile out(std::string("blocks_") + std::string(ggml_type_name(type)));
        write_or_fail(hp, types, out.path, 1);
        auto f = open_or_die(out.path);
        ASSERT_TRUE(f);
        for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_down_exps.weight"}) {
            const GgufTensor* t = f->tensor(name);
            ASSERT_TRUE(t);
            ASSERT_EQ(t->type, type);
            const Want w = want_for(*t, hp.n_layer);
            const Moments m = moments(*t, 64);  // a few rows
            EXPECT_GT(m.std / w.std, 0.5) << name;
            EXPECT_LT(m.std / w.std, 2.0) << name;
            EXPECT_LT(std::fabs(m.mean), 0.3 * w.std) << name;
        }
    }
    EXPECT_FALSE(synth_type_supported(GgmlType::Q8_K));
    EXPECT_FALSE(synth_type_supported(GgmlType::I32));
}

TEST(SynthWrite, SameSeedSameBytesDifferentSeedDifferentBytes) {
    SynthHparams hp = tiny();
    TmpFile a("seed_a"), b("seed_b"), c("seed_c");
    write_or_fail(hp, SynthTypes{}, a.path, 7, 1);
    write_or_fail(hp, SynthTypes{}, b.path, 7, 3);  // thread count must not matter
    write_or_fail(hp, SynthTypes{}, c.path, 8, 2);
    auto ba = file_bytes(a.path), bb = file_bytes(b.path), bc = file_bytes(c.path);
    ASSERT_GT(ba.size(), 1000000u);
    EXPECT_TRUE(ba == bb);
    ASSERT_EQ(ba.size(), bc.size());
    EXPECT_FALSE(ba == bc);
    // every tensor, not just some, changes with the seed
    auto fa = open_or_die(a.path), fc = open_or_die(c.path);
    ASSERT_TRUE(fa && fc);
    for (const auto& t : fa->tensors()) {
        const GgufTensor* u = fc->tensor(t.name);
        ASSERT_TRUE(u);
        EXPECT_NE(std::memcmp(t.data, u->data, t.n_bytes), 0) << t.name;
    }
}

TEST(SynthWrite, VocabFileSetsTokenizerAndSize) {
    const std::string vocab_path = std::string(DSV4_SHARED_DIR) + "/fixtures/tokenizer/deepseek_v3/vocab.gguf";
    auto vocab = open_or_die(vocab_path);
    ASSERT_TRUE(vocab);
    auto n = synth_vocab_size(*vocab);
    ASSERT_TRUE(n.ok()) << n.error();
    EXPECT_EQ(*n, 129280);
    SynthHparams hp = tiny(1);
    hp.n_vocab = *n;
    TmpFile out("vocab");
    write_or_fail(hp, SynthTypes{}, out.path, 0, 2, vocab.get());
    auto f = open_or_die(out.path);
    ASSERT_TRUE(f);
    for (const auto& [k, v] : vocab->metadata()) {
        if (k.rfind("tokenizer.", 0) != 0) continue;
        const GgufValue* ours = f->find(k);
        ASSERT_TRUE(ours) << k;
        EXPECT_EQ(gguf_value_str(*ours, 20), gguf_value_str(v, 20)) << k;
    }
    auto toks = f->get_arr_str("tokenizer.ggml.tokens");
    ASSERT_TRUE(toks.ok());
    EXPECT_EQ((int64_t)toks->size(), *n);
    EXPECT_EQ(f->get_u32("deepseek4.vocab_size").value(), 129280u);
    EXPECT_EQ(shape(*f->tensor("token_embd.weight")), (std::vector<int64_t>{hp.n_embd, 129280}));
    EXPECT_EQ(shape(*f->tensor("blk.0.ffn_gate_tid2eid.weight")), (std::vector<int64_t>{hp.n_expert_used, 129280}));
    EXPECT_EQ(f->get_str("general.architecture").value(), "deepseek4");

    // a vocab of another size than the model is refused, naming the file
    hp.n_vocab = 1000;
    SynthWriteOptions opt;
    opt.vocab = vocab.get();
    Status st = synth_write(hp, SynthTypes{}, opt, tmp_path("vocab_bad"));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("vocab.gguf"), std::string::npos) << st.error();
}

TEST(SynthWrite, RejectsBadInput) {
    SynthHparams hp = tiny();
    hp.o_groups = 3;  // 4 heads do not split into 3 groups
    Status st = synth_write(hp, SynthTypes{}, SynthWriteOptions{}, tmp_path("bad"));
    EXPECT_FALSE(st.ok());
    hp = tiny();
    SynthTypes types;
    types.dense = GgmlType::Q8_K;
    st = synth_write(hp, types, SynthWriteOptions{}, tmp_path("bad"));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().find("Q8_K"), std::string::npos) << st.error();
}

// The file `dsv4 synth --preset tiny --seed 3` wrote (tests/cli_synth.cmake) equals the library's output.
TEST(SynthCli, FileMatchesLibrary) {
    const char* path = std::getenv("DSV4_SYNTH_CLI_FILE");
    if (!path) GTEST_SKIP() << "run through ctest (tests/cli_synth.cmake) to check the CLI's file";
    TmpFile lib("cli_lib");
    write_or_fail(tiny(), SynthTypes{}, lib.path, 3);
    auto a = file_bytes(path), b = file_bytes(lib.path);
    ASSERT_GT(a.size(), 0u);
    EXPECT_TRUE(a == b);
}

// Real V4-Flash shapes (multi-GB). Disabled in the default run; tests/cli_synth.cmake runs it labeled "slow".
TEST(SynthSlow, DISABLED_FlashTwoLayers) {
    auto hp = synth_preset("flash", 2);
    ASSERT_TRUE(hp.ok());
    TmpFile out("flash2");
    write_or_fail(*hp, SynthTypes{}, out.path, 0, 0);
    auto f = open_or_die(out.path);
    ASSERT_TRUE(f);
    auto cfg = ModelConfig::from_gguf(*f);
    ASSERT_TRUE(cfg.ok()) << cfg.error();
    EXPECT_EQ(cfg->n_embd, 4096);
    EXPECT_EQ(cfg->n_layer, 2);
    EXPECT_EQ(cfg->n_vocab, 129280);
    const GgufTensor* g = f->tensor("blk.2.ffn_gate_exps.weight");  // the MTP block's experts
    ASSERT_TRUE(g);
    EXPECT_EQ(shape(*g), (std::vector<int64_t>{4096, 2048, 256}));
    EXPECT_EQ(g->type, GgmlType::IQ2_XXS);
    EXPECT_EQ(shape(*f->tensor("blk.1.attn_q_b.weight")), (std::vector<int64_t>{1024, 32768}));
    EXPECT_EQ(shape(*f->tensor("blk.0.ffn_down_exps.weight")), (std::vector<int64_t>{2048, 4096, 256}));
    for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.1.ffn_down_exps.weight", "token_embd.weight",
                             "blk.1.attn_output_b.weight", "blk.2.nextn.e_proj.weight"}) {
        const GgufTensor* t = f->tensor(name);
        ASSERT_TRUE(t) << name;
        const Want w = want_for(*t, hp->n_layer);
        const Moments m = moments(*t, 256);
        EXPECT_GT(m.std / w.std, 0.5) << name;
        EXPECT_LT(m.std / w.std, 2.0) << name;
    }
}

}  // namespace
}  // namespace dsv4
