// What the connection front (http_front.h) reads from a request head before any handler runs: where the head
// ends, how long the body is, and whether the head is acceptable at all. Size checks happen here, on the head
// alone, so an oversized or malformed Content-Length is answered at once instead of after a read timeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::server {

struct HeadLimits {
    size_t max_head_bytes = 64 << 10;  // request line + headers
    size_t max_body_bytes = (size_t)8 << 20;
};

enum class HeadState { incomplete, complete, refused };

struct HttpHead {
    HeadState state = HeadState::incomplete;
    size_t head_bytes = 0;  // through the blank line (complete only)
    size_t body_bytes = 0;  // from Content-Length (0 when absent)
    bool expect_continue = false;
    size_t expect_offset = 0, expect_bytes = 0;  // where the Expect line (with its CRLF) sits in the head
    std::string path;  // the request target without its query, once the request line has arrived
    // refused only: the status to answer with (400, 411, 413, 431, 505) and why
    int status = 0;
    std::string code;
    std::string message;
};

// Looks at the bytes received so far on a connection.
HttpHead parse_http_head(std::string_view received, const HeadLimits& limits);

}  // namespace dsv4::server
