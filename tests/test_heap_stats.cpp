// heap_allocated_bytes follows what the program allocates and frees, whatever the allocator does with pages.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/heap_stats.h"

namespace dsv4 {
namespace {

TEST(HeapStats, FollowsAllocationsAndFrees) {
    const std::optional<uint64_t> before = heap_allocated_bytes();
    if (!before) GTEST_SKIP() << "the C library does not report heap use here";
    constexpr size_t kBlock = 64 << 10, kCount = 256;  // 16 MiB in blocks below and above mmap's threshold
    std::vector<std::unique_ptr<char[]>> blocks;
    for (size_t i = 0; i < kCount; ++i) {
        blocks.emplace_back(new char[i % 2 ? kBlock : 4 * kBlock]);
        std::memset(blocks.back().get(), 1, kBlock);
    }
    const uint64_t held = *heap_allocated_bytes();
    const uint64_t expect = kCount / 2 * (kBlock + 4 * kBlock);
    EXPECT_GE(held, *before + expect);
    EXPECT_LT(held, *before + expect + (1 << 20));
    blocks.clear();
    const uint64_t after = *heap_allocated_bytes();
    EXPECT_LT(after, *before + (1 << 20)) << "before " << *before << ", held " << held;
}

}  // namespace
}  // namespace dsv4
