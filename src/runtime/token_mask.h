// Token masks from a byte grammar: which tokens of the vocabulary may come next. A token is allowed when the
// grammar accepts all of its bytes from the current state; the vocabulary is a byte trie laid out in
// preorder, so the walk advances the grammar once per trie node (shared prefixes once) and skips a whole
// subtree as soon as its prefix is rejected. Masks are cached per grammar state (a state is a few frames:
// inside a long string or between the keys of an object the same state recurs at every step), so a step
// usually costs one hash lookup and a copy of the mask.
//
// Special tokens (control and user-defined) are not part of the byte grammar, except those spelling a piece
// of tool-call markup ("｜DSML｜"), which the tool-call grammar writes; the matcher allows its end tokens
// (EOS, end of turn) exactly in accepting states, and nothing else once the value is complete.
//
// Inside a string with a maxLength, every position is a state of its own (the characters read so far are part
// of it), so the cache would miss at every step. At a character boundary such a state takes the mask of the same
// string without the upper bound (one state for every position past minLength, cached once) and keeps only the
// tokens that write at most the characters left before the closing quote.
//
// With a token budget (the draws a generation has left) the mask also drops every token after which a complete
// value and its end token no longer fit (runtime/grammar_distance.h): each cached mask keeps the distance after
// each of its tokens (the most common one implicitly, the others listed), so a budget that is not tight returns
// the very same mask and a tight one costs a copy and a short list.
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
#include "runtime/grammar_distance.h"

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
inline bool mask_test(std::span<const uint64_t> m, int32_t id) {
    return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}
