// Random-weight DeepSeek-V4 GGUF generator: presets, the tensor plan (names, shapes, types, distributions),
// the metadata, and the streaming writer that fills each tensor chunk by chunk (rows: synth_generator.cpp).
#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/synth_generator.h"

namespace dsv4 {

// ---------------------------------------------------------------------------------------------------------
// Presets

namespace {

// Compress-ratio patterns per preset; each extends to any layer count.
int flash_ratio(int i) { return i < 2 ? 0 : (i % 2 == 0 ? 4 : 128); }  // [0,0,4,128,4,...]
int pro_ratio(int i) { return i < 2 ? 128 : (i % 2 == 0 ? 4 : 128); }   // [128,128,4,128,4,...]
// tiny: a window-only layer, then CSA (4) / HCA alternating. The HCA ratio is 8 rather than 128 so that
// short test prompts already complete HCA entries (the model treats any ratio > 0 other than 4 as HCA).
int tiny_ratio(int i) { return i == 0 ? 0 : (i % 2 == 1 ? 4 : 8); }      // [0,4,8,4,8,...]

SynthHparams flash_hparams() {
    SynthHparams h;
    h.name = "synth-flash";
    h.n_vocab = 129280;
    h.n_embd = 4096;
    h.n_layer = 43;
    h.n_ctx_train = 1048576;
    h.n_head = 64;
    h.head_dim = 512;
    h.rope_dim = 64;
    h.q_lora_rank = 1024;
    h.o_lora_rank = 1024;
    h.o_groups = 8;
    h.window = 128;
    h.rope_scaling_factor = 16.0f;
    h.rope_orig_ctx = 65536;
    h.index_n_head = 64;
    h.index_head_dim = 128;
    h.index_top_k = 512;
    h.n_expert = 256;
    h.n_expert_used = 6;
    h.n_ff_exp = 2048;
    h.expert_weights_scale = 1.5f;
    h.hash_layer_count = 3;
    h.hc = 4;
    return h;
}

SynthHparams pro_hparams() {
    SynthHparams h = flash_hparams();
    h.name = "synth-pro";
    h.n_embd = 7168;
    h.n_layer = 61;
    h.n_head = 128;
    h.q_lora_rank = 1536;
    h.o_groups = 16;
    h.index_top_k = 1024;
    h.n_expert = 384;
    h.n_ff_exp = 3072;
    h.expert_weights_scale = 2.5f;
    return h;
}

// Small enough for unit tests, yet with every layer kind: window-only, CSA + indexer, HCA, hash-routed
// layers (one window, one CSA), score-routed layers and an MTP block. n_embd and n_ff_exp are 256 so the
// default expert types (256-value super-blocks) fit; nope = head_dim - rope_dim = 64 is one FP8 block.
SynthHparams tiny_hparams() {
    SynthHparams h;
    h.name = "synth-tiny";
    h.n_vocab = 1024;
    h.n_embd = 256;
    h.n_layer = 4;
    h.n_ctx_train = 4096;
    h.n_head = 4;
    h.head_dim = 128;
    h.rope_dim = 64;
    h.q_lora_rank = 64;
    h.o_lora_rank = 64;
    h.o_groups = 2;
    h.window = 16;
    h.rope_scaling_factor = 16.0f;
    h.rope_orig_ctx = 256;
    h.index_n_head = 8;
    h.index_head_dim = 64;
    h.index_top_k = 8;
    h.n_expert = 8;
    h.n_expert_used = 2;
    h.n_ff_exp = 256;
    h.expert_weights_scale = 1.5f;
    h.hash_layer_count = 2;
    h.hc = 4;
    return h;
}

}  // namespace

const std::vector<std::string>& synth_preset_names() {
    static const std::vector<std::string> names = {"tiny", "flash", "pro"};
    return names;
}

Result<SynthHparams> synth_preset(std::string_view preset, int n_layer) {
    SynthHparams h;
    int (*pattern)(int) = nullptr;
    if (preset == "tiny") {
        h = tiny_hparams();
        pattern = tiny_ratio;
    } else if (preset == "flash") {
        h = flash_hparams();
        pattern = flash_ratio;
    } else if (preset == "pro") {
        h = pro_hparams();
        pattern = pro_ratio;
    } else {
        return make_error("unknown synth preset '" + std::string(preset) + "' (expected tiny, flash or pro)");
    }
    if (n_layer < 0) return make_error("synth --layers must be positive, got " + std::to_string(n_layer));
    if (n_layer > 0) h.n_layer = n_layer;
    h.compress_ratios.resize(h.n_layer);
    for (int i = 0; i < h.n_layer; ++i) h.compress_ratios[i] = pattern(i);
    h.hash_layer_count = std::min(h.hash_layer_count, h.n_layer);
    return h;
}

Status synth_validate(const SynthHparams& h) {
    auto need = [&](bool ok, const std::string& what) -> Status {
        if (!ok) return make_error("synth hyperparameters of '" + h.name + "': " + what);
        return {};
    };
    DSV4_TRY(need(h.n_vocab > 0 && h.n_embd > 0 && h.n_layer > 0, "n_vocab, n_embd and n_layer must be positive"));
    DSV4_TRY(need(h.n_head > 0 && h.head_dim > 0 && h.q_lora_rank > 0 && h.o_lora_rank > 0 && h.o_groups > 0,
                  "attention sizes must be positive"));
    DSV4_TRY(need(h.n_head % h.o_groups == 0, "n_head must be a multiple of o_groups"));
    DSV4_TRY(need(h.rope_dim > 0 && h.rope_dim % 2 == 0 && h.rope_dim <= h.head_dim,
                  "rope_dim must be even and at most head_dim"));
    DSV4_TRY(need((int)h.compress_ratios.size() == h.n_layer, "compress_ratios needs one entry per main layer"));
    bool any_csa = false;
    for (int r : h.compress_ratios) {
        DSV4_TRY(need(r >= 0, "compress ratios must be >= 0"));
        any_csa |= r == 4;
    }
    if (any_csa)
        DSV4_TRY(need(h.index_n_head > 0 && h.index_head_dim >= h.rope_dim && h.index_top_k > 0,
                      "ratio-4 layers need indexer heads, index_head_dim >= rope_dim and top_k > 0"));
    DSV4_TRY(need(h.n_expert > 0 && h.n_expert_used > 0 && h.n_expert_used <= h.n_expert && h.n_ff_exp > 0 &&
                      h.n_expert_shared > 0,
                  "expert counts must be positive with n_expert_used <= n_expert"));
    DSV4_TRY(need(h.hash_layer_count >= 0 && h.hash_layer_count <= h.n_layer, "hash_layer_count exceeds n_layer"));
    DSV4_TRY(need(h.hc > 0 && h.hc_sinkhorn_iters > 0, "hc and hc_sinkhorn_iters must be positive"));
    DSV4_TRY(need(h.window > 0, "sliding window must be positive"));
    return {};
}

// ---------------------------------------------------------------------------------------------------------
// Tensor plan

int64_t SynthTensor::n_rows() const {
    int64_t r = 1;
    for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
    return r;
}

uint64_t SynthTensor::n_bytes() const {
    return (uint64_t)ggml_row_bytes(ggml_traits(type), ne[0]) * (uint64_t)n_rows();
}

namespace {

// Distribution constants. Projections are N(0, 1/fan_in) so a unit-RMS input gives unit-RMS outputs; the
// rest mimics what trained checkpoints look like (norm weights near 1, small biases and sinks).
constexpr float kEmbdStd = 1.0f;        // embeddings feed RMSNorms, so O(1) rows are what a model sees
constexpr float kNormStd = 0.05f;       // norm weights: 1 + small noise
constexpr float kSinkStd = 0.1f;        // attention sink logits
constexpr float kHcFnStd = 0.02f;       // hc_*_fn: the mixes stay in the sigmoid's responsive range
constexpr float kHcBaseStd = 0.05f;     // hc bases near 0
constexpr float kHcScaleStd = 0.05f;    // hc scales near 1
constexpr float kApeStd = 0.05f;        // compressor positional biases
constexpr float kBiasStd = 0.02f;       // exp_probs_b routing bias
constexpr float kResidScale = 0.5f;     // times 1/sqrt(n_layer) on projections writing into the streams

// The block format of `want` fits rows of ne0 values, or the closest type that does (llama-quantize's rule).
GgmlType fit_type(GgmlType want, int64_t ne0, const std::string& name, std::vector<std::string>* notes) {
    if (ne0 % ggml_traits(want).block_elems == 0) return want;
    GgmlType got = ne0 % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
    if (notes)
        notes->push_back(name + ": rows of " + std::to_string(ne0) + " do not fit " +
                         std::string(ggml_type_name(want)) + " blocks, using " + std::string(ggml_type_name(got)));
    return got;
}

class PlanBuilder {
public:
    PlanBuilder(const SynthHparams& hp, const SynthTypes& types, std::vector<std::string>* notes)
        : hp_(hp), types_(types), notes_(notes),
          resid_(kResidScale / std::sqrt((float)hp.n_layer)) {}

