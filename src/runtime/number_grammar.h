// Bounded JSON numbers as byte-grammar nodes (runtime/grammar.h): a digit automaton per range, so `minimum`,
// `maximum` and their exclusive forms hold exactly for what the grammar writes.
//
// Integers: every integer in [lo, hi] (|value| < 10^15, the engine's integer bound), without leading zeros or
// "-0". Numbers: with integer bounds, every number in the range written with at most 15 fraction digits and
// no exponent (the integers, and I.F with F ending in a non-zero digit); a bound that is not an integer is
// first rounded inward to one (so the grammar writes a subset of the range: [0.5, 2] becomes [1, 2]).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "runtime/grammar.h"

namespace dsv4 {

constexpr int64_t kMaxGrammarInteger = 999999999999999;  // 15 digits

struct NumberBounds {
    double lo = -1e300, hi = 1e300;   // as given; +-1e300: no bound
    bool lo_exclusive = false, hi_exclusive = false;
};

// Errors when no value is left ("... accepts no integer"), naming the bounds.
Result<int32_t> add_bounded_integer(Grammar& g, const NumberBounds& b);
Result<int32_t> add_bounded_number(Grammar& g, const NumberBounds& b);

}  // namespace dsv4