inline void mask_set(std::span<uint64_t> m, int32_t id) {
    m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

// A grammar bound to a vocabulary, with its cache of masks. Shared by every sequence using the grammar
// (thread-safe).
class TokenGrammar {
public:
    TokenGrammar(Grammar g, std::shared_ptr<const TokenTrie> trie);

    const Grammar& grammar() const { return grammar_; }
    const TokenTrie& trie() const { return *trie_; }
    const GrammarDistance& distance() const { return distance_; }
    // The tokens whose bytes the grammar accepts from `s` (end tokens not included).
    std::shared_ptr<const TokenMask> byte_mask(const GrammarState& s) const;
    // The tokens of byte_mask(s) after which a complete value is at most `limit` tokens away (limit >= 0).
    void budget_mask(const GrammarState& s, int32_t limit, TokenMask& out) const;
    // byte_mask computed without the cache (benchmarks, tests); with a limit, budget_mask without the cache.
    void compute_mask(const GrammarState& s, TokenMask& out) const;
    void compute_mask(const GrammarState& s, int32_t limit, TokenMask& out) const;

    struct CacheStats {
        uint64_t hits = 0, misses = 0;
    };
    CacheStats cache_stats() const;

private:
    // The same state with a length-bounded repeat at its top replaced by its copy without the upper bound, and
    // the tokens of the view's mask that stay within the bound (null: all do); false when `s` is not such a
    // state (one stack, between repetitions) or, for a repeat of single bytes, when what follows the repeat
    // may begin with one of them (a token could then leave the repeat early: the view would not say).
    bool unbounded_view(const GrammarState& s, GrammarState& view, const TokenMask*& within) const;
    // out &= within (when not null).
    static void keep_within(const TokenMask* within, TokenMask& out);
    // Whether every byte the repeat's items read is refused once the repeat at the top of `s` is full.
    bool follow_excludes_items(const GrammarState& s) const;

    // A cached mask and the distances after its tokens: `common` is the most frequent, `other` lists every
    // token with another as (distance << 32 | token), ascending; not listed when too many differ.
    struct Entry {
        TokenMask mask;
        int32_t widest = 0;  // the largest distance after an allowed token: a limit at or above it changes nothing
        int32_t common = 0;
        bool listed = true;
        std::vector<uint64_t> other;
    };
    std::shared_ptr<const Entry> entry(const GrammarState& s, const std::string& key) const;
    void walk(const GrammarState& s, int32_t limit, Entry& out) const;  // limit < 0: no limit, distances kept

    // Declared before grammar_: the constructor fills it while adding the unbounded twins to the grammar.
    // Per node: the unbounded copy of a length-bounded string body or repeat of single bytes (-1: none).
    std::vector<int32_t> twin_;
    Grammar grammar_;
    std::shared_ptr<const TokenTrie> trie_;
    GrammarDistance distance_;
    // What a token writes into a bounded repeat, one table per kind of item (a string body's characters, or
    // the leading bytes of one byte set): [r] holds the tokens writing at most r items; an r past the table's
    // end keeps every token. within_of_[node] names a twinned node's table.
    std::vector<std::vector<TokenMask>> within_;
    std::vector<int32_t> within_of_;
    mutable std::mutex mu_;
    mutable std::unordered_map<std::string, std::shared_ptr<const Entry>> cache_;
    mutable std::unordered_map<std::string, bool> follow_clear_;  // follow_excludes_items by the full state's key
    mutable CacheStats stats_;
};

// What a generation is constrained to: `grammar` from the first generated byte, or, with a trigger, from
// the byte after the first occurrence of `trigger` in the generated text (the text before it is free:
// reasoning before "</think>", prose before a tool-call block). With trigger_required the generation may not
// end before the trigger. `prefix` is read by the grammar before the first generated byte of the value.
struct GrammarConstraint {
    std::shared_ptr<const TokenGrammar> grammar;  // null: unconstrained
    std::string trigger;
    bool trigger_required = true;
    std::string prefix;  // bytes of the value already written (in the prompt, or the trigger itself)
    explicit operator bool() const { return grammar != nullptr; }
};

// One sequence's position in its constraint.
class GrammarMatcher {
public:
    // end_tokens: allowed exactly when a whole value has been read (EOS, end of turn).
    GrammarMatcher(GrammarConstraint constraint, std::vector<int32_t> end_tokens);

    // The allowed tokens now (valid until the next accept or ban). tokens_left: the draws this generation has
    // left, this one included (-1: no budget); then only tokens after which the value and an end token still
    // fit are allowed, unless no token would be (a budget below the grammar's minimum: the mask without it).
    std::span<const uint64_t> mask(int64_t tokens_left = -1);
    // Moves past `token`; an error (and no move) when the grammar does not allow it. Before the trigger only a
    // token that completes the trigger can fail (when the bytes after it do not start the value).
    Status accept(int32_t token, std::string_view bytes);
    // Takes `token` out of the masks until the next successful accept (after it failed to be accepted).
    void ban(int32_t token);
    bool active() const { return active_; }  // past the trigger (or there is none)
    bool accepting() const;                  // a whole value has been read
    bool finished() const;                   // ... and nothing may follow but an end token
    bool is_end_token(int32_t token) const;

private:
    void trigger_mask(int32_t limit);  // before a required trigger under a tight budget: only spelling it
    void apply_bans();
    bool mask_empty() const;

    GrammarConstraint c_;
    GrammarRunner runner_;
    std::vector<int32_t> end_tokens_;
    bool active_ = true;
    std::string tail_;  // before the trigger: the last generated bytes that may begin it
    GrammarState state_;
    TokenMask mask_;
    std::vector<int32_t> banned_;
    int32_t start_distance_ = 0;          // before the trigger: the distance right after it (and the prefix)
    std::vector<int32_t> trigger_spell_;  // tokens to spell the trigger from each byte on
    int32_t limit_ = -1;                  // the last mask's budget: the distance allowed after the token (-1: none)
};

// The fewest tokens a generation under `c` needs for a complete value (the trigger first, when required),
// plus one for the end token when end_token; 0 when the vocabulary gives no bound. A budget below it cannot
// be kept.
int64_t constraint_min_tokens(const GrammarConstraint& c, bool end_token);

}  // namespace dsv4
