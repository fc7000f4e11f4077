// Invariant checks: a broken invariant is a bug, so it aborts with file:line. Never use for input validation.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DSV4_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "dsv4: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

#define DSV4_CHECK_MSG(cond, ...)                                                         \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "dsv4: %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                            \
            std::fprintf(stderr, "\n");                                                   \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)
