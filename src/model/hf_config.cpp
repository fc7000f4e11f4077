// config.json -> deepseek4 metadata keys. Each HF key maps to one GGUF key (names and types as the golden
// files and llama.cpp's converter write them); keys with a fixed meaning are checked, so a checkpoint of a
// different architecture or quantization fails here instead of producing a file that loads wrongly.
#include <string>

#include "format/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/hf_convert.h"

namespace dsv4 {

namespace {

using json = nlohmann::ordered_json;

struct ConfigReader {
    const json& j;
    const std::string& path;

    Error err(const std::string& key, const std::string& what) const {
        return make_error(in_quotes(path) + ": " + key + " " + what);
    }
    Result<uint32_t> u32(const std::string& key) const {
        auto it = j.find(key);
        if (it == j.end()) return err(key, "is missing");
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 0xffffffffll)
            return err(key, "is " + it->dump() + ", not a non-negative integer");
        return (uint32_t)it->get<int64_t>();
    }
    Result<uint32_t> u32_or(const std::string& key, uint32_t def) const {
        return j.contains(key) ? u32(key) : Result<uint32_t>(def);
    }
    Result<float> f32(const json& obj, const std::string& key, const std::string& label) const {
        auto it = obj.find(key);
        if (it == obj.end()) return err(label, "is missing");
        if (!it->is_number()) return err(label, "is " + it->dump() + ", not a number");
        return it->get<float>();
    }
    Result<float> f32(const std::string& key) const { return f32(j, key, key); }
    Result<bool> boolean(const std::string& key, bool def) const {
        auto it = j.find(key);
        if (it == j.end()) return def;
        if (!it->is_boolean()) return err(key, "is " + it->dump() + ", not true or false");
        return it->get<bool>();
    }
    // A string key that must hold one of `allowed` (missing keys take `def` when it is given).
    Result<std::string> one_of(const json& obj, const std::string& key, const std::string& label,
                               std::initializer_list<const char*> allowed, const char* def = nullptr) const {
        auto it = obj.find(key);
        if (it == obj.end()) {
            if (def) return std::string(def);
            return err(label, "is missing");
        }
        std::string list;
        for (const char* a : allowed) {
            if (it->is_string() && it->get<std::string>() == a) return std::string(a);
            list += std::string(list.empty() ? "" : ", ") + a;
        }
        return err(label, "is " + it->dump() + "; this converter knows " + list);
    }
};

}  // namespace

