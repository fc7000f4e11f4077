// One request/response exchange as the connection front (http_front.h) and the handlers share it. The front
// runs each request's handler on one worker thread and points current_exchange() at the exchange for that
// time; handlers read whether the client is still connected and leave the token counts the request log needs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dsv4::server {

struct Exchange {
    int fd = -1;
    std::chrono::steady_clock::time_point received;  // when the whole request had arrived
    // Filled by the routes (status, method and path by the HTTP logger; usage by the generating endpoints).
    std::string method, path;
    int status = 0;
    int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;

    // True once the client has closed or reset its connection. Pipelined bytes count as alive; a client that
    // half-closes its sending side after the request (rare for HTTP clients) reads as gone.
    bool client_gone() const;
};

// The exchange the calling thread is serving, or nullptr outside a handler.
Exchange* current_exchange();

// Sets the calling thread's exchange for the life of the object.
class ExchangeScope {
public:
    explicit ExchangeScope(Exchange* e);
    ~ExchangeScope();
    ExchangeScope(const ExchangeScope&) = delete;
    ExchangeScope& operator=(const ExchangeScope&) = delete;

private:
    Exchange* previous_;
};

}  // namespace dsv4::server