    void add(std::string name, GgmlType type, std::vector<int64_t> ne, float mean, float std,
             SynthFill fill = SynthFill::gaussian) {
        out_.push_back(SynthTensor{std::move(name), type, std::move(ne), fill, mean, std});
    }
    // A 2-D matrix in the dense class: N(0, (scale^2)/fan_in), fan_in = ne[0].
    void dense(std::string name, std::vector<int64_t> ne, float scale = 1.0f) {
        GgmlType t = fit_type(types_.dense, ne[0], name, notes_);
        float std = scale / std::sqrt((float)ne[0]);
        add(std::move(name), t, std::move(ne), 0.0f, std);
    }
    // Projections antirez's files keep in F16 (compressor, indexer.proj).
    void f16_proj(std::string name, std::vector<int64_t> ne) {
        float std = 1.0f / std::sqrt((float)ne[0]);
        add(std::move(name), GgmlType::F16, std::move(ne), 0.0f, std);
    }
    void norm(std::string name, int64_t n) { add(std::move(name), GgmlType::F32, {n}, 1.0f, kNormStd); }
    void hc_params(const std::string& pre, const std::string& what, int64_t n_out, int64_t n_scale) {
        add(pre + what + "_fn.weight", GgmlType::F16, {hp_.hc * hp_.n_embd, n_out}, 0.0f, kHcFnStd);
        add(pre + what + "_base.weight", GgmlType::F32, {n_out}, 0.0f, kHcBaseStd);
        add(pre + what + "_scale.weight", GgmlType::F32, {n_scale}, 1.0f, kHcScaleStd);
    }

