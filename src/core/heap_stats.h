// What the C heap holds: bytes malloc has handed out and not taken back. Unlike the resident set, this does
// not move when the allocator keeps freed pages, grows an arena or changes its mmap threshold, so a steady
// rise means memory that was allocated and never freed.
#pragma once

#include <cstdint>
#include <optional>

namespace dsv4 {

// Bytes in use across every malloc arena, mmapped blocks included; nullopt where the C library cannot say
// (only glibc's mallinfo2 is read).
std::optional<uint64_t> heap_allocated_bytes();

}  // namespace dsv4
