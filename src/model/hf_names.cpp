// Official DeepSeek-V4 module names -> llama.cpp deepseek4 tensor names (../shared/spec/gguf_deepseek4.md
// §3.3 and its MTP section). One table per scope; everything not in a table is rejected by name.
#include <cstdlib>
#include <string_view>

#include "model/hf_convert.h"

namespace dsv4 {

namespace {

struct NamePair {
    std::string_view official, gguf;
};

// Inside `layers.N.` and `mtp.J.`.
constexpr NamePair kBlock[] = {
    {"hc_attn_fn", "hc_attn_fn.weight"},
    {"hc_ffn_fn", "hc_ffn_fn.weight"},
    {"hc_attn_base", "hc_attn_base.weight"},
    {"hc_ffn_base", "hc_ffn_base.weight"},
    {"hc_attn_scale", "hc_attn_scale.weight"},
    {"hc_ffn_scale", "hc_ffn_scale.weight"},
    {"attn.attn_sink", "attn_sinks.weight"},
    {"attn.wq_a.weight", "attn_q_a.weight"},
    {"attn.q_norm.weight", "attn_q_a_norm.weight"},
    {"attn.wq_b.weight", "attn_q_b.weight"},
    {"attn.wkv.weight", "attn_kv.weight"},
    {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.wo_a.weight", "attn_output_a.weight"},
    {"attn.wo_b.weight", "attn_output_b.weight"},
    {"attn.compressor.ape", "attn_compressor_ape.weight"},
    {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
    {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
    {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
    {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
    {"attn.indexer.compressor.ape", "indexer_compressor_ape.weight"},
    {"attn.indexer.compressor.wkv.weight", "indexer_compressor_kv.weight"},
    {"attn.indexer.compressor.wgate.weight", "indexer_compressor_gate.weight"},
    {"attn.indexer.compressor.norm.weight", "indexer_compressor_norm.weight"},
    {"ffn.gate.weight", "ffn_gate_inp.weight"},
    {"ffn.gate.tid2eid", "ffn_gate_tid2eid.weight"},
    {"ffn.gate.bias", "exp_probs_b.bias"},
    {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
    {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
    {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
    {"attn_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
};

// Only inside `mtp.J.`: the MTP input projections, its norms and its own HC head.
constexpr NamePair kMtp[] = {
    {"hc_head_fn", "nextn.hc_head_fn.weight"},
    {"hc_head_base", "nextn.hc_head_base.weight"},
    {"hc_head_scale", "nextn.hc_head_scale.weight"},
    {"e_proj.weight", "nextn.e_proj.weight"},
    {"h_proj.weight", "nextn.h_proj.weight"},
    {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},
    {"norm.weight", "nextn.shared_head_norm.weight"},
};

constexpr NamePair kGlobal[] = {
    {"embed.weight", "token_embd.weight"},
    {"head.weight", "output.weight"},
    {"norm.weight", "output_norm.weight"},
    {"hc_head_fn", "output_hc_fn.weight"},
    {"hc_head_base", "output_hc_base.weight"},
    {"hc_head_scale", "output_hc_scale.weight"},
};

// Routed experts: ffn.experts.E.wK.weight.
constexpr NamePair kExperts[] = {
    {"w1.weight", "ffn_gate_exps.weight"},
    {"w2.weight", "ffn_down_exps.weight"},
    {"w3.weight", "ffn_up_exps.weight"},
};

template <size_t N>
const NamePair* lookup(const NamePair (&table)[N], std::string_view name) {
    for (const NamePair& p : table)
        if (p.official == name) return &p;
    return nullptr;
}

// Parse a decimal index at the start of `s` followed by '.', advancing `s` past it.
bool take_index(std::string_view& s, int& out) {
    size_t i = 0;
    long v = 0;
    while (i < s.size() && i < 9 && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
    if (i == 0 || i >= s.size() || s[i] != '.') return false;
    out = (int)v;
    s.remove_prefix(i + 1);
    return true;
}

}  // namespace

Result<MappedName> map_official_name(const std::string& name, const HfModelDims& dims) {
    MappedName m;
    std::string_view s = name;
    // `X.scale` is the E8M0 scale of weight `X.weight`.
    if (s.size() > 6 && s.substr(s.size() - 6) == ".scale") {
        m.is_scale = true;
        s.remove_suffix(6);
    }
    const std::string weight = m.is_scale ? std::string(s) + ".weight" : std::string(s);
    std::string_view w = weight;
    auto unknown = [&]() { return make_error("tensor '" + name + "' has no deepseek4 name (unknown tensor)"); };

    std::string prefix;
    if (w.substr(0, 7) == "layers.") {
        w.remove_prefix(7);
        if (!take_index(w, m.block) || m.block >= dims.n_layer) return unknown();
    } else if (w.substr(0, 4) == "mtp.") {
        w.remove_prefix(4);
        int j = 0;
        if (!take_index(w, j) || j >= dims.n_mtp) return unknown();
        m.block = dims.n_layer + j;
        m.mtp = true;
    } else {
        const NamePair* g = lookup(kGlobal, w);
        if (!g) return unknown();
        m.gguf = std::string(g->gguf);
        return m;
    }
    prefix = "blk." + std::to_string(m.block) + ".";
    if (w.substr(0, 12) == "ffn.experts.") {
        w.remove_prefix(12);
        if (!take_index(w, m.expert) || m.expert >= dims.n_expert) return unknown();
        const NamePair* e = lookup(kExperts, w);
        if (!e) return unknown();
        m.gguf = prefix + std::string(e->gguf);
        return m;
    }
    const NamePair* b = lookup(kBlock, w);
    if (!b && m.mtp) b = lookup(kMtp, w);
    if (!b) return unknown();
    m.gguf = prefix + std::string(b->gguf);
    return m;
}

}  // namespace dsv4