    std::vector<SynthTensor> build() {
        const int64_t D = hp_.n_embd, V = hp_.n_vocab;
        const int64_t mix = (int64_t)(2 + hp_.hc) * hp_.hc;
        // Same order as the golden files: head HC, embedding, blocks, output, MTP block, expert stacks.
        hc_params("", "output_hc", hp_.hc, 1);
        add("token_embd.weight", fit_type(types_.dense, D, "token_embd.weight", notes_), {D, V}, 0.0f, kEmbdStd);
        for (int l = 0; l < hp_.n_layer; ++l) block(l, mix);
        norm("output_norm.weight", D);
        dense("output.weight", {D, V});
        if (hp_.mtp) block(hp_.n_layer, mix);
        for (int l = 0; l < hp_.n_blocks(); ++l) experts(l);
        return std::move(out_);
    }

private:
    void block(int l, int64_t mix) {
        const SynthHparams& h = hp_;
        const int64_t D = h.n_embd, H = h.n_head, hd = h.head_dim, G = h.o_groups;
        const bool is_mtp = l >= h.n_layer;
        const int ratio = is_mtp ? 0 : h.ratio(l);
        const std::string p = "blk." + std::to_string(l) + ".";
        add(p + "hc_attn_fn.weight", GgmlType::F16, {h.hc * D, mix}, 0.0f, kHcFnStd);
        add(p + "hc_ffn_fn.weight", GgmlType::F16, {h.hc * D, mix}, 0.0f, kHcFnStd);
        add(p + "hc_attn_base.weight", GgmlType::F32, {mix}, 0.0f, kHcBaseStd);
        add(p + "hc_ffn_base.weight", GgmlType::F32, {mix}, 0.0f, kHcBaseStd);
        add(p + "hc_attn_scale.weight", GgmlType::F32, {3}, 1.0f, kHcScaleStd);
        add(p + "hc_ffn_scale.weight", GgmlType::F32, {3}, 1.0f, kHcScaleStd);
        if (is_mtp) hc_params(p, "nextn.hc_head", h.hc, 1);
        add(p + "attn_sinks.weight", GgmlType::F32, {H}, 0.0f, kSinkStd);
        dense(p + "attn_q_a.weight", {D, h.q_lora_rank});
        norm(p + "attn_q_a_norm.weight", h.q_lora_rank);
        dense(p + "attn_q_b.weight", {h.q_lora_rank, H * hd});
        dense(p + "attn_kv.weight", {D, hd});
        norm(p + "attn_kv_a_norm.weight", hd);
        dense(p + "attn_output_a.weight", {H * hd / G, G * h.o_lora_rank});
        dense(p + "attn_output_b.weight", {G * h.o_lora_rank, D}, resid_);
        if (ratio > 0) {
            const int64_t coff = ratio == 4 ? 2 : 1;  // CSA keeps two overlapping halves
            add(p + "attn_compressor_ape.weight", GgmlType::F32, {coff * hd, ratio}, 0.0f, kApeStd);
            f16_proj(p + "attn_compressor_kv.weight", {D, coff * hd});
            f16_proj(p + "attn_compressor_gate.weight", {D, coff * hd});
            norm(p + "attn_compressor_norm.weight", hd);
        }
        if (ratio == 4) {
            const int64_t ih = h.index_n_head, id = h.index_head_dim;
            dense(p + "indexer.attn_q_b.weight", {h.q_lora_rank, ih * id});
            f16_proj(p + "indexer.proj.weight", {D, ih});
            add(p + "indexer_compressor_ape.weight", GgmlType::F32, {2 * id, 4}, 0.0f, kApeStd);
            f16_proj(p + "indexer_compressor_kv.weight", {D, 2 * id});
            f16_proj(p + "indexer_compressor_gate.weight", {D, 2 * id});
            norm(p + "indexer_compressor_norm.weight", id);
        }
        dense(p + "ffn_gate_inp.weight", {D, h.n_expert});
        if (!is_mtp && l < h.hash_layer_count)
            add(p + "ffn_gate_tid2eid.weight", GgmlType::I32, {h.n_expert_used, h.n_vocab}, 0.0f, 0.0f,
                SynthFill::expert_ids);
        else
            add(p + "exp_probs_b.bias", GgmlType::F32, {h.n_expert}, 0.0f, kBiasStd);
        const int64_t ff_sh = h.n_ff_exp * h.n_expert_shared;
        dense(p + "ffn_gate_shexp.weight", {D, ff_sh});
        dense(p + "ffn_down_shexp.weight", {ff_sh, D}, resid_);
        dense(p + "ffn_up_shexp.weight", {D, ff_sh});
        norm(p + "attn_norm.weight", D);
        norm(p + "ffn_norm.weight", D);
        if (is_mtp) {
            dense(p + "nextn.e_proj.weight", {D, D});
            dense(p + "nextn.h_proj.weight", {D, D});
            norm(p + "nextn.enorm.weight", D);
            norm(p + "nextn.hnorm.weight", D);
            norm(p + "nextn.shared_head_norm.weight", D);
        }
    }

