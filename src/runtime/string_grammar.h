// JSON strings with constraints on their decoded content, as byte-grammar nodes (runtime/grammar.h): a set of
// code points becomes one JSON-encoded character (raw UTF-8, or the escape JSON requires: \" \\ \n ... \u00XX),
// so a regex over the decoded text turns into a grammar over the JSON text.
//
// The regex subset (ECMA-262 syntax, as JSON Schema's `pattern` uses it, without the u flag's extras):
// literals and escaped punctuation; \t \n \r \f \v \0 \xHH \uHHHH; classes [...] with ranges, negation [^...]
// and \d \w \s (and \D \W \S) inside; \d \w \s \D \W \S and '.' outside (\s is ECMA's whitespace set, '.'
// anything but a line terminator); groups (...) and (?:...); alternation |; quantifiers * + ? {m} {m,} {m,n}
// (n <= 1000); '^' at the start and '$' at the end of a top-level alternative. A pattern is searched for, as
// JSON Schema says: an alternative without '^' may be preceded by any text, one without '$' followed by any.
// Anything else (backreferences, lookaround, \b, lazy quantifiers, named groups, a quantifier over something
// that can match the empty string) is an error naming it.
//
// The grammar writes each character one way (raw where JSON allows it, else the short escape, else \u00XX;
// '<' as \u003c inside DSML markup), so a value it accepts decodes to text the regex matches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/grammar.h"

namespace dsv4 {

// Sorted, disjoint, non-adjacent inclusive ranges of Unicode scalar values (no surrogates).
using CodePointSet = std::vector<std::pair<uint32_t, uint32_t>>;

CodePointSet code_points_all();

class StringGrammarBuilder {
public:
    StringGrammarBuilder(Grammar& g, bool no_lt) : g_(g), no_lt_(no_lt) {}

    // One JSON-encoded character from `set` (which must not be empty).
    int32_t character(const CodePointSet& set);
    // A whole JSON string (quotes included) of min_len to max_len (-1: unbounded) code points.
    int32_t sized_string(int32_t min_len, int32_t max_len);
    // A whole JSON string whose decoded content `pattern` matches (searched, as above). Errors name the
    // construct that is not supported, with its offset in the pattern.
    Result<int32_t> pattern_string(std::string_view pattern);

private:
    int32_t add_literal(std::string text);
    int32_t add_byte_range(uint8_t lo, uint8_t hi);

    Grammar& g_;
    bool no_lt_;
    std::vector<std::pair<CodePointSet, int32_t>> characters_;  // sets already encoded
};

}  // namespace dsv4
