// The tokenizer: text <-> token ids for byte-level BPE models read from a GGUF.
//
// Encoding runs in four steps, like HF tokenizers with DeepSeek-V3's tokenizer.json:
//  1. (parse_special only) control and user-defined tokens written in the text are cut out as whole tokens:
//     at each position the leftmost match wins and, among matches there, the longest; nothing is stripped
//     around them (every added token of DeepSeek-V3 has lstrip = rstrip = false, and the normalizer is empty).
//     Without parse_special every one of them is plain text. (HF always matches its non-special added
//     tokens, e.g. <｜User｜>; here parse_special=false matches none, so text from a user can never turn into
//     a role marker. Rendered prompts are encoded with parse_special=true and get HF's ids.)
//  2. the pre-tokenizer splits the rest into words (pretokenizer.h; invalid UTF-8 is documented there);
//  3. each word becomes byte tokens, merged by rank (bpe.h), with a bounded cache of recent words;
//  4. no BOS or EOS is added: callers prepend bos() when add_bos() says so.
// Decoding concatenates each token's bytes (Vocab::bytes): the exact bytes that were encoded, and the text
// of control tokens. Decoded output may end inside a UTF-8 character; Utf8Streamer (utf8.h) handles
// streaming. All methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace dsv4 {

class GgufFile;

class Tokenizer {
public:
    static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
    static Result<std::unique_ptr<Tokenizer>> from_vocab(Vocab vocab);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
    // Same, appending to `out`.
    void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

    // Ids must be valid (see check_ids for ids from outside the process).
    std::string decode(std::span<const int32_t> ids) const;
    // An error naming the first id outside [0, n_vocab) and its index, if any.
    Status check_ids(std::span<const int32_t> ids) const;
    // The raw bytes of one token, for streaming (may be part of a UTF-8 character).
    std::string_view token_text(int32_t id) const { return vocab_.bytes(id); }

    int64_t n_vocab() const { return vocab_.size(); }
    int32_t bos() const { return vocab_.bos(); }
    int32_t eos() const { return vocab_.eos(); }
    int32_t pad() const { return vocab_.pad(); }
    bool add_bos() const { return vocab_.add_bos(); }
    TokenType token_type(int32_t id) const { return vocab_.type(id); }
    bool is_control(int32_t id) const { return vocab_.valid(id) && vocab_.type(id) == TokenType::control; }
    // Control or user-defined: a token recognized whole in text.
    bool is_special(int32_t id) const {
        return vocab_.valid(id) &&
               (vocab_.type(id) == TokenType::control || vocab_.type(id) == TokenType::user_defined);
    }
    // The control or user-defined token whose text is exactly `text`.
    std::optional<int32_t> find_special(std::string_view text) const;

    const Vocab& vocab() const { return vocab_; }
    const PreTokenizer& pretokenizer() const { return *pre_; }
    // Empty the word cache (benchmarks measure the cold path with it).
    void clear_cache() const { cache_.clear(); }

private:
    // Byte trie of the special tokens' texts: finds the longest one starting at a position.
    struct SpecialTrie {
        struct Node {
            int32_t token = -1;
            uint32_t first_edge = 0, n_edges = 0;
        };
        struct Edge {
            uint8_t byte;
            uint32_t child;
        };
        std::vector<Node> nodes;
        std::vector<Edge> edges;
        bool starts[256] = {};  // bytes some special token starts with
        struct Match {
            size_t len;
            int32_t token;
        };
        Match longest_at(std::string_view text, size_t pos) const;
    };

    Tokenizer(Vocab vocab, std::unique_ptr<PreTokenizer> pre);
    void build_trie();
    void encode_plain(std::string_view text, std::vector<std::string_view>& words, std::vector<int32_t>& out) const;

    Vocab vocab_;
    std::unique_ptr<PreTokenizer> pre_;
    SpecialTrie trie_;
    BpeCache cache_;
};

}  // namespace dsv4
