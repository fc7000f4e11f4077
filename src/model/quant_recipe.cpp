#include "model/quant_recipe.h"

#include "format/quant.h"

namespace dsv4 {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_expert_gate_up(const std::string& n) {
    return ends_with(n, ".ffn_gate_exps.weight") || ends_with(n, ".ffn_up_exps.weight");
}
bool is_expert_down(const std::string& n) { return ends_with(n, ".ffn_down_exps.weight"); }

// Kept as stored whatever the selection (unless an override names them): vectors, integer tensors, the
// hyper-connection mixers, compressor position tables and the router.
bool is_protected(const GgufTensor& t) {
    if (t.n_dims < 2 || !ggml_traits(t.type).is_float_weight) return true;
    const std::string& n = t.name;
    return n.find("hc_") != std::string::npos || ends_with(n, "_ape.weight") || ends_with(n, ".ffn_gate_inp.weight");
}

}  // namespace

const char* tensor_role(const std::string& n) {
    if (is_expert_gate_up(n)) return "expert gate/up";
    if (is_expert_down(n)) return "expert down";
    if (n.find("_shexp.") != std::string::npos) return "shared expert";
    if (n.find("hc_") != std::string::npos) return "hyper-connection";
    if (n.find("compressor") != std::string::npos) return "compressor";
    if (n.find("indexer") != std::string::npos) return "indexer";
    if (n.find("ffn_gate_inp") != std::string::npos || n.find("tid2eid") != std::string::npos ||
        n.find("exp_probs_b") != std::string::npos)
        return "router";
    if (n == "token_embd.weight") return "embedding";
    if (n == "output.weight") return "output";
    if (n.find("norm") == std::string::npos && (n.find(".attn_") != std::string::npos || n.find("nextn.") != std::string::npos) &&
        n.find("attn_sinks") == std::string::npos)
        return "attention";
    return "norm/other";
}

const std::vector<QuantRecipe>& quant_recipes() {
    static const std::vector<QuantRecipe> kRecipes = {
        {"iq2_xxs-mix", "2-bit mix (~81 GiB for V4-Flash): IQ2_XXS expert gate/up, Q2_K expert down, Q8_0 dense",
         GgmlType::IQ2_XXS, GgmlType::Q2_K, GgmlType::Q8_0},
        {"q2_k-mix", "Q2_K expert gate/up, Q3_K expert down, Q8_0 dense (~100 GiB for V4-Flash)", GgmlType::Q2_K,
         GgmlType::Q3_K, GgmlType::Q8_0},
        {"q4_k-experts", "Q4_K experts, Q8_0 dense (~153 GiB for V4-Flash)", GgmlType::Q4_K, GgmlType::Q4_K,
         GgmlType::Q8_0},
        {"mxfp4-moe", "MXFP4 experts, Q8_0 dense (llama.cpp's MXFP4_MOE)", GgmlType::MXFP4, GgmlType::MXFP4,
         GgmlType::Q8_0},
        {"q8_0", "Q8_0 everywhere", GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0},
    };
    return kRecipes;
}

Result<QuantRecipe> find_quant_recipe(const std::string& name) {
    std::string known;
    for (const QuantRecipe& r : quant_recipes()) {
        if (r.name == name) return r;
        known += (known.empty() ? "" : ", ") + r.name;
    }
    return make_error("unknown recipe '" + name + "' (known: " + known + ")");
}

Result<QuantOverride> parse_quant_override(const std::string& spec) {
    const size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        return make_error("--tensor-type '" + spec + "' is not REGEX=TYPE");
    QuantOverride o;
    o.pattern = spec.substr(0, eq);
    const std::string type_name = spec.substr(eq + 1);
    auto t = ggml_type_from_name(type_name);
    if (!t) return make_error("--tensor-type '" + spec + "': unknown ggml type '" + type_name + "'");
    if (!has_quantizer(*t)) return make_error("--tensor-type '" + spec + "': no quantizer for " + type_name);
    o.type = *t;
    try {
        o.re = std::regex(o.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
        return make_error("--tensor-type '" + spec + "': bad regex: " + e.what());
    }
    return o;
}

GgmlType select_quant_type(const GgufTensor& t, const QuantSelection& sel, std::string* note) {
    std::optional<GgmlType> want;
    bool forced = false;
    for (const QuantOverride& o : sel.overrides) {
        if (std::regex_search(t.name, o.re)) {
            want = o.type;
            forced = true;
            break;
        }
    }
    if (!want) {
        if (is_protected(t)) return t.type;
        if (sel.recipe) {
            want = is_expert_gate_up(t.name) ? sel.recipe->expert_gate_up
                 : is_expert_down(t.name)    ? sel.recipe->expert_down
                                             : sel.recipe->dense;
        } else if (sel.base) {
            want = *sel.base;
        } else {
            return t.type;
        }
    }
    if (!forced && !ggml_traits(t.type).is_float_weight) return t.type;
    const int64_t block = ggml_traits(*want).block_elems;
    if (t.ne[0] % block == 0) return *want;
    const GgmlType fallback = t.ne[0] % 32 == 0 ? GgmlType::Q8_0 : t.type;
    if (note)
        *note = t.name + ": rows of " + std::to_string(t.ne[0]) + " values are not whole " + std::to_string(block) +
                "-value " + std::string(ggml_type_name(*want)) + " blocks; " + std::string(ggml_type_name(fallback)) +
                " instead";
    return fallback;
}

}  // namespace dsv4
