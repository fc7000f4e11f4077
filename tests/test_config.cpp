// Model config and weight binding on edited copies of a golden file: every required key missing in turn is
// an error naming it; what producers differ on (longer compress_ratios, scalar clamps, no vocab_size /
// swiglu_clamp_shexp / nextn keys, a fused eh_proj) still loads; a tensor of the wrong shape or type is an
// error naming the tensor and both shapes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/deepseek4.h"

using namespace dsv4;

namespace {

const std::string kFlash = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini/model.gguf";

struct Edit {
    std::set<std::string> drop_keys;
    std::function<bool(GgufWriter&, const std::string&, const GgufValue&)> key;  // true: handled
    std::function<bool(GgufWriter&, const GgufTensor&)> tensor;                  // true: handled
};

std::string tmp_path(const std::string& tag) {
    return (std::filesystem::temp_directory_path() / ("dsv4_cfg_" + tag + "_" + std::to_string(getpid()) + ".gguf"))
        .string();
}

// Copy flash-mini with edits applied; returns the new file's path.
std::string edited_copy(const std::string& tag, const Edit& e) {
    auto src = GgufFile::open(kFlash);
    EXPECT_TRUE(src.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*src)->metadata()) {
        if (e.drop_keys.count(k) || k == "general.alignment") continue;
        if (e.key && e.key(w, k, v)) continue;
        w.copy_value(k, v);
    }
    for (const GgufTensor& t : (*src)->tensors()) {
        if (e.tensor && e.tensor(w, t)) continue;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        EXPECT_TRUE(w.add_tensor_data(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes)).ok());
    }
    const std::string path = tmp_path(tag);
    EXPECT_TRUE(w.write(path).ok());
    return path;
}

Result<ModelConfig> config_of(const std::string& path) {
    auto f = GgufFile::open(path);
    if (!f.ok()) return make_error(f.error());
    return ModelConfig::from_gguf(**f);
}

TEST(ModelConfig, ReadsGoldenConfig) {
    auto c = config_of(kFlash);
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_EQ(c->n_layer, 6);
    EXPECT_EQ(c->n_nextn, 1);
    EXPECT_EQ(c->n_embd, 128);
    EXPECT_EQ(c->compress_ratios, (std::vector<int>{0, 0, 4, 128, 4, 128}));
    EXPECT_EQ(c->hc, 4);
    EXPECT_EQ(c->index_top_k, 16);
    EXPECT_FLOAT_EQ(c->swiglu_clamp_exp[3], 1.5f);
    EXPECT_TRUE(c->yarn);
}

TEST(ModelConfig, EveryRequiredKeyIsNamedWhenMissing) {
    const std::vector<std::string> required = {
        "deepseek4.block_count", "deepseek4.embedding_length", "deepseek4.attention.head_count",
        "deepseek4.attention.key_length", "deepseek4.attention.layer_norm_rms_epsilon",
        "deepseek4.attention.q_lora_rank", "deepseek4.attention.output_lora_rank",
        "deepseek4.attention.output_group_count", "deepseek4.attention.sliding_window",
        "deepseek4.attention.compress_ratios", "deepseek4.attention.compress_rope_freq_base",
        "deepseek4.attention.indexer.head_count", "deepseek4.attention.indexer.key_length",
        "deepseek4.attention.indexer.top_k", "deepseek4.rope.dimension_count", "deepseek4.rope.freq_base",
        "deepseek4.rope.scaling.factor", "deepseek4.rope.scaling.original_context_length",
        "deepseek4.expert_count", "deepseek4.expert_used_count", "deepseek4.expert_feed_forward_length",
        "deepseek4.expert_weights_scale", "deepseek4.swiglu_clamp_exp", "deepseek4.hyper_connection.count",
        "deepseek4.hyper_connection.sinkhorn_iterations", "deepseek4.hyper_connection.epsilon",
        "general.architecture"};
    for (const std::string& k : required) {
        const std::string path = edited_copy("drop", Edit{{k}, {}, {}});
        auto c = config_of(path);
        std::remove(path.c_str());
        ASSERT_FALSE(c.ok()) << "loaded without " << k;
        EXPECT_NE(c.error().find(k), std::string::npos) << "error for missing " << k << ": " << c.error();
    }
}

TEST(ModelConfig, ToleratesWhatProducersDifferOn) {
    Edit e;
    e.drop_keys = {"deepseek4.vocab_size", "deepseek4.swiglu_clamp_shexp"};
    e.key = [](GgufWriter& w, const std::string& k, const GgufValue&) {
        if (k == "deepseek4.attention.compress_ratios") {
            w.set_arr_u32(k, {0, 0, 4, 128, 4, 128, 0, 0, 0});  // longer than block_count, as in the official config
            return true;
        }
        if (k == "deepseek4.swiglu_clamp_exp") {
            w.set_f32(k, 1.5f);  // a scalar instead of a per-layer array
            return true;
        }
        return false;
    };
    const std::string path = edited_copy("tolerant", e);
    auto backend = make_cpu_backend(1);
    auto m = Model::load(path, *backend);
    std::remove(path.c_str());
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_EQ((*m)->config().n_vocab, 1024);  // from token_embd
    EXPECT_FLOAT_EQ((*m)->config().swiglu_clamp_shexp[2], 1.5f);
    EXPECT_TRUE((*m)->has_mtp());
}

