// MTP sidecar discovery and checks (mtp_sidecar.h). The weights themselves are bound by model/weights.cpp
// (load_mtp_weights) with the same names and shape checks as an MTP block inside the main file.
#include "model/mtp_sidecar.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "format/gguf.h"

namespace dsv4 {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
    for (char& ch : s) ch = (char)std::tolower((unsigned char)ch);
    return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "model-00002-of-00003.gguf" style: the part number when the name has a split suffix, else 0.
int split_part(const std::string& name) {
    const size_t of = name.rfind("-of-");
    if (of == std::string::npos || of < 6) return 0;
    const std::string num = name.substr(of - 5, 5);
    if (name[of - 6] != '-' || !std::all_of(num.begin(), num.end(), ::isdigit)) return 0;
    return std::atoi(num.c_str());
}

// The file name without ".gguf" and without a "-0000k-of-0000n" suffix.
std::string stem_of(const std::string& name) {
    std::string s = name;
    if (ends_with(lower(s), ".gguf")) s.resize(s.size() - 5);
    const size_t of = s.rfind("-of-");
    if (split_part(name) > 0 && of != std::string::npos) s.resize(of - 6);
    return s;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::vector<std::string> mtp_sidecar_candidates(const std::string& main_path) {
    std::error_code ec;
    const fs::path main = fs::absolute(main_path, ec);
    const fs::path dir = main.parent_path();
    std::vector<std::string> all;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        const std::string name = it->path().filename().string();
        const std::string low = lower(name);
        if (!ends_with(low, ".gguf") || low.find("mtp") == std::string::npos) continue;
        if (split_part(name) > 1) continue;
        if (fs::equivalent(it->path(), main, ec)) continue;
        all.push_back(it->path().string());
    }
    std::sort(all.begin(), all.end());
    if (all.size() <= 1) return all;
    const std::string stem = stem_of(main.filename().string());
    std::vector<std::string> same_stem;
    for (const std::string& p : all)
        if (!stem.empty() && fs::path(p).filename().string().rfind(stem, 0) == 0) same_stem.push_back(p);
    return same_stem.empty() ? all : same_stem;
}

int mtp_block_index(const GgufFile& f) {
    int best = -1;
    for (const GgufTensor& t : f.tensors()) {
        if (t.name.rfind("blk.", 0) != 0) continue;
        const size_t dot = t.name.find('.', 4);
        if (dot == std::string::npos || t.name.compare(dot, 7, ".nextn.") != 0) continue;
        const std::string num = t.name.substr(4, dot - 4);
        if (num.empty() || num.size() > 6 || !std::all_of(num.begin(), num.end(), ::isdigit)) continue;
        const int il = std::atoi(num.c_str());
        if (best < 0 || il < best) best = il;
    }
    return best;
}

std::string dflash_refusal(const GgufFile& f) {
    auto arch = f.get_str("general.architecture");
    if (!arch.ok() || *arch != "dflash") return {};
    return quoted(f.path()) +
           " is a DSpark draft head (general.architecture 'dflash'): a separate draft model for speculative "
           "decoding shipped with the DeepSeek-V4 0731 checkpoint, not an MTP block. dsv4 does not support "
           "DSpark drafts yet";
}

Result<ModelConfig> mtp_sidecar_config(const GgufFile& side, const ModelConfig& main) {
    const std::string name = quoted(side.path());
    if (std::string r = dflash_refusal(side); !r.empty()) return make_error(r);
    auto parsed = ModelConfig::from_gguf(side);
    if (!parsed.ok()) return make_error("MTP file " + name + ": " + parsed.error());
    ModelConfig c = std::move(*parsed);

    // Every hyperparameter the MTP block's tensors or its math depend on must be the main model's.
    struct Field {
        const char* key;
        double main, side;
    };
    const Field fields[] = {
        {"embedding_length", (double)main.n_embd, (double)c.n_embd},
        {"attention.head_count", (double)main.n_head, (double)c.n_head},
        {"attention.key_length", (double)main.head_dim, (double)c.head_dim},
        {"rope.dimension_count", (double)main.rope_dim, (double)c.rope_dim},
        {"attention.q_lora_rank", (double)main.q_lora_rank, (double)c.q_lora_rank},
        {"attention.output_lora_rank", (double)main.o_lora_rank, (double)c.o_lora_rank},
        {"attention.output_group_count", (double)main.o_groups, (double)c.o_groups},
        {"attention.sliding_window", (double)main.window, (double)c.window},
        {"attention.layer_norm_rms_epsilon", main.norm_eps, c.norm_eps},
        {"rope.freq_base", main.rope_freq_base, c.rope_freq_base},
        {"expert_count", (double)main.n_expert, (double)c.n_expert},
        {"expert_used_count", (double)main.n_expert_used, (double)c.n_expert_used},
        {"expert_feed_forward_length", (double)main.n_ff_exp, (double)c.n_ff_exp},
        {"expert_weights_scale", main.expert_weights_scale, c.expert_weights_scale},
        {"expert_weights_norm", (double)main.expert_weights_norm, (double)c.expert_weights_norm},
        {"hyper_connection.count", (double)main.hc, (double)c.hc},
        {"hyper_connection.sinkhorn_iterations", (double)main.hc_sinkhorn_iters, (double)c.hc_sinkhorn_iters},
        {"hyper_connection.epsilon", main.hc_eps, c.hc_eps},
        {"vocab_size", (double)main.n_vocab, c.n_vocab ? (double)c.n_vocab : (double)main.n_vocab},
    };
    for (const Field& f : fields) {
        if (f.main == f.side) continue;
        std::ostringstream o;
        o << "MTP file " << name << " does not match the main model: key 'deepseek4." << f.key << "' is "
          << f.side << ", the main model's is " << f.main;
        return make_error(o.str());
    }

    const int il = mtp_block_index(side);
    if (il < 0) return make_error("MTP file " + name + " holds no MTP block (no tensor named blk.N.nextn.*)");
    if (il != main.n_layer)
        return make_error("MTP file " + name + " holds its MTP block as blk." + std::to_string(il) +
                          ", so it belongs to a model of " + std::to_string(il) + " layers; the main model has " +
                          std::to_string(main.n_layer) + " (key 'deepseek4.block_count')");
    c.n_layer = il;
    c.n_vocab = main.n_vocab;
    return c;
}

}  // namespace dsv4
