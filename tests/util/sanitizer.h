// Suites that repeat one path many times for statistics run a tenth of their repetitions under a sanitizer,
// and suites that repeat one check over many like cases check a sample of them (one case of each kind): the
// sanitizer pass looks for memory and undefined-behaviour errors, which the first repetitions and one case of
// a kind meet as well as the rest, and the release pass runs them all.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/sanitizer.h"

namespace dsv4::test {

// n repetitions, or a tenth of them (at least one) under a sanitizer.
constexpr int repetitions(int n) {
    return DSV4_SANITIZED ? std::max(1, n / 10) : n;
}

// The like cases a suite checks: all of them, or under a sanitizer the given sample (one case of each kind).
template <class T>
std::vector<T> cases(std::vector<T> all, std::vector<T> sample) {
    return DSV4_SANITIZED ? sample : all;
}

// The stride through a run of like cases: every case, or every n-th under a sanitizer.
constexpr size_t every(size_t n) {
    return DSV4_SANITIZED ? n : 1;
}

}  // namespace dsv4::test
