// Reads ModelConfig from the `deepseek4.*` keys, tolerant of what producers differ on (see
// shared/spec/gguf_deepseek4.md §3.2): compress_ratios longer than the layer count, optional vocab_size,
// swiglu_clamp_shexp, embedding_length_out, nextn_predict_layers, scalar-or-array clamps.
#include "model/config.h"

#include <cmath>
#include <sstream>

#include "format/gguf.h"

namespace dsv4 {

namespace {

std::string key(std::string_view k) { return "deepseek4." + std::string(k); }

// A per-layer f32 value stored either as a scalar or as an array of at least n entries.
Result<std::vector<float>> get_f32_per_layer(const GgufFile& f, std::string_view k, int n) {
    const GgufValue* v = f.find(k);
    if (!v) return make_error("missing key '" + std::string(k) + "'");
    if (v->type == GgufValueType::ARRAY) {
        DSV4_ASSIGN_OR_RETURN(std::vector<float> arr, f.get_arr_f32(k));
        if ((int)arr.size() < n)
            return make_error("key '" + std::string(k) + "' has " + std::to_string(arr.size()) +
                              " entries, fewer than the " + std::to_string(n) + " blocks");
        arr.resize(n);
        return arr;
    }
    DSV4_ASSIGN_OR_RETURN(float x, f.get_f32(k));
    return std::vector<float>(n, x);
}

Status positive(std::string_view name, int64_t v) {
    if (v <= 0) return make_error("key '" + key(name) + "' must be positive, got " + std::to_string(v));
    return {};
}

}  // namespace

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile& f) {
    ModelConfig c;
    auto arch = f.get_str("general.architecture");
    if (!arch.ok()) return make_error(arch.error());
    if (*arch != "deepseek4")
        return make_error("general.architecture is '" + *arch + "', not 'deepseek4'");

    DSV4_ASSIGN_OR_RETURN(uint32_t block_count, f.get_u32(key("block_count")));
    c.n_nextn = 0;
    if (f.has(key("nextn_predict_layers"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t nn, f.get_u32(key("nextn_predict_layers")));
        c.n_nextn = (int)nn;
    }
    if ((int64_t)block_count <= c.n_nextn)
        return make_error("key '" + key("block_count") + "' (" + std::to_string(block_count) +
                          ") must exceed nextn_predict_layers (" + std::to_string(c.n_nextn) + ")");
    c.n_layer = (int)block_count - c.n_nextn;
    const int n_blocks = (int)block_count;

    DSV4_ASSIGN_OR_RETURN(uint32_t n_embd, f.get_u32(key("embedding_length")));
    c.n_embd = n_embd;
    if (f.has(key("context_length"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t ctx, f.get_u32(key("context_length")));
        c.n_ctx_train = ctx;
    }
    if (f.has(key("vocab_size"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t nv, f.get_u32(key("vocab_size")));
        c.n_vocab = nv;
    }  // else derived from token_embd by the weight loader

    DSV4_ASSIGN_OR_RETURN(uint32_t n_head, f.get_u32(key("attention.head_count")));
    c.n_head = (int)n_head;
    if (f.has(key("attention.head_count_kv"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t kvh, f.get_u32(key("attention.head_count_kv")));
        if (kvh != 1)
            return make_error("key '" + key("attention.head_count_kv") + "' is " + std::to_string(kvh) +
                              "; DeepSeek-V4 has one shared KV head");
    }
    DSV4_ASSIGN_OR_RETURN(uint32_t key_len, f.get_u32(key("attention.key_length")));
    c.head_dim = (int)key_len;
    if (f.has(key("attention.value_length"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t vl, f.get_u32(key("attention.value_length")));
        if (vl != key_len)
            return make_error("key '" + key("attention.value_length") + "' (" + std::to_string(vl) +
                              ") differs from key_length (" + std::to_string(key_len) + ")");
    }
    DSV4_ASSIGN_OR_RETURN(c.norm_eps, f.get_f32(key("attention.layer_norm_rms_epsilon")));
    DSV4_ASSIGN_OR_RETURN(uint32_t qr, f.get_u32(key("attention.q_lora_rank")));
    c.q_lora_rank = (int)qr;
    DSV4_ASSIGN_OR_RETURN(uint32_t orank, f.get_u32(key("attention.output_lora_rank")));
    c.o_lora_rank = (int)orank;
    DSV4_ASSIGN_OR_RETURN(uint32_t og, f.get_u32(key("attention.output_group_count")));
    c.o_groups = (int)og;
    DSV4_ASSIGN_OR_RETURN(uint32_t win, f.get_u32(key("attention.sliding_window")));
    c.window = (int)win;

    DSV4_ASSIGN_OR_RETURN(std::vector<uint32_t> ratios, f.get_arr_u32(key("attention.compress_ratios")));
    if ((int)ratios.size() < c.n_layer)
        return make_error("key '" + key("attention.compress_ratios") + "' has " + std::to_string(ratios.size()) +
                          " entries, fewer than the " + std::to_string(c.n_layer) + " layers");
    c.compress_ratios.assign(ratios.begin(), ratios.begin() + c.n_layer);
    DSV4_ASSIGN_OR_RETURN(c.compress_rope_freq_base, f.get_f32(key("attention.compress_rope_freq_base")));

    bool any_csa = false, any_compressed = false;
    for (int r : c.compress_ratios) {
        any_csa |= r == 4;
        any_compressed |= r > 0;
    }
    if (any_csa) {
        DSV4_ASSIGN_OR_RETURN(uint32_t ih, f.get_u32(key("attention.indexer.head_count")));
        DSV4_ASSIGN_OR_RETURN(uint32_t ik, f.get_u32(key("attention.indexer.key_length")));
        DSV4_ASSIGN_OR_RETURN(uint32_t it, f.get_u32(key("attention.indexer.top_k")));
        c.index_n_head = (int)ih;
        c.index_head_dim = (int)ik;
        c.index_top_k = (int)it;
    }

    DSV4_ASSIGN_OR_RETURN(uint32_t rd, f.get_u32(key("rope.dimension_count")));
    c.rope_dim = (int)rd;
    DSV4_ASSIGN_OR_RETURN(c.rope_freq_base, f.get_f32(key("rope.freq_base")));
    if (f.has(key("rope.scaling.type"))) {
        DSV4_ASSIGN_OR_RETURN(std::string st, f.get_str(key("rope.scaling.type")));
        if (st == "yarn") {
            c.yarn = true;
        } else if (st != "none") {
            return make_error("key '" + key("rope.scaling.type") + "' is '" + st + "'; only 'yarn' is supported");
        }
    }
    if (c.yarn) {
        DSV4_ASSIGN_OR_RETURN(c.rope_scaling_factor, f.get_f32(key("rope.scaling.factor")));
        DSV4_ASSIGN_OR_RETURN(uint32_t orig, f.get_u32(key("rope.scaling.original_context_length")));
        c.rope_orig_ctx = orig;
        if (f.has(key("rope.scaling.yarn_beta_fast"))) {
            DSV4_ASSIGN_OR_RETURN(c.yarn_beta_fast, f.get_f32(key("rope.scaling.yarn_beta_fast")));
        }
        if (f.has(key("rope.scaling.yarn_beta_slow"))) {
            DSV4_ASSIGN_OR_RETURN(c.yarn_beta_slow, f.get_f32(key("rope.scaling.yarn_beta_slow")));
        }
    }

    DSV4_ASSIGN_OR_RETURN(uint32_t ne, f.get_u32(key("expert_count")));
    DSV4_ASSIGN_OR_RETURN(uint32_t nu, f.get_u32(key("expert_used_count")));
    c.n_expert = (int)ne;
    c.n_expert_used = (int)nu;
    c.n_expert_shared = 1;
    if (f.has(key("expert_shared_count"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t ns, f.get_u32(key("expert_shared_count")));
        c.n_expert_shared = (int)ns;
    }
    DSV4_ASSIGN_OR_RETURN(uint32_t ff, f.get_u32(key("expert_feed_forward_length")));
    c.n_ff_exp = ff;
    DSV4_ASSIGN_OR_RETURN(c.expert_weights_scale, f.get_f32(key("expert_weights_scale")));
    if (f.has(key("expert_weights_norm"))) {
        DSV4_ASSIGN_OR_RETURN(c.expert_weights_norm, f.get_bool(key("expert_weights_norm")));
    }
    if (f.has(key("expert_gating_func"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t g, f.get_u32(key("expert_gating_func")));
        if (g != 4)
            return make_error("key '" + key("expert_gating_func") + "' is " + std::to_string(g) +
                              "; DeepSeek-V4 uses sqrtsoftplus (4)");
    }
    c.hash_layer_count = 0;
    if (f.has(key("hash_layer_count"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t h, f.get_u32(key("hash_layer_count")));
        c.hash_layer_count = (int)h;
    }
    DSV4_ASSIGN_OR_RETURN(c.swiglu_clamp_exp, get_f32_per_layer(f, key("swiglu_clamp_exp"), n_blocks));
    if (f.has(key("swiglu_clamp_shexp"))) {
        DSV4_ASSIGN_OR_RETURN(c.swiglu_clamp_shexp, get_f32_per_layer(f, key("swiglu_clamp_shexp"), n_blocks));
    } else {
        c.swiglu_clamp_shexp = c.swiglu_clamp_exp;
    }

    DSV4_ASSIGN_OR_RETURN(uint32_t hc, f.get_u32(key("hyper_connection.count")));
    c.hc = (int)hc;
    DSV4_ASSIGN_OR_RETURN(uint32_t hs, f.get_u32(key("hyper_connection.sinkhorn_iterations")));
    c.hc_sinkhorn_iters = (int)hs;
    DSV4_ASSIGN_OR_RETURN(c.hc_eps, f.get_f32(key("hyper_connection.epsilon")));
    if (f.has(key("embedding_length_out"))) {
        DSV4_ASSIGN_OR_RETURN(uint32_t eo, f.get_u32(key("embedding_length_out")));
        if ((int64_t)eo != c.hc_dim())
            return make_error("key '" + key("embedding_length_out") + "' is " + std::to_string(eo) +
                              ", expected hyper_connection.count * embedding_length = " + std::to_string(c.hc_dim()));
    }

    // Consistency of what the math needs.
    DSV4_TRY(positive("embedding_length", c.n_embd));
    DSV4_TRY(positive("attention.head_count", c.n_head));
    DSV4_TRY(positive("attention.key_length", c.head_dim));
    DSV4_TRY(positive("attention.q_lora_rank", c.q_lora_rank));
    DSV4_TRY(positive("attention.output_lora_rank", c.o_lora_rank));
    DSV4_TRY(positive("attention.output_group_count", c.o_groups));
    DSV4_TRY(positive("attention.sliding_window", c.window));
    DSV4_TRY(positive("expert_count", c.n_expert));
    DSV4_TRY(positive("expert_used_count", c.n_expert_used));
    DSV4_TRY(positive("expert_feed_forward_length", c.n_ff_exp));
    DSV4_TRY(positive("hyper_connection.count", c.hc));
    DSV4_TRY(positive("hyper_connection.sinkhorn_iterations", c.hc_sinkhorn_iters));
    if (c.n_expert_used > c.n_expert)
        return make_error("key '" + key("expert_used_count") + "' (" + std::to_string(c.n_expert_used) +
                          ") exceeds expert_count (" + std::to_string(c.n_expert) + ")");
    if (c.n_expert_shared != 1)
        return make_error("key '" + key("expert_shared_count") + "' is " + std::to_string(c.n_expert_shared) +
                          "; one shared expert is supported");
    if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
        return make_error("key '" + key("rope.dimension_count") + "' (" + std::to_string(c.rope_dim) +
                          ") must be even and within key_length (" + std::to_string(c.head_dim) + ")");
    if (c.n_head % c.o_groups != 0)
        return make_error("key '" + key("attention.output_group_count") + "' (" + std::to_string(c.o_groups) +
                          ") does not divide head_count (" + std::to_string(c.n_head) + ")");
    if (c.hash_layer_count > c.n_layer)
        return make_error("key '" + key("hash_layer_count") + "' exceeds the layer count");
    for (int l = 0; l < c.n_layer; ++l) {
        if (c.compress_ratios[l] < 0)
            return make_error("key '" + key("attention.compress_ratios") + "' has a negative entry at layer " +
                              std::to_string(l));
    }
    if (any_csa) {
        DSV4_TRY(positive("attention.indexer.head_count", c.index_n_head));
        DSV4_TRY(positive("attention.indexer.top_k", c.index_top_k));
        int d = c.index_head_dim;
        if (d <= 0 || (d & (d - 1)) != 0 || d < c.rope_dim)
            return make_error("key '" + key("attention.indexer.key_length") + "' (" + std::to_string(d) +
                              ") must be a power of two at least rope.dimension_count (Hadamard rotation)");
    }
    (void)any_compressed;
    return c;
}

std::string ModelConfig::describe() const {
    std::ostringstream o;
    o << "  layers            " << n_layer << " (+" << n_nextn << " MTP)\n";
    o << "  embedding         " << n_embd << " x hc " << hc << " streams (sinkhorn " << hc_sinkhorn_iters
      << ", eps " << hc_eps << ")\n";
    o << "  vocabulary        " << n_vocab << "\n";
    o << "  attention         " << n_head << " heads x " << head_dim << " (rope " << rope_dim << "), q_lora "
      << q_lora_rank << ", o_lora " << o_lora_rank << " x " << o_groups << " groups, window " << window << "\n";
    o << "  compress ratios   [";
    for (size_t i = 0; i < compress_ratios.size(); ++i) o << (i ? "," : "") << compress_ratios[i];
    o << "]\n";
    if (index_n_head > 0)
        o << "  indexer           " << index_n_head << " heads x " << index_head_dim << ", top-k " << index_top_k
          << "\n";
    o << "  rope              base " << rope_freq_base << " (window layers), " << compress_rope_freq_base
      << " (compressed layers)";
    if (yarn)
        o << ", yarn factor " << rope_scaling_factor << " orig " << rope_orig_ctx << " beta " << yarn_beta_fast
          << "/" << yarn_beta_slow;
    o << "\n";
    o << "  experts           " << n_expert << " routed (" << n_expert_used << " used) + " << n_expert_shared
      << " shared, ff " << n_ff_exp << ", scale " << expert_weights_scale << ", hash layers "
      << hash_layer_count << "\n";
    o << "  swiglu clamp      " << (swiglu_clamp_exp.empty() ? 0.f : swiglu_clamp_exp[0]) << " (routed), "
      << (swiglu_clamp_shexp.empty() ? 0.f : swiglu_clamp_shexp[0]) << " (shared)\n";
    o << "  norm eps          " << norm_eps << "\n";
    return o.str();
}

}  // namespace dsv4
