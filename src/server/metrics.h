// /metrics: the engine's counters and the server's HTTP counters in the Prometheus text exposition format
// (version 0.0.4): requests, tokens, queue depth, KV use, throughput, prefix-cache use.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "runtime/engine.h"

namespace dsv4::server {

// Counters the HTTP layer keeps (thread-safe). Label sets stay bounded: endpoints are the fixed routes (every
// other path counts as "other") and statuses are the few the server sends.
class HttpCounters {
public:
    void count_request(const std::string& endpoint, int status);
    void count_disconnect();
    void count_parse_error();

    struct Snapshot {
        std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status) -> count
        uint64_t disconnects = 0;        // streams whose client went away before the end
        uint64_t parse_errors = 0;       // chat outputs whose tool-call markup did not parse
        uint64_t streams_active = 0;
    };
    Snapshot snapshot() const;

    void stream_started();
    void stream_ended();

private:
    mutable std::mutex mu_;
    Snapshot s_;
};

// What the process holds, read at scrape time; an unknown value is left out of the text.
struct ProcessStats {
    double uptime_seconds = 0;                     // since the server started
    std::optional<uint64_t> heap_allocated_bytes;  // see core/heap_stats.h
    size_t http_connections_open = 0;              // connections the front holds (this scrape's included)
};

// The Prometheus text for one scrape.
std::string render_metrics(const EngineStats& engine, const HttpCounters::Snapshot& http, const ProcessStats& proc);

}  // namespace dsv4::server
