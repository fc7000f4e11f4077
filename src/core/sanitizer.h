// DSV4_SANITIZED: 1 when this translation unit is built under AddressSanitizer, ThreadSanitizer or
// MemorySanitizer (GCC or Clang), else 0.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DSV4_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DSV4_SANITIZED 1
#endif
#endif
#ifndef DSV4_SANITIZED
#define DSV4_SANITIZED 0
#endif
