// The OpenAI-compatible HTTP server behind `dsv4 serve`: routes, bearer-token auth, body limits, the engine
// loop thread, and graceful shutdown. HTTP details (cpp-httplib) stay inside server.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/engine.h"

namespace dsv4::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0 picks a free port (bind() reports it)
    std::string api_key;                      // empty: no auth; else /v1/* need "Authorization: Bearer KEY"
    bool thinking_default = false;            // thinking mode for chat requests that do not choose
    size_t max_body_bytes = (size_t)8 << 20;  // larger bodies get 413
    std::string model_name = "dsv4";          // the id /v1/models lists and responses echo
    int http_threads = 0;                     // 0: slots + queue + a few spare (every waiting request holds one)
    int keep_alive_seconds = 2;               // idle keep-alive connections also bound the shutdown time
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
