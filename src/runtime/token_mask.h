// Token masks from a byte grammar: which tokens of the vocabulary may come next. A token is allowed when the
// grammar accepts all of its bytes from the current state; the vocabulary is a byte trie laid out in
// preorder, so the walk advances the grammar once per trie node (shared prefixes once) and skips a whole
// subtree as soon as its prefix is rejected. Masks are cached per grammar state (a state is a few frames:
// inside a long string or between the keys of an object the same state recurs at every step), so a step
// usually costs one hash lookup and a copy of the mask.
//
// Special tokens (control and user-defined) are never part of the byte grammar; the matcher allows its
// end tokens (EOS, end of turn) exactly in accepting states, and nothing else once the value is complete.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "runtime/grammar.h"

namespace dsv4 {

class Tokenizer;

// The vocabulary's token bytes in a preorder byte trie.
class TokenTrie {
public:
    // token_bytes[id]: the token's bytes; empty for a token the grammar never allows (special tokens).
    explicit TokenTrie(const std::vector<std::string>& token_bytes);
    // Every non-special token of the tokenizer.
    static std::shared_ptr<const TokenTrie> from_tokenizer(const Tokenizer& tok);

    struct Node {
        uint8_t byte;
        uint16_t depth;        // 1 for a token's first byte
        uint32_t end;          // one past the last node of this node's subtree
        uint32_t first_token;  // tokens whose bytes end here: ids[first_token, first_token + n_tokens)
        uint32_t n_tokens;
    };
    std::vector<Node> nodes;
    std::vector<int32_t> ids;
    size_t n_vocab = 0;
    size_t max_depth = 0;
};

using TokenMask = std::vector<uint64_t>;  // bit i: token i allowed
inline bool mask_test(std::span<const uint64_t> m, int32_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
inline void mask_set(std::span<uint64_t> m, int32_t id) { m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }

// A grammar bound to a vocabulary, with its cache of masks. Shared by every sequence using the grammar
// (thread-safe).
class TokenGrammar {
public:
    TokenGrammar(Grammar g, std::shared_ptr<const TokenTrie> trie);

    const Grammar& grammar() const { return grammar_; }
    const TokenTrie& trie() const { return *trie_; }
    // The tokens whose bytes the grammar accepts from `s` (end tokens not included).
    std::shared_ptr<const TokenMask> byte_mask(const GrammarState& s) const;
    // The same, computed without the cache (benchmarks, tests).
    void compute_mask(const GrammarState& s, TokenMask& out) const;

    struct CacheStats {
        uint64_t hits = 0, misses = 0;
    };
    CacheStats cache_stats() const;

private:
    Grammar grammar_;
    std::shared_ptr<const TokenTrie> trie_;
    mutable std::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
    mutable CacheStats stats_;
};

// One sequence's position in its grammar.
class GrammarMatcher {
public:
    // end_tokens: allowed exactly when a whole value has been read (EOS, end of turn).
    GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> end_tokens);

    // The allowed tokens now (valid until the next accept).
    std::span<const uint64_t> mask();
    // Moves past `token`; an error (and no move) when the grammar does not allow it.
    Status accept(int32_t token, std::string_view bytes);
    bool accepting() const;  // a whole value has been read
    bool finished() const;   // ... and nothing may follow but an end token
    bool is_end_token(int32_t token) const;

private:
    std::shared_ptr<const TokenGrammar> g_;
    GrammarRunner runner_;
    std::vector<int32_t> end_tokens_;
    GrammarState state_;
    TokenMask mask_;
};

}  // namespace dsv4
