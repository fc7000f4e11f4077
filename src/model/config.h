// The DeepSeek-V4 hyperparameters, read from the `deepseek4.*` GGUF keys into one struct. Nothing here is
// specific to one model size: every value comes from the file, optional keys have the documented defaults,
// and a missing required key is an error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class GgufFile;

struct ModelConfig {
    std::string arch = "deepseek4";
    int64_t n_vocab = 0;
    int64_t n_embd = 0;          // D
    int n_layer = 0;             // main blocks (block_count minus nextn blocks)
    int n_nextn = 0;             // MTP blocks present in the file (0 or 1 used)
    int64_t n_ctx_train = 0;

    // attention
    int n_head = 0;
    int n_head_kv = 1;
    int head_dim = 0;            // key_length = value_length
    int rope_dim = 0;            // rope.dimension_count (tail dims of each head)
    int q_lora_rank = 0;
    int o_lora_rank = 0;
    int o_groups = 0;
    int window = 0;              // sliding_window
    std::vector<int> compress_ratios;  // per main layer (first n_layer entries of the key)
    float rope_freq_base = 10000.0f;
    float compress_rope_freq_base = 160000.0f;
    float norm_eps = 1e-6f;
    // YaRN (used on compressed layers)
    float rope_scaling_factor = 1.0f;
    int64_t rope_orig_ctx = 0;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    bool yarn = false;

    // indexer
    int index_n_head = 0;
    int index_head_dim = 0;
    int index_top_k = 0;

    // MoE
    int n_expert = 0;
    int n_expert_used = 0;
    int n_expert_shared = 0;
    int64_t n_ff_exp = 0;        // expert_feed_forward_length
    float expert_weights_scale = 1.0f;
    bool expert_weights_norm = true;
    int hash_layer_count = 0;
    std::vector<float> swiglu_clamp_exp;    // per layer (incl. MTP blocks)
    std::vector<float> swiglu_clamp_shexp;  // per layer; defaults to swiglu_clamp_exp

    // hyper-connections
    int hc = 0;
    int hc_sinkhorn_iters = 0;
    float hc_eps = 1e-6f;

    // Derived helpers.
    int ratio(int layer) const { return layer < (int)compress_ratios.size() ? compress_ratios[layer] : 0; }
    bool is_csa(int layer) const { return ratio(layer) == 4; }
    bool is_hash(int layer) const { return layer < hash_layer_count; }
    int64_t hc_dim() const { return (int64_t)hc * n_embd; }
    int hc_mix() const { return (2 + hc) * hc; }
    int nope_dim() const { return head_dim - rope_dim; }

    // Read from a GGUF file's metadata (tensor shapes are checked later by the weight loader).
    static Result<ModelConfig> from_gguf(const GgufFile& f);
    // One line per field, for `dsv4 inspect`.
    std::string describe() const;
};

}  // namespace dsv4
