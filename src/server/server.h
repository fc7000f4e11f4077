// The OpenAI-compatible HTTP server behind `dsv4 serve`: routes, bearer-token auth, browser safety (Host,
// Origin, JSON bodies), the engine loop thread, and graceful shutdown. Connections and their limits belong to
// the connection front (http_front.h); HTTP parsing and routing (cpp-httplib) stay inside server.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/engine.h"

namespace dsv4::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0 picks a free port (bind() reports it)
    std::string api_key;                      // empty: no auth; else /v1/* need "Authorization: Bearer KEY"
    bool thinking_default = false;            // thinking mode for chat requests that do not choose
    size_t max_body_bytes = (size_t)8 << 20;  // larger bodies get 413
    // The served model ids: the first is the one responses and /health report; a request's `model` must be
    // one of them (or absent).
    std::vector<std::string> model_ids = {"dsv4"};
    int64_t default_max_tokens = 2048;        // cap for requests that give no max_tokens (0: the context's rest)
    int http_threads = 0;                     // 0: slots + queue + a few spare (every waiting request holds one)
    size_t max_connections = 4096;            // beyond: 503 at once (also bounded by the open-file limit)
    int header_timeout_ms = 10000;            // the request line and headers must arrive within this
    int body_timeout_ms = 60000;              // ...and then the body within this
    int keep_alive_seconds = 5;               // idle time between requests on one connection
    size_t keep_alive_max_requests = 1000;    // requests per connection
    std::vector<std::string> host_allow;      // Host names accepted besides the loopback ones ("*": any)
    std::vector<std::string> cors_origins;    // origins granted CORS ("*": any); none by default
    bool verbose = false;                     // one stderr line per request
};

class Server {
public:
    Server(Engine& engine, ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Open the listening socket; returns the port (useful with port 0).
    Result<int> bind();
    // Serve until stop(): runs the engine loop on its own thread, returns once every handler has returned.
    Status run();
    // Stop accepting, cancel the requests in flight (their clients get an error), make run() return.
    // Thread-safe and idempotent; may come before run() starts.
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
