// How many tokens a grammar state still needs to reach a complete value, for budget-aware masks
// (runtime/token_mask.h): a token is allowed under a budget only when what follows it can still finish.
//
// The distance is an upper bound on the fewest tokens, computed from the node definitions and the frame
// counters (grammar.cpp): literal text (markup, keys, enum values) costs the fewest vocabulary tokens that
// spell it, every other byte one single-byte token (byte-level BPE has one for each byte; available() says
// whether this vocabulary does). The bound is consistent: from a state at distance d > 0 some token leads
// to a state at distance <= d - 1 (the first token of the bound's own completion), and a state at distance 0
// is accepting, so a generation that keeps the distance below its remaining budget always ends in time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/grammar.h"

namespace dsv4 {

class TokenTrie;

class GrammarDistance {
public:
    static constexpr int32_t kUnreachable = 1 << 30;  // no completion is known (saturates: sums stay below it)

    GrammarDistance(const Grammar& g, const TokenTrie& trie);

    // Every byte has a one-byte token, so the bound holds; without it distances are not computed.
    bool available() const { return available_; }
    // The fewest tokens from `s` to a complete value (0: accepting; kUnreachable: none known).
    int32_t state(const GrammarState& s) const;
    int32_t stack(const GrammarFrame* frames, size_t n) const;
    // The fewest tokens of a whole value of node `id`.
    int32_t node(int32_t id) const;
    // The fewest vocabulary tokens that spell `text` (kUnreachable when some byte has no token).
    int32_t spell(const std::string& text) const;
    // spell() of each suffix: [i] for text[i..], [text.size()] = 0.
    std::vector<int32_t> spell_suffixes(const std::string& text) const;

private:
    int32_t top(const GrammarFrame& f) const;    // to finish the node of the top frame
    int32_t below(const GrammarFrame& f) const;  // to finish a node whose child (above it) just ended
    int32_t after_property(int32_t obj, int32_t last) const;  // object: after the value of property `last`
    int32_t key_options(int32_t obj, int32_t last, int32_t pos, int32_t current) const;  // object: a key from byte `pos`

    const Grammar& g_;
    const TokenTrie& trie_;
    bool available_ = false;
    std::vector<int32_t> whole_;                        // per node
    std::vector<std::vector<int32_t>> literal_;         // literal: tokens to spell text[i..]
    std::vector<std::vector<int32_t>> rest_;            // sequence: children k.. ; object: required props from k (with ',')
    std::vector<std::vector<std::vector<int32_t>>> key_first_, key_next_;  // object: key + ':' and ',' + key + ':' from i
};

}  // namespace dsv4
