// The connection front of `dsv4 serve`: owns the listening socket and every connection, and hands httplib
// only complete requests. One epoll thread accepts and reads; a connection holds no thread while its request
// trickles in or while it idles between keep-alive requests, so slow or idle clients cannot starve /health.
// Limits enforced here, before any handler runs: a connection cap (beyond it: 503 at once), a deadline for the
// request head and one for the body (408), the head size (431), the Content-Length against the body limit
// (413 at once; malformed: 400), the bytes of all bodies being received at once (503), keep-alive idle time
// and requests per connection. A worker pool runs each complete request through `serve` (httplib's request
// processing over an in-memory stream of the request bytes that writes to the socket), then gives a
// kept-alive connection back to the epoll thread.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/exchange.h"
#include "server/http_head.h"
#include "server/openai_request.h"

namespace dsv4::server {

struct FrontOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                        // 0: any free port
    size_t max_connections = 4096;          // open connections; beyond: 503 and close (also bounded by RLIMIT_NOFILE)
    int header_timeout_ms = 10000;          // from a connection's first byte (or its opening) to the end of the head
    int body_timeout_ms = 60000;            // from the end of the head to the end of the body
    int keep_alive_timeout_ms = 5000;       // idle time between requests on one connection
    size_t keep_alive_max_requests = 1000;  // requests per connection; the last one is answered "close"
    int write_timeout_ms = 30000;           // a client that reads nothing for this long is dropped
    int workers = 16;                       // threads running handlers (each waiting request holds one)
    size_t max_buffered_bytes = (size_t)256 << 20;  // request bodies being received at once, by Content-Length
    HeadLimits head;
    // The JSON body of an error the front answers itself (400, 408, 413, 431, 503), by the request's path
    // ("" when the request line never arrived); unset: OpenAI's error shape.
    std::function<std::string(const std::string& path, const ApiError& error)> error_body;
};

class HttpFront {
public:
    // Runs one complete request (bytes on `stream`), writes its answer; false when the connection must close.
    using Serve = std::function<bool(httplib::Stream& stream, bool close_connection, bool& connection_closed)>;

    HttpFront(FrontOptions options, Serve serve);
    ~HttpFront();
    HttpFront(const HttpFront&) = delete;
    HttpFront& operator=(const HttpFront&) = delete;

    // Opens the listening socket; returns the port.
    Result<int> bind();
    // Serves until stop(); returns once every handler has returned and every connection is closed.
    Status run();
    // Thread-safe; may come before run().
    void stop();
    // Open connections right now (for /metrics and tests).
    size_t open_connections() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Raises the soft limit on open files to the hard limit; returns the new soft limit.
size_t raise_open_file_limit();

}  // namespace dsv4::server
