// The byte-level BPE vocabulary as stored in a GGUF (`tokenizer.ggml.*`): token texts and types, the merge
// table keyed by token-id pairs, the byte tokens, each token's decoded bytes, and the special ids. Everything
// is read from the file; no token or id is hard-coded, because models sharing a pre-tokenizer (DeepSeek-V3
// and -V4) differ in their special tokens.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class GgufFile;

// llama.cpp's token types (`tokenizer.ggml.token_type`).
enum class TokenType : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

// GPT-2's reversible byte <-> code point map: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100.. in byte order, so that every token text is printable. byte_level_byte returns -1 for a code
// point no byte maps to.
uint32_t byte_level_codepoint(uint8_t b);
int byte_level_byte(uint32_t cp);

// The plain inputs of a vocabulary; tests build small ones directly.
struct VocabData {
    std::vector<std::string> tokens;   // as stored: byte-level text for normal tokens, raw text for others
    std::vector<int32_t> types;        // TokenType values, one per token
    std::vector<std::string> merges;   // "left right", in rank order
    std::string pre = "deepseek-v3";   // pre-tokenizer name
    int32_t bos = -1, eos = -1, pad = -1;  // -1: absent
    bool add_bos = false;
};

// Move-only: it holds a few MB and nothing needs a copy.
class Vocab {
public:
    Vocab(Vocab&&) = default;
    Vocab& operator=(Vocab&&) = default;
    Vocab(const Vocab&) = delete;
    Vocab& operator=(const Vocab&) = delete;

    // Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/padding_token_id, add_bos_token}.
    // Requires model "gpt2". When add_bos_token is absent it is true iff a BOS id is given.
    static Result<Vocab> from_gguf(const GgufFile& file);
    static Result<Vocab> from_data(const VocabData& data);

    struct Merge {
        int32_t rank;
        int32_t id;  // the merged token
    };

    int64_t size() const { return static_cast<int64_t>(types_.size()); }
    bool valid(int64_t id) const { return id >= 0 && id < size(); }
    TokenType type(int32_t id) const { return types_[id]; }
    // The token's text as stored in the file.
    std::string_view text(int32_t id) const { return texts_.get(id); }
    // The bytes the token stands for: the byte-level inverse of a normal token's text; the raw text of a
    // control, user-defined, unused or unknown token; the byte of a `<0xHH>` byte token.
    std::string_view bytes(int32_t id) const { return bytes_.get(id); }
    // Token id by stored text.
    std::optional<int32_t> find(std::string_view text) const;
    // The token holding the single byte b (its byte-level text).
    int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }
    // The merge of an adjacent pair, or nullptr.
    const Merge* find_merge(int32_t left, int32_t right) const;
    int64_t n_merges() const { return n_merges_; }

    // Control and user-defined tokens: the ones recognized whole in text before pre-tokenization.
    const std::vector<int32_t>& special_ids() const { return special_ids_; }

    const std::string& pre() const { return pre_; }
    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    int32_t pad() const { return pad_; }
    bool add_bos() const { return add_bos_; }

private:
    Vocab() = default;
    static Result<Vocab> load(const GgufFile& file);
    static Result<Vocab> build(const std::vector<std::string_view>& tokens, const std::vector<int32_t>& types,
                               const std::vector<std::string_view>& merges, const std::string& pre, int32_t bos,
                               int32_t eos, int32_t pad, bool add_bos);
    Status build_merges(const std::vector<std::string_view>& merges);

    // Many short strings in one buffer (a vector, whose storage survives a move) with offsets.
    struct StringTable {
        std::vector<char> arena;
        std::vector<uint32_t> off{0};
        void add(std::string_view s) {
            arena.insert(arena.end(), s.begin(), s.end());
            off.push_back(static_cast<uint32_t>(arena.size()));
        }
        std::string_view get(int32_t i) const { return {arena.data() + off[i], off[i + 1] - off[i]}; }
    };
    StringTable texts_, bytes_;
    std::vector<TokenType> types_;
    // Open-addressing index from text to id: each slot holds a hash tag and an id (-1: empty), so a lookup
    // costs one slot probe and one text compare instead of a node chase.
    struct TextSlot {
        uint32_t tag = 0;
        int32_t id = -1;
    };
    std::vector<TextSlot> text_index_;
    uint64_t text_mask_ = 0;
    std::array<int32_t, 256> byte_tokens_{};
    // Open-addressing hash table of merges keyed by (left << 32 | right); empty slots have rank -1.
    struct MergeSlot {
        uint64_t key = 0;
        Merge merge{-1, -1};
    };
    std::vector<MergeSlot> merge_table_;
    uint64_t merge_mask_ = 0;
    int64_t n_merges_ = 0;
    std::vector<int32_t> special_ids_;
    std::string pre_;
    int32_t bos_ = -1, eos_ = -1, pad_ = -1;
    bool add_bos_ = false;
};

}  // namespace dsv4
