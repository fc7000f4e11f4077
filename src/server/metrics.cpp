// Prometheus text rendering (see metrics.h). Every family gets its HELP and TYPE lines; names follow the
// Prometheus conventions (counters end in _total, units in the name).
#include "server/metrics.h"

#include <cstdio>

namespace dsv4::server {

void HttpCounters::count_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(mu_);
    ++s_.requests[{endpoint, status}];
}

void HttpCounters::count_disconnect() {
    std::lock_guard<std::mutex> lk(mu_);
    ++s_.disconnects;
}

void HttpCounters::count_parse_error() {
    std::lock_guard<std::mutex> lk(mu_);
    ++s_.parse_errors;
}

void HttpCounters::stream_started() {
    std::lock_guard<std::mutex> lk(mu_);
    ++s_.streams_active;
}

void HttpCounters::stream_ended() {
    std::lock_guard<std::mutex> lk(mu_);
    if (s_.streams_active > 0) --s_.streams_active;
}

HttpCounters::Snapshot HttpCounters::snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    return s_;
}

namespace {

class Writer {
public:
    void family(const char* name, const char* type, const char* help) {
        out_ += "# HELP ";
        out_ += name;
        out_ += ' ';
        out_ += help;
        out_ += "\n# TYPE ";
        out_ += name;
        out_ += ' ';
        out_ += type;
        out_ += '\n';
    }
    void sample(const std::string& name_and_labels, double value) {
        char buf[64];
        // %.17g round-trips a double; integers print without a fraction.
        std::snprintf(buf, sizeof(buf), "%.17g", value);
        out_ += name_and_labels;
        out_ += ' ';
        out_ += buf;
        out_ += '\n';
    }
    void metric(const char* name, const char* type, const char* help, double value) {
        family(name, type, help);
        sample(name, value);
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

// Label values here are route names and numbers, but escape anyway: a label value must not break the line.
std::string label_value(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

}  // namespace

std::string render_metrics(const EngineStats& e, const HttpCounters::Snapshot& http, const ProcessStats& proc) {
    Writer w;
    w.metric("dsv4_requests_total", "counter", "Generation requests accepted by the engine.", (double)e.requests_total);
    w.metric("dsv4_requests_finished_total", "counter", "Generation requests that ended (any reason).",
             (double)e.requests_finished);
    w.metric("dsv4_requests_cancelled_total", "counter",
             "Generation requests cancelled (client disconnected or server shutting down).",
             (double)e.requests_cancelled);
    w.metric("dsv4_requests_rejected_total", "counter", "Generation requests rejected because the queue was full.",
             (double)e.requests_rejected);
    w.metric("dsv4_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)e.prompt_tokens);
    w.metric("dsv4_cached_prompt_tokens_total", "counter", "Prompt tokens restored from the prefix cache.",
             (double)e.cached_prompt_tokens);
    w.metric("dsv4_generated_tokens_total", "counter", "Tokens generated.", (double)e.generated_tokens);
    w.metric("dsv4_queue_depth", "gauge", "Requests waiting for a slot.", (double)e.queue_depth);
    w.metric("dsv4_requests_running", "gauge", "Requests holding a slot (prefilling or decoding).", (double)e.running);
    w.metric("dsv4_kv_tokens_used", "gauge", "Tokens held in the KV caches of running requests.",
             (double)e.kv_tokens_used);
    w.metric("dsv4_kv_tokens_capacity", "gauge", "Tokens the KV caches can hold (slots x context).",
             (double)e.kv_tokens_capacity);
    w.metric("dsv4_kv_usage_ratio", "gauge", "Fraction of the KV capacity in use.",
             e.kv_tokens_capacity > 0 ? (double)e.kv_tokens_used / (double)e.kv_tokens_capacity : 0.0);
    w.metric("dsv4_engine_steps_total", "counter", "Batched model steps run.", (double)e.steps);
    w.metric("dsv4_engine_busy_seconds_total", "counter", "Seconds spent inside model steps.", e.busy_seconds);
    // Averages over busy time only, so idle periods do not dilute them.
    w.metric("dsv4_generation_tokens_per_second", "gauge", "Generated tokens per second of model time.",
             e.busy_seconds > 0 ? (double)e.generated_tokens / e.busy_seconds : 0.0);
    w.metric("dsv4_processed_tokens_per_second", "gauge",
             "Prompt (not cached) plus generated tokens per second of model time.",
             e.busy_seconds > 0
                 ? (double)(e.prompt_tokens - e.cached_prompt_tokens + e.generated_tokens) / e.busy_seconds
                 : 0.0);
    w.metric("dsv4_speculative_steps_total", "counter", "Decode steps that verified MTP drafts.",
             (double)e.spec_steps);
    w.metric("dsv4_speculative_draft_tokens_total", "counter", "Draft tokens the MTP block proposed.",
             (double)e.draft_tokens);
    w.metric("dsv4_speculative_accepted_tokens_total", "counter", "Draft tokens the model accepted.",
             (double)e.accepted_tokens);
    w.metric("dsv4_speculative_acceptance_ratio", "gauge", "Accepted over proposed draft tokens.",
             e.draft_tokens > 0 ? (double)e.accepted_tokens / (double)e.draft_tokens : 0.0);
    w.metric("dsv4_prefix_cache_entries", "gauge", "Snapshots held by the prefix cache.",
             (double)e.prefix_cache_entries);
    w.metric("dsv4_prefix_cache_bytes", "gauge", "Bytes held by the prefix cache.", (double)e.prefix_cache_bytes);
    w.metric("dsv4_prefix_cache_hits_total", "counter", "Prefix-cache lookups that restored a snapshot.",
             (double)e.prefix_cache_hits);
    w.metric("dsv4_prefix_cache_misses_total", "counter", "Prefix-cache lookups that found nothing.",
             (double)e.prefix_cache_misses);

    w.family("dsv4_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (const auto& [key, n] : http.requests) {
        w.sample("dsv4_http_requests_total{endpoint=\"" + label_value(key.first) + "\",status=\"" +
                     std::to_string(key.second) + "\"}",
                 (double)n);
    }
    w.metric("dsv4_http_streams_active", "gauge", "Streaming responses in progress.", (double)http.streams_active);
    w.metric("dsv4_client_disconnects_total", "counter", "Requests (streaming or not) cancelled because the client went away.",
             (double)http.disconnects);
    w.metric("dsv4_tool_call_parse_errors_total", "counter",
             "Chat completions whose tool-call markup did not parse (the markup was withheld).",
             (double)http.parse_errors);
    w.metric("dsv4_uptime_seconds", "gauge", "Seconds since the server started.", proc.uptime_seconds);
    w.metric("dsv4_http_connections_open", "gauge", "Open client connections, idle and busy.",
             (double)proc.http_connections_open);
    if (proc.heap_allocated_bytes) {
        w.metric("dsv4_heap_allocated_bytes", "gauge",
                 "Bytes the C heap has handed out and not taken back (all arenas; the model file is not on it).",
                 (double)*proc.heap_allocated_bytes);
    }
    return w.take();
}

}  // namespace dsv4::server
