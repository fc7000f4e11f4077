// Suites that repeat one path many times for statistics run a tenth of their repetitions under a sanitizer,
// and suites that repeat one check over many like cases check a sample of them (one case of each kind): the
// sanitizer pass looks for memory and undefined-behaviour errors, which the first repetitions and one case of
// a kind meet as well as the rest, and the release pass runs them all.
#pragma once

#include <algorithm>

#include "core/sanitizer.h"

namespace dsv4::test {

// n repetitions, or a tenth of them (at least one) under a sanitizer.
constexpr int repetitions(int n) {
    return DSV4_SANITIZED ? std::max(1, n / 10) : n;
}

}  // namespace dsv4::test
