// tokenizer.json -> tokenizer.ggml.* keys. Only what the engine's tokenizer can run is accepted: a BPE model
// without byte fallback behind DeepSeek-V3's split patterns and a byte-level step; anything else is an error
// naming the file and the field, so a converted file never carries a tokenizer that encodes differently.
#include "tokenizer/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include "format/gguf_writer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace dsv4 {

namespace {

// Plain (sorted) objects: an ordered_json object checks every insert against all keys, quadratic in a
// 128k-entry vocabulary; ids, not key order, place the tokens.
using json = nlohmann::json;

// 'text' in single quotes (appended: GCC 12 reports a false -Wrestrict for "'" + std::string temporaries).
std::string in_quotes(std::string_view text) { return std::string("'").append(text).append("'"); }

Result<json> read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("cannot open " + in_quotes(path));
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return make_error(in_quotes(path) + " is not a JSON object");
    return j;
}

// The Split regexes of the pre-tokenizer, in order, and whether a ByteLevel step (without its own regex)
// follows them.
Result<std::vector<std::string>> split_patterns(const json& pre, const std::string& path) {
    std::vector<std::string> out;
    bool byte_level = false;
    const json* steps = &pre;
    json single = json::array();
    if (pre.is_object() && pre.value("type", "") == "Sequence") steps = &pre["pretokenizers"];
    else { single.push_back(pre); steps = &single; }
    for (const json& s : *steps) {
        const std::string type = s.is_object() ? s.value("type", "") : "";
        if (type == "Split" && s.contains("pattern") && s["pattern"].is_object() && s["pattern"].contains("Regex") &&
            s["pattern"]["Regex"].is_string() &&
            s.value("behavior", "") == "Isolated" && !s.value("invert", false)) {
            out.push_back(s["pattern"]["Regex"].get<std::string>());
        } else if (type == "ByteLevel" && !s.value("use_regex", true) && !s.value("add_prefix_space", false)) {
            byte_level = true;
        } else {
            return make_error(in_quotes(path) + ": pre_tokenizer step " + s.dump().substr(0, 120) +
                              " is not one this engine runs");
        }
    }
    if (!byte_level) return make_error(in_quotes(path) + ": pre_tokenizer has no byte-level step");
    return out;
}

// The content of a special-token entry of tokenizer_config.json: a string or {"content": ...}.
std::string token_content(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
}

}  // namespace

Status hf_tokenizer_to_gguf(const std::string& path, const std::string& config_path, int vocab_size, GgufWriter& w) {
    DSV4_ASSIGN_OR_RETURN(json tj, read_json(path));
    const json& model = tj["model"];
    if (!model.is_object() || model.value("type", "") != "BPE")
        return make_error(in_quotes(path) + ": model.type is not BPE (only byte-level BPE tokenizers convert)");
    if (model.value("byte_fallback", false)) return make_error(in_quotes(path) + ": model.byte_fallback is set");
    if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") || !model["merges"].is_array())
        return make_error(in_quotes(path) + ": model has no vocab object or merges list");
    if (tj.contains("normalizer") && !tj["normalizer"].is_null()) {
        const json& n = tj["normalizer"];
        if (!(n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() &&
              n["normalizers"].empty()))
            return make_error(in_quotes(path) + ": normalizer " + n.dump().substr(0, 120) + " is not one this engine runs");
    }
    DSV4_ASSIGN_OR_RETURN(std::vector<std::string> patterns, split_patterns(tj["pre_tokenizer"], path));
    std::string pre_name;
    for (const char* name : {"deepseek-v3"})
        if (PreTokenizer::patterns(name) == patterns) pre_name = name;
    if (pre_name.empty()) return make_error(in_quotes(path) + ": the pre-tokenizer's split patterns are not DeepSeek-V3's");

    // id -> (text, type)
    std::map<int64_t, std::pair<std::string, TokenType>> by_id;
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
            return make_error(in_quotes(path) + ": vocab entry '" + it.key() + "' has no valid id");
        by_id[it.value().get<int64_t>()] = {it.key(), TokenType::normal};
    }
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
        for (const json& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
                !a.contains("content") || !a["content"].is_string())
                return make_error(in_quotes(path) + ": added_tokens entry " + a.dump().substr(0, 120) + " has no id or content");
            by_id[a["id"].get<int64_t>()] = {a["content"].get<std::string>(),
                                             a.value("special", false) ? TokenType::control : TokenType::user_defined};
        }
    }
    if (by_id.empty()) return make_error(in_quotes(path) + ": the vocabulary is empty");
    const int64_t n_tok = by_id.rbegin()->first + 1;
    if (vocab_size > 0 && n_tok > vocab_size)
        return make_error(in_quotes(path) + ": token id " + std::to_string(n_tok - 1) + " is beyond the model's vocab_size " +
                          std::to_string(vocab_size));
    const int64_t n = vocab_size > 0 ? vocab_size : n_tok;
    std::vector<std::string> tokens((size_t)n);
    std::vector<int32_t> types((size_t)n);
    std::map<std::string, int32_t> id_of;
    for (int64_t i = 0; i < n; ++i) {
        auto it = by_id.find(i);
        if (it == by_id.end()) {
            tokens[(size_t)i] = "[PAD" + std::to_string(i) + "]";
            types[(size_t)i] = (int32_t)TokenType::unused;
        } else {
            tokens[(size_t)i] = it->second.first;
            types[(size_t)i] = (int32_t)it->second.second;
            id_of.emplace(it->second.first, (int32_t)i);
        }
    }
    std::vector<std::string> merges;
    merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
        if (m.is_string()) merges.push_back(m.get<std::string>());
        else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
            merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        else return make_error(in_quotes(path) + ": merge " + m.dump().substr(0, 80) + " is not a pair");
    }

    json cfg = json::object();
    if (!config_path.empty()) {
        DSV4_ASSIGN_OR_RETURN(cfg, read_json(config_path));
    }
    auto special_id = [&](const char* key, const char* fallback) -> int32_t {
        std::string content = cfg.contains(key) ? token_content(cfg[key]) : std::string();
        if (content.empty() && fallback) content = fallback;
        auto it = id_of.find(content);
        return it == id_of.end() ? -1 : it->second;
    };
    const int32_t bos = special_id("bos_token", "<｜begin▁of▁sentence｜>");
    const int32_t eos = special_id("eos_token", "<｜end▁of▁sentence｜>");
    const int32_t pad = special_id("pad_token", nullptr);

    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set_str("tokenizer.ggml.pre", pre_name);
    w.set_arr_str("tokenizer.ggml.tokens", tokens);
    w.set_arr_i32("tokenizer.ggml.token_type", types);
    w.set_arr_str("tokenizer.ggml.merges", merges);
    if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", (uint32_t)pad);
    auto flag = [&](const char* key, bool def) {
        return cfg.contains(key) && cfg[key].is_boolean() ? cfg[key].get<bool>() : def;
    };
    w.set_bool("tokenizer.ggml.add_bos_token", flag("add_bos_token", bos >= 0));
    w.set_bool("tokenizer.ggml.add_eos_token", flag("add_eos_token", false));
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
        w.set_str("tokenizer.chat_template", cfg["chat_template"].get<std::string>());
    return {};
}

}  // namespace dsv4
