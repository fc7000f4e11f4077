// tokenizer.json -> tokenizer.ggml.* (tokenizer/hf_tokenizer.h) on the real DeepSeek-V3 tokenizer: the keys
// must equal those of vocab.gguf (llama.cpp's converter's output for the same tokenizer) value for value, the
// tokenizer built from them must encode every case of cases.jsonl as vocab.gguf's does (and as HF does), and
// tokenizers this engine cannot run are refused with an error naming the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

const std::string kDir = std::string(DSV4_SHARED_DIR) + "/fixtures/tokenizer/deepseek_v3";

// The converted keys as a header-only GGUF (converted once: the tokenizer.json is 8 MB).
const GgufFile* converted() {
    static const std::unique_ptr<GgufFile> file = [] {
        GgufWriter w;
        w.set_str("general.architecture", "deepseek4");
        Status st = hf_tokenizer_to_gguf(kDir + "/tokenizer.json", kDir + "/tokenizer_config.json", 129280, w);
        EXPECT_TRUE(st.ok()) << st.error();
        auto head = w.header();
        EXPECT_TRUE(head.ok());
        auto f = GgufFile::parse_header(std::move(*head), "converted.gguf");
        EXPECT_TRUE(f.ok()) << f.error();
        return f.ok() ? std::move(*f) : std::unique_ptr<GgufFile>();
    }();
    return file.get();
}

}  // namespace

TEST(HfTokenizer, KeysMatchLlamaCppsConverter) {
    const GgufFile* got = converted();
    auto want = GgufFile::open(kDir + "/vocab.gguf");
    ASSERT_TRUE(got && want.ok());
    for (const auto& [key, value] : (*want)->metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        const GgufValue* v = got->find(key);
        ASSERT_NE(v, nullptr) << key;
        EXPECT_EQ(gguf_value_type_str(*v), gguf_value_type_str(value)) << key;
        if (value.type == GgufValueType::ARRAY && value.elem_type == GgufValueType::STRING) {
            ASSERT_EQ(v->strs.size(), value.strs.size()) << key;
            for (size_t i = 0; i < value.strs.size(); ++i) ASSERT_EQ(v->strs[i], value.strs[i]) << key << "[" << i << "]";
        } else if (value.type == GgufValueType::ARRAY) {
            ASSERT_EQ(v->n_elems, value.n_elems) << key;
            EXPECT_EQ(std::memcmp(v->elems, value.elems, value.n_elems * 4), 0) << key;
        } else {
            EXPECT_EQ(gguf_value_str(*v), gguf_value_str(value)) << key;
        }
    }
    // The chat template comes from tokenizer_config.json.
    std::ifstream in(kDir + "/tokenizer_config.json");
    const auto cfg = nlohmann::json::parse(in);
    auto tmpl = got->get_str("tokenizer.chat_template");
    ASSERT_TRUE(tmpl.ok());
    EXPECT_EQ(*tmpl, cfg["chat_template"].get<std::string>());
}

TEST(HfTokenizer, EncodesEveryCaseLikeVocabGguf) {
    const GgufFile* got = converted();
    auto want_file = GgufFile::open(kDir + "/vocab.gguf");
    ASSERT_TRUE(got && want_file.ok());
    auto tok = Tokenizer::from_gguf(*got);
    auto ref = Tokenizer::from_gguf(**want_file);
    ASSERT_TRUE(tok.ok() && ref.ok());
    EXPECT_EQ((*tok)->n_vocab(), 129280);
    EXPECT_EQ((*tok)->bos(), (*ref)->bos());
    EXPECT_EQ((*tok)->eos(), (*ref)->eos());
    std::ifstream in(kDir + "/cases.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto c = nlohmann::json::parse(line);
        const std::string text = c["text"];
        const std::vector<int32_t> ids = c["ids"];
        EXPECT_EQ((*tok)->encode(text, true), ids) << text;
        EXPECT_EQ((*tok)->encode(text, true), (*ref)->encode(text, true)) << text;
        EXPECT_EQ((*tok)->encode(text, false), (*ref)->encode(text, false)) << text;
        ++n;
    }
    EXPECT_GE(n, 40);
}

TEST(HfTokenizer, RefusesWhatItCannotRun) {
    const fs::path dir = fs::temp_directory_path() / ("dsv4_hftok_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // A three-token tokenizer with DeepSeek-V3's pre-tokenizer and normalizer, so each edit is quick.
    nlohmann::json base;
    {
        std::ifstream in(kDir + "/tokenizer.json");
        const nlohmann::json real = nlohmann::json::parse(in);
        base["normalizer"] = real["normalizer"];
        base["pre_tokenizer"] = real["pre_tokenizer"];
        base["model"] = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}};
        base["added_tokens"] = nlohmann::json::array();
    }
    auto convert = [&](const nlohmann::json& j) {
        const std::string path = (dir / "tokenizer.json").string();
        std::ofstream(path, std::ios::trunc) << j.dump();
        GgufWriter w;
        return hf_tokenizer_to_gguf(path, "", 16, w);
    };
    Status ok = convert(base);
    EXPECT_TRUE(ok.ok()) << ok.error();
    auto expect_refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
        nlohmann::json j = base;
        edit(j);
        Status st = convert(j);
        ASSERT_FALSE(st.ok()) << needle;
        EXPECT_NE(st.error().find("tokenizer.json"), std::string::npos) << st.error();
        EXPECT_NE(st.error().find(needle), std::string::npos) << st.error();
    };
    expect_refused([](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, "BPE");
    expect_refused([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; },
                   "split patterns");
    expect_refused([](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer");
    expect_refused([](nlohmann::json& j) { j["added_tokens"] = {{{"id", 40}, {"content", "<x>"}, {"special", true}}}; },
                   "vocab_size");
    expect_refused([](nlohmann::json& j) { j["model"]["merges"] = {7}; }, "merge");
    GgufWriter w;
    EXPECT_FALSE(hf_tokenizer_to_gguf((dir / "none.json").string(), "", 0, w).ok());
    fs::remove_all(dir);
}