TEST(ModelConfig, WrongTensorShapeNamesTensorAndBothShapes) {
    Edit e;
    e.tensor = [](GgufWriter& w, const GgufTensor& t) {
        if (t.name != "blk.3.attn_kv.weight") return false;
        // [128, 128] -> [128, 64]: half the rows.
        EXPECT_TRUE(w.add_tensor_data(t.name, t.type, {t.ne[0], t.ne[1] / 2},
                                      std::vector<uint8_t>(t.data, t.data + t.n_bytes / 2))
                        .ok());
        return true;
    };
    const std::string path = edited_copy("shape", e);
    auto backend = make_cpu_backend(1);
    auto m = Model::load(path, *backend);
    std::remove(path.c_str());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("blk.3.attn_kv.weight"), std::string::npos) << m.error();
    EXPECT_NE(m.error().find("[128, 64]"), std::string::npos) << m.error();
    EXPECT_NE(m.error().find("[128, 128]"), std::string::npos) << m.error();
}

TEST(ModelConfig, OutOfRangeHashRoutingIsAnError) {
    // tid2eid entries index experts: a file with an id >= expert_count must fail at load, not at run time.
    Edit e;
    e.tensor = [](GgufWriter& w, const GgufTensor& t) {
        if (t.name != "blk.1.ffn_gate_tid2eid.weight") return false;
        std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
        const int32_t bad = 16;  // flash-mini has 16 experts
        std::memcpy(bytes.data() + 4 * 100, &bad, 4);
        EXPECT_TRUE(w.add_tensor_data(t.name, t.type, {t.ne[0], t.ne[1]}, bytes).ok());
        return true;
    };
    const std::string path = edited_copy("tid2eid", e);
    auto backend = make_cpu_backend(1);
    auto m = Model::load(path, *backend);
    std::remove(path.c_str());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("blk.1.ffn_gate_tid2eid.weight"), std::string::npos) << m.error();
}

TEST(ModelConfig, MissingTensorIsNamed) {
    Edit e;
    e.tensor = [](GgufWriter&, const GgufTensor& t) { return t.name == "blk.4.attn_compressor_ape.weight"; };
    const std::string path = edited_copy("missing", e);
    auto backend = make_cpu_backend(1);
    auto m = Model::load(path, *backend);
    std::remove(path.c_str());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("blk.4.attn_compressor_ape.weight"), std::string::npos) << m.error();
}

TEST(ModelConfig, FusedEhProjGivesTheSameMtpLogits) {
    // Replace e_proj/h_proj [D, D] by the fused [2D, D] form (input = concat(e, h)) and compare MTP logits.
    auto src = GgufFile::open(kFlash);
    ASSERT_TRUE(src.ok());
    const GgufTensor* e = (*src)->tensor("blk.6.nextn.e_proj.weight");
    const GgufTensor* h = (*src)->tensor("blk.6.nextn.h_proj.weight");
    ASSERT_TRUE(e && h && e->type == h->type);
    Edit ed;
    ed.tensor = [&](GgufWriter& w, const GgufTensor& t) {
        if (t.name == "blk.6.nextn.h_proj.weight") return true;
        if (t.name != "blk.6.nextn.e_proj.weight") return false;
        const size_t rb = e->row_bytes();
        std::vector<uint8_t> fused;
        for (int64_t r = 0; r < e->ne[1]; ++r) {
            fused.insert(fused.end(), e->data + r * rb, e->data + (r + 1) * rb);
            fused.insert(fused.end(), h->data + r * rb, h->data + (r + 1) * rb);
        }
        EXPECT_TRUE(w.add_tensor_data("blk.6.nextn.eh_proj.weight", e->type, {2 * e->ne[0], e->ne[1]}, fused).ok());
        return true;
    };
    const std::string path = edited_copy("fused", ed);
    auto backend = make_cpu_backend(1);
    auto a = Model::load(kFlash, *backend);
    auto b = Model::load(path, *backend);
    std::remove(path.c_str());
    ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? a.error() : b.error());
    ASSERT_TRUE((*b)->has_mtp());
    std::vector<int32_t> toks = {5, 17, 300, 42, 9, 1000, 7};
    auto mtp_logits = [&](Model& m) {
        auto cache = m.new_cache(16, true);
        StepOptions opt;
        std::vector<float> hidden, logits;
        EXPECT_TRUE(m.step(*cache, std::span<const int32_t>(toks.data(), 6), opt, nullptr, &hidden).ok());
        EXPECT_TRUE(m.mtp_step(*cache, hidden, std::span<const int32_t>(toks.data() + 1, 6), opt, &logits).ok());
        return logits;
    };
    auto la = mtp_logits(**a), lb = mtp_logits(**b);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-5) << i;
}

}  // namespace
