// heap_allocated_bytes (see heap_stats.h): glibc's mallinfo2 sums every arena; uordblks counts the chunks in
// use (per-thread caches included, which are bounded) and hblkhd the blocks served by mmap.
#include "core/heap_stats.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/sanitizer.h"

// Under a sanitizer, malloc is the sanitizer's and glibc's arenas stay empty: say nothing rather than zero.
#if DSV4_SANITIZED
#define DSV4_HEAP_STATS 0
#endif
#if !defined(DSV4_HEAP_STATS) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define DSV4_HEAP_STATS 1
#endif

namespace dsv4 {

std::optional<uint64_t> heap_allocated_bytes() {
#if DSV4_HEAP_STATS
    const struct mallinfo2 m = mallinfo2();
    return (uint64_t)m.uordblks + (uint64_t)m.hblkhd;
#else
    return std::nullopt;
#endif
}

}  // namespace dsv4
