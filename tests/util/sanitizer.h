// Whether a test binary runs under a sanitizer. Suites that repeat one path many times for statistics run a
// tenth of their repetitions there: the sanitizer pass looks for memory and undefined-behaviour errors, which
// the first repetitions meet as well as the last, and the release pass runs them all.
#pragma once

#include <algorithm>

namespace dsv4::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// n repetitions, or a tenth of them (at least one) under a sanitizer.
constexpr int repetitions(int n) { return kSanitized ? std::max(1, n / 10) : n; }

}  // namespace dsv4::test