    void experts(int l) {
        const int64_t D = hp_.n_embd, F = hp_.n_ff_exp, E = hp_.n_expert;
        const std::string p = "blk." + std::to_string(l) + ".";
        const float up_std = 1.0f / std::sqrt((float)D);
        const float down_std = resid_ / std::sqrt((float)F);
        add(p + "ffn_gate_exps.weight", fit_type(types_.expert_gate_up, D, p + "ffn_gate_exps.weight", notes_),
            {D, F, E}, 0.0f, up_std);
        add(p + "ffn_down_exps.weight", fit_type(types_.expert_down, F, p + "ffn_down_exps.weight", notes_),
            {F, D, E}, 0.0f, down_std);
        add(p + "ffn_up_exps.weight", fit_type(types_.expert_gate_up, D, p + "ffn_up_exps.weight", notes_),
            {D, F, E}, 0.0f, up_std);
    }

    const SynthHparams& hp_;
    const SynthTypes& types_;
    std::vector<std::string>* notes_;
    float resid_;
    std::vector<SynthTensor> out_;
};

}  // namespace

std::vector<SynthTensor> synth_plan(const SynthHparams& hp, const SynthTypes& types,
                                    std::vector<std::string>* notes) {
    return PlanBuilder(hp, types, notes).build();
}

// ---------------------------------------------------------------------------------------------------------
// Metadata

void synth_metadata(GgufWriter& w, const SynthHparams& h) {
    const int n_blocks = h.n_blocks();
    auto k = [](const char* s) { return std::string("deepseek4.") + s; };
    w.set_str("general.architecture", "deepseek4");
    w.set_str("general.name", h.name);
    // general.alignment (32, as in the golden files) is the writer's: it writes the key only when the
    // alignment differs from GGUF's default of 32.
    w.set_u32(k("block_count"), (uint32_t)n_blocks);
    w.set_u32(k("context_length"), (uint32_t)h.n_ctx_train);
    w.set_u32(k("embedding_length"), (uint32_t)h.n_embd);
    w.set_u32(k("vocab_size"), (uint32_t)h.n_vocab);
    w.set_u32(k("attention.head_count"), (uint32_t)h.n_head);
    w.set_u32(k("attention.head_count_kv"), 1);
    w.set_u32(k("attention.key_length"), (uint32_t)h.head_dim);
    w.set_u32(k("attention.value_length"), (uint32_t)h.head_dim);
    w.set_f32(k("attention.layer_norm_rms_epsilon"), h.norm_eps);
    w.set_u32(k("attention.q_lora_rank"), (uint32_t)h.q_lora_rank);
    w.set_u32(k("attention.output_lora_rank"), (uint32_t)h.o_lora_rank);
    w.set_u32(k("attention.output_group_count"), (uint32_t)h.o_groups);
    w.set_u32(k("attention.sliding_window"), (uint32_t)h.window);
    // One entry per block; the MTP block is window-only (ratio 0), as in the official config. The golden
    // files store it as an i32 array.
    std::vector<int32_t> ratios(n_blocks, 0);
    for (int i = 0; i < h.n_layer; ++i) ratios[i] = h.ratio(i);
    w.set_arr_i32(k("attention.compress_ratios"), ratios);
    w.set_f32(k("attention.compress_rope_freq_base"), h.compress_rope_freq_base);
    w.set_u32(k("attention.indexer.head_count"), (uint32_t)h.index_n_head);
    w.set_u32(k("attention.indexer.key_length"), (uint32_t)h.index_head_dim);
    w.set_u32(k("attention.indexer.top_k"), (uint32_t)h.index_top_k);
    w.set_u32(k("rope.dimension_count"), (uint32_t)h.rope_dim);
    w.set_f32(k("rope.freq_base"), h.rope_freq_base);
    w.set_str(k("rope.scaling.type"), "yarn");
    w.set_f32(k("rope.scaling.factor"), h.rope_scaling_factor);
    w.set_u32(k("rope.scaling.original_context_length"), (uint32_t)h.rope_orig_ctx);
    w.set_f32(k("rope.scaling.yarn_beta_fast"), h.yarn_beta_fast);
    w.set_f32(k("rope.scaling.yarn_beta_slow"), h.yarn_beta_slow);
    w.set_u32(k("expert_count"), (uint32_t)h.n_expert);
    w.set_u32(k("expert_used_count"), (uint32_t)h.n_expert_used);
    w.set_u32(k("expert_shared_count"), (uint32_t)h.n_expert_shared);
    w.set_u32(k("expert_feed_forward_length"), (uint32_t)h.n_ff_exp);
    w.set_f32(k("expert_weights_scale"), h.expert_weights_scale);
    w.set_bool(k("expert_weights_norm"), true);
    w.set_u32(k("expert_gating_func"), 4);  // sqrtsoftplus
    w.set_arr_f32(k("swiglu_clamp_exp"), std::vector<float>(n_blocks, h.swiglu_clamp));
    w.set_arr_f32(k("swiglu_clamp_shexp"), std::vector<float>(n_blocks, h.swiglu_clamp));
    w.set_u32(k("hyper_connection.count"), (uint32_t)h.hc);
    w.set_u32(k("hyper_connection.sinkhorn_iterations"), (uint32_t)h.hc_sinkhorn_iters);
    w.set_f32(k("hyper_connection.epsilon"), h.hc_eps);
    w.set_u32(k("hash_layer_count"), (uint32_t)h.hash_layer_count);
    if (h.mtp) w.set_u32(k("nextn_predict_layers"), 1);
}

Result<int64_t> synth_vocab_size(const GgufFile& vocab) {
    const GgufValue* v = vocab.find("tokenizer.ggml.tokens");
    if (!v || v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING || v->n_elems == 0)
        return make_error("vocab file '" + vocab.path() + "' has no string array 'tokenizer.ggml.tokens'");
    return (int64_t)v->n_elems;
}

// ---------------------------------------------------------------------------------------------------------
// The GGUF description and the streaming file writer

Result<std::vector<SynthTensor>> synth_describe(GgufWriter& w, const SynthHparams& hp, const SynthTypes& types,
                                                const SynthWriteOptions& opt,
                                                std::function<Status(size_t index, std::FILE* out)> produce) {
    DSV4_TRY(synth_validate(hp));
    for (GgmlType t : {types.expert_gate_up, types.expert_down, types.dense})
        if (!synth_type_supported(t))
            return make_error("synth: cannot generate tensors of type " + std::string(ggml_type_name(t)) +
                              " (no quantizer and no known block layout)");
    std::vector<SynthTensor> plan = synth_plan(hp, types);

    w.set_alignment(32);
    synth_metadata(w, hp);
    if (opt.vocab) {
        DSV4_ASSIGN_OR_RETURN(int64_t n_vocab, synth_vocab_size(*opt.vocab));
        if (n_vocab != hp.n_vocab)
            return make_error("synth: vocab file '" + opt.vocab->path() + "' has " + std::to_string(n_vocab) +
                              " tokens but the model is built for " + std::to_string(hp.n_vocab));
        for (const auto& [key, value] : opt.vocab->metadata())
            if (key.rfind("tokenizer.", 0) == 0) w.copy_value(key, value);
    }
    auto shared = std::make_shared<std::function<Status(size_t, std::FILE*)>>(std::move(produce));
    for (size_t i = 0; i < plan.size(); ++i) {
        const SynthTensor& t = plan[i];
        DSV4_TRY(w.add_tensor(t.name, t.type, t.ne, [shared, i](std::FILE* out) { return (*shared)(i, out); }));
    }
    return plan;
}

namespace {

// Streams one tensor into the file in chunks: the next chunk is generated while the previous one is written.
class FileProducer {
public:
    FileProducer(SynthGenerator& gen, const std::vector<SynthTensor>& plan, SynthProgress& progress)
        : gen_(gen), plan_(plan), progress_(progress) {}