Result<HfModelDims> hf_config_to_gguf(const json& config, const std::string& path, const std::string& model_name,
                                      bool with_mtp, GgufWriter& w) {
    ConfigReader c{config, path};
    HfModelDims d;
    DSV4_TRY(c.one_of(config, "model_type", "model_type", {"deepseek_v4"}));
    DSV4_ASSIGN_OR_RETURN(uint32_t n_layer, c.u32("num_hidden_layers"));
    DSV4_ASSIGN_OR_RETURN(uint32_t n_mtp, c.u32_or("num_nextn_predict_layers", 0));
    if (n_layer == 0) return c.err("num_hidden_layers", "is 0");
    d.n_layer = (int)n_layer;
    d.n_mtp = (int)n_mtp;
    const uint32_t blocks = n_layer + (with_mtp ? n_mtp : 0);

    w.set_str("general.architecture", "deepseek4");
    w.set_str("general.name", model_name);
    const std::string k = "deepseek4.";
    w.set_u32(k + "block_count", blocks);
    DSV4_ASSIGN_OR_RETURN(uint32_t ctx, c.u32("max_position_embeddings"));
    w.set_u32(k + "context_length", ctx);
    DSV4_ASSIGN_OR_RETURN(uint32_t n_embd, c.u32("hidden_size"));
    w.set_u32(k + "embedding_length", n_embd);
    d.n_embd = (int)n_embd;
    DSV4_ASSIGN_OR_RETURN(uint32_t vocab, c.u32("vocab_size"));
    w.set_u32(k + "vocab_size", vocab);
    d.vocab_size = (int)vocab;
    DSV4_ASSIGN_OR_RETURN(uint32_t n_head, c.u32("num_attention_heads"));
    w.set_u32(k + "attention.head_count", n_head);
    d.n_head = (int)n_head;
    DSV4_ASSIGN_OR_RETURN(uint32_t n_kv, c.u32_or("num_key_value_heads", 1));
    w.set_u32(k + "attention.head_count_kv", n_kv);
    DSV4_ASSIGN_OR_RETURN(uint32_t head_dim, c.u32("head_dim"));
    w.set_u32(k + "attention.key_length", head_dim);
    w.set_u32(k + "attention.value_length", head_dim);
    d.head_dim = (int)head_dim;
    DSV4_ASSIGN_OR_RETURN(float eps, c.f32("rms_norm_eps"));
    w.set_f32(k + "attention.layer_norm_rms_epsilon", eps);
    DSV4_ASSIGN_OR_RETURN(uint32_t q_rank, c.u32("q_lora_rank"));
    w.set_u32(k + "attention.q_lora_rank", q_rank);
    d.q_rank = (int)q_rank;
    DSV4_ASSIGN_OR_RETURN(uint32_t o_rank, c.u32("o_lora_rank"));
    w.set_u32(k + "attention.output_lora_rank", o_rank);
    DSV4_ASSIGN_OR_RETURN(uint32_t o_groups, c.u32("o_groups"));
    w.set_u32(k + "attention.output_group_count", o_groups);
    DSV4_ASSIGN_OR_RETURN(uint32_t window, c.u32("sliding_window"));
    w.set_u32(k + "attention.sliding_window", window);

    auto ratios_it = config.find("compress_ratios");
    if (ratios_it == config.end() || !ratios_it->is_array()) return c.err("compress_ratios", "is missing or not a list");
    std::vector<int32_t> ratios;
    for (const auto& r : *ratios_it) {
        if (!r.is_number_integer() || (r.get<int64_t>() != 0 && r.get<int64_t>() != 4 && r.get<int64_t>() != 128))
            return c.err("compress_ratios", "holds " + r.dump() + "; the layers know 0, 4 and 128");
        ratios.push_back((int32_t)r.get<int64_t>());
    }
    if (ratios.size() < n_layer)
        return c.err("compress_ratios", "has " + std::to_string(ratios.size()) + " entries for " +
                                            std::to_string(n_layer) + " layers");
    w.set_arr_i32(k + "attention.compress_ratios", ratios);
    DSV4_ASSIGN_OR_RETURN(float crope, c.f32("compress_rope_theta"));
    w.set_f32(k + "attention.compress_rope_freq_base", crope);
    DSV4_ASSIGN_OR_RETURN(uint32_t ih, c.u32("index_n_heads"));
    w.set_u32(k + "attention.indexer.head_count", ih);
    DSV4_ASSIGN_OR_RETURN(uint32_t ik, c.u32("index_head_dim"));
    w.set_u32(k + "attention.indexer.key_length", ik);
    DSV4_ASSIGN_OR_RETURN(uint32_t itop, c.u32("index_topk"));
    w.set_u32(k + "attention.indexer.top_k", itop);

    DSV4_ASSIGN_OR_RETURN(uint32_t rope_dim, c.u32("qk_rope_head_dim"));
    w.set_u32(k + "rope.dimension_count", rope_dim);
    DSV4_ASSIGN_OR_RETURN(float theta, c.f32("rope_theta"));
    w.set_f32(k + "rope.freq_base", theta);
    auto rs = config.find("rope_scaling");
    if (rs != config.end() && !rs->is_null()) {
        if (!rs->is_object()) return c.err("rope_scaling", "is not an object");
        const char* type_key = rs->contains("type") ? "type" : "rope_type";
        DSV4_ASSIGN_OR_RETURN(std::string type, c.one_of(*rs, type_key, std::string("rope_scaling.") + type_key, {"yarn"}));
        w.set_str(k + "rope.scaling.type", type);
        DSV4_ASSIGN_OR_RETURN(float factor, c.f32(*rs, "factor", "rope_scaling.factor"));
        w.set_f32(k + "rope.scaling.factor", factor);
        auto orig = rs->find("original_max_position_embeddings");
        if (orig == rs->end() || !orig->is_number_integer() || orig->get<int64_t>() <= 0)
            return c.err("rope_scaling.original_max_position_embeddings", "is missing or not a positive integer");
        w.set_u32(k + "rope.scaling.original_context_length", (uint32_t)orig->get<int64_t>());
        DSV4_ASSIGN_OR_RETURN(float bf, c.f32(*rs, "beta_fast", "rope_scaling.beta_fast"));
        w.set_f32(k + "rope.scaling.yarn_beta_fast", bf);
        DSV4_ASSIGN_OR_RETURN(float bs, c.f32(*rs, "beta_slow", "rope_scaling.beta_slow"));
        w.set_f32(k + "rope.scaling.yarn_beta_slow", bs);
    }

    DSV4_ASSIGN_OR_RETURN(uint32_t n_expert, c.u32("n_routed_experts"));
    w.set_u32(k + "expert_count", n_expert);
    d.n_expert = (int)n_expert;
    DSV4_ASSIGN_OR_RETURN(uint32_t n_used, c.u32("num_experts_per_tok"));
    w.set_u32(k + "expert_used_count", n_used);
    d.n_used = (int)n_used;
    DSV4_ASSIGN_OR_RETURN(uint32_t n_shared, c.u32_or("n_shared_experts", 1));
    w.set_u32(k + "expert_shared_count", n_shared);
    DSV4_ASSIGN_OR_RETURN(uint32_t ff, c.u32("moe_intermediate_size"));
    w.set_u32(k + "expert_feed_forward_length", ff);
    d.n_ff = (int)ff;
    DSV4_ASSIGN_OR_RETURN(float rscale, c.f32("routed_scaling_factor"));
    w.set_f32(k + "expert_weights_scale", rscale);
    DSV4_ASSIGN_OR_RETURN(bool norm_topk, c.boolean("norm_topk_prob", true));
    w.set_bool(k + "expert_weights_norm", norm_topk);
    DSV4_TRY(c.one_of(config, "scoring_func", "scoring_func", {"sqrtsoftplus"}));
    w.set_u32(k + "expert_gating_func", 4);  // sqrtsoftplus (llama.cpp's LLAMA_EXPERT_GATING_FUNC id)
    DSV4_TRY(c.one_of(config, "topk_method", "topk_method", {"noaux_tc"}, "noaux_tc"));
    DSV4_ASSIGN_OR_RETURN(float clamp, c.f32("swiglu_limit"));
    w.set_arr_f32(k + "swiglu_clamp_exp", std::vector<float>(blocks, clamp));
    w.set_arr_f32(k + "swiglu_clamp_shexp", std::vector<float>(blocks, clamp));
    DSV4_ASSIGN_OR_RETURN(uint32_t hc, c.u32("hc_mult"));
    w.set_u32(k + "hyper_connection.count", hc);
    DSV4_ASSIGN_OR_RETURN(uint32_t sk, c.u32("hc_sinkhorn_iters"));
    w.set_u32(k + "hyper_connection.sinkhorn_iterations", sk);
    DSV4_ASSIGN_OR_RETURN(float hc_eps, c.f32("hc_eps"));
    w.set_f32(k + "hyper_connection.epsilon", hc_eps);
    DSV4_ASSIGN_OR_RETURN(uint32_t hash, c.u32_or("num_hash_layers", 0));
    w.set_u32(k + "hash_layer_count", hash);
    d.hash_layers = (int)hash;
    w.set_u32(k + "nextn_predict_layers", with_mtp ? n_mtp : 0);
    DSV4_ASSIGN_OR_RETURN(bool tied, c.boolean("tie_word_embeddings", false));
    if (tied) return c.err("tie_word_embeddings", "is true; DeepSeek-V4 has a separate head");

    auto q = config.find("quantization_config");
    if (q != config.end() && !q->is_null()) {
        if (!q->is_object()) return c.err("quantization_config", "is not an object");
        DSV4_TRY(c.one_of(*q, "quant_method", "quantization_config.quant_method", {"fp8"}));
        DSV4_TRY(c.one_of(*q, "fmt", "quantization_config.fmt", {"e4m3"}, "e4m3"));
        DSV4_TRY(c.one_of(*q, "scale_fmt", "quantization_config.scale_fmt", {"ue8m0"}, "ue8m0"));
        auto bs = q->find("weight_block_size");
        if (bs == q->end() || *bs != json::array({128, 128}))
            return c.err("quantization_config.weight_block_size",
                         (bs == q->end() ? std::string("is missing") : "is " + bs->dump()) + "; this converter knows [128, 128]");
        d.fp8 = true;
    }
    DSV4_ASSIGN_OR_RETURN(std::string edt, c.one_of(config, "expert_dtype", "expert_dtype", {"fp4", "fp8", "bf16"}, "bf16"));
    d.fp4_experts = edt == "fp4";
    return d;
}

}  // namespace dsv4
