// The hand-off between the engine thread and the HTTP threads: EventChannel carries one request's token
// events (the engine callback pushes without blocking, the handler waits), and RequestRegistry knows which
// engine requests are in flight so that a shutdown can cancel them all.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/engine.h"

namespace dsv4::server {

class EventChannel {
public:
    // Engine thread. Holds the lock only to append, so the engine never waits on a slow client; memory is
    // bounded by the request's max_tokens.
    void push(const TokenEvent& ev);
    // Handler thread: moves every queued event into `out` (cleared first), waiting up to `timeout` for the
    // first. Returns false when nothing arrived in time.
    bool wait(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<TokenEvent> events_;
};

class RequestRegistry {
public:
    // Returns false once the registry is closed (the server is stopping): the caller cancels the request.
    bool add(uint64_t id);
    void remove(uint64_t id);
    // Stops accepting and returns the requests in flight, to be cancelled.
    std::vector<uint64_t> close();
    bool closed() const;
    size_t size() const;

private:
    mutable std::mutex mu_;
    std::set<uint64_t> ids_;
    bool closed_ = false;
};

}  // namespace dsv4::server