    Status produce(size_t index, std::FILE* out) {
        const SynthTensor& t = plan_[index];
        const size_t row_bytes = ggml_row_bytes(ggml_traits(t.type), t.ne[0]);
        const int64_t n_rows = t.n_rows();
        const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t)(kChunkBytes / row_bytes));
        std::future<size_t> pending;
        size_t pending_bytes = 0;
        int cur = 0;
        for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
            const int64_t n = std::min(rows_per_chunk, n_rows - r0);
            std::vector<uint8_t>& buf = bufs_[cur];
            buf.resize((size_t)n * row_bytes);
            gen_.fill(index, r0, n, buf.data());
            if (pending.valid()) DSV4_TRY(finish_write(pending, pending_bytes, t));
            pending_bytes = buf.size();
            pending = std::async(std::launch::async, [out, &buf] { return std::fwrite(buf.data(), 1, buf.size(), out); });
            cur ^= 1;
        }
        if (pending.valid()) DSV4_TRY(finish_write(pending, pending_bytes, t));
        return {};
    }

private:
    static constexpr size_t kChunkBytes = 8u << 20;

    Status finish_write(std::future<size_t>& f, size_t want, const SynthTensor& t) {
        if (f.get() != want) return make_error("synth: short write of tensor '" + t.name + "' (disk full?)");
        progress_.add(want);
        return {};
    }

    SynthGenerator& gen_;
    const std::vector<SynthTensor>& plan_;
    SynthProgress& progress_;
    std::vector<uint8_t> bufs_[2];  // one being filled while the other is written
};

}  // namespace

Status synth_write(const SynthHparams& hp, const SynthTypes& types, const SynthWriteOptions& opt,
                   const std::string& path) {
    GgufWriter w;
    FileProducer* producer = nullptr;  // made once the plan is known; the writer calls it only in write()
    DSV4_ASSIGN_OR_RETURN(
        const std::vector<SynthTensor> plan,
        synth_describe(w, hp, types, opt, [&producer](size_t i, std::FILE* out) { return producer->produce(i, out); }));
    SynthGenerator gen(plan, hp, opt.seed, opt.n_threads, opt.random_quantized);
    SynthProgress progress(opt.progress, synth_plan_bytes(plan), "synth");
    FileProducer file_producer(gen, plan, progress);
    producer = &file_producer;
    Status st = w.write(path);
    progress.finish();
    return st;
}

}  // namespace dsv4
