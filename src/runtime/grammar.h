// A byte-level grammar for constrained decoding: a small recursive state machine (a pushdown automaton over
// bytes) whose nodes are the pieces of a JSON value (objects with known keys in schema order, arrays, strings,
// numbers, literals), alternatives and sequences. runtime/json_schema.h compiles JSON schemas and the plain
// JSON-object mode into it; runtime/token_mask.h turns a state into a token mask over the vocabulary.
//
// A state is a set of stacks of frames (a set because of alternatives: `anyOf` of two objects is decided
// only by the keys that follow); each stack's top frame is a node ready to read a byte. A stack that is empty
// has read a whole value. Every node reads at least one byte and every live stack can be completed (the
// compiler keeps only nodes that produce a finite value), so a state that is not dead can always reach an end.
// Whitespace between structural bytes is bounded (Grammar::max_whitespace per position), so a model cannot
// wander forever between two tokens of the value; strings and numbers are bounded only by the token budget
// (runtime/grammar_distance.h, GrammarMatcher::mask).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

enum class GrammarNodeKind : int32_t {
    literal,   // exact bytes (const / enum values, true / false / null, fixed markup)
    string,    // a JSON string: valid UTF-8, escapes checked (no lone surrogates)
    raw_text,  // text up to (not including) a '<', valid UTF-8, at least one byte (a DSML string parameter)
    integer,   // a JSON integer, at most 15 digits (so every reader gets it back exactly as an integer)
    number,    // a JSON number, at most 15 digits before and after the point and 2 in the exponent
    object,    // '{' then the properties in order ('"key": value'), required ones mandatory; or any keys
    array,     // '[' items ',' ... ']' with min/max items
    any_of,    // one of `children` (never on a stack: replaced by its alternatives)
    sequence,  // `children` one after the other (no separators)
    byte_set,  // one byte of `bytes` (string formats: digits, hex)
    repeat,    // `items` from min_items to max_items times (-1: unbounded); items must read at least one byte
};

struct GrammarProperty {
    std::string key;   // the key as JSON text, quotes included: "\"name\""
    int32_t value = -1;
    bool required = false;
};

struct GrammarNode {
    GrammarNodeKind kind = GrammarNodeKind::literal;
    std::string text;                        // literal
    std::vector<int32_t> children;           // any_of, sequence
    std::vector<GrammarProperty> properties; // object with known keys
    int32_t any_value = -1;                  // object with any keys: every value is this node (-1: known keys)
    int32_t items = -1;                      // array, repeat
    int32_t min_items = 0, max_items = -1;   // array, repeat (-1: unbounded)
    bool no_lt = false;                      // string: no raw '<' (inside DSML markup), escapes still allowed
    bool string_chars = false;               // repeat: each item is one JSON-encoded character of a string body
    uint64_t bytes[4] = {0, 0, 0, 0};        // byte_set: bit b of bytes[b / 64]
};

// Frames are plain ints so a state serializes into a cache key byte for byte.
struct GrammarFrame {
    int32_t node = 0;
    int32_t phase = 0;
    int32_t a = 0, b = 0, c = 0;  // per-kind counters (see grammar.cpp)
    bool operator==(const GrammarFrame&) const = default;
};

class Grammar {
public:
    std::vector<GrammarNode> nodes;
    int32_t root = -1;
    int32_t max_whitespace = 4;  // whitespace bytes allowed at each position between structural bytes

    int32_t add(GrammarNode n) {
        nodes.push_back(std::move(n));
        return static_cast<int32_t>(nodes.size()) - 1;
    }
};

// The known properties of object node `n` a key may name after property `last` (-1: none yet): [lo, hi], up to
// and including the next required one. The runner and the distance bound (grammar_distance.h) share it.
void key_range(const GrammarNode& n, int32_t last, int32_t& lo, int32_t& hi);

// Copies `other`'s nodes into `g` and returns the id of its root there (to combine grammars as alternatives).
int32_t append_grammar(Grammar& g, const Grammar& other);

// A set of stacks, stored flat: stack i is frames[ends[i-1], ends[i]).
struct GrammarState {
    std::vector<GrammarFrame> frames;
    std::vector<uint32_t> ends;

    bool dead() const { return ends.empty(); }
    void clear() {
        frames.clear();
        ends.clear();
    }
    // The bytes of the state, for a cache key.
    void key(std::string& out) const;
    bool operator==(const GrammarState&) const = default;
};

// Runs a Grammar over bytes. Stateless apart from scratch space: one per thread.
class GrammarRunner {
public:
    explicit GrammarRunner(const Grammar& g);

    // The state before any byte.
    GrammarState initial();
    // The state after byte `c` (dead when the grammar rejects it).
    void advance(const GrammarState& in, uint8_t c, GrammarState& out);
    // Advances in place over `bytes`; false (and a dead state) when some byte is rejected.
    bool advance(GrammarState& s, std::string_view bytes);
    // A whole value has been read (the generation may end here).
    bool accepting(const GrammarState& s) const;
    // A whole value has been read and nothing more can follow.
    bool finished(const GrammarState& s) const;
    // Accepts `text` as a whole value (tests).
    bool matches(std::string_view text);

    const Grammar& grammar() const { return g_; }

private:
    using Stack = std::vector<GrammarFrame>;
    // next >= 0: the byte about to be read; alternatives that cannot start with it are not expanded.
    void normalize(Stack& st, GrammarState& out, int depth, int next = -1);
    bool may_start(int32_t node, uint8_t c) const { return (first_[static_cast<size_t>(node)][c >> 6] >> (c & 63)) & 1; }
    void step(Stack& st, uint8_t c, GrammarState& out, int depth);
    void child_done(Stack& st);
    void feed(Stack& st, uint8_t c, GrammarState& out, int depth);
    void push_out(const Stack& st, GrammarState& out);

    const Grammar& g_;
    std::vector<std::array<uint64_t, 4>> first_;  // per node: the bytes its first byte may be (a superset)
};

}  // namespace dsv4
