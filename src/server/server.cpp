// The HTTP server (see server.h): cpp-httplib setup, routes, bearer-token auth, JSON error bodies for
// everything httplib answers by itself (404, 413), the engine loop thread, and the stop sequence:
// close the registry and cancel what is in flight, stop the listener, let handlers drain, stop the engine.
#include "server/server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <sys/socket.h>

#include <httplib.h>

#include "core/heap_stats.h"
#include "server/anthropic_messages.h"
#include "server/chat_page.h"
#include "server/event_channel.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/responses_api.h"

namespace dsv4::server {

using json = nlohmann::ordered_json;

namespace {

// Endpoint label for metrics: the fixed routes by name, anything else as "other" (bounded label set).
std::string endpoint_label(const std::string& path) {
    for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/messages",
                          "/v1/messages/count_tokens", "/v1/responses", "/"})
        if (path == p) return p;
    if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
}

// Compares without an early exit, so response timing does not reveal how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

// Anthropic's endpoints answer errors in Anthropic's body shape, everything else in OpenAI's.
void send_error_for(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
    if (req.path.rfind("/v1/messages", 0) == 0) return send_anthropic_error(res, error);
    send_error(res, error);
}

ApiError status_error(int status, std::string message, std::string type, std::string code) {
    ApiError e;
    e.status = status;
    e.message = std::move(message);
    e.type = std::move(type);
    e.code = std::move(code);
    return e;
}

}  // namespace

struct Server::Impl {
    Impl(Engine& e, ServerOptions o) : engine(e), opt(std::move(o)) {}

    Engine& engine;
    ServerOptions opt;
    httplib::Server http;
    HttpCounters counters;
    RequestRegistry registry;
    std::unique_ptr<GenerationRoutes> routes;
    const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    int64_t created = static_cast<int64_t>(std::time(nullptr));

    std::mutex mu;
    std::condition_variable cv;
    bool stop_requested = false;   // guarded by mu
    bool listen_done = false;      // guarded by mu
    bool bound = false;

    void setup();
    void watch_for_stop();
};

void Server::Impl::setup() {
    GenerationContext g;
    g.engine = &engine;
    g.counters = &counters;
    g.registry = &registry;
    g.limits.thinking_default = opt.thinking_default;
    g.limits.n_vocab = std::min<int64_t>(engine.tokenizer().n_vocab(), engine.model().config().n_vocab);
    g.model_name = opt.model_name;
    g.id_nonce = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    routes = std::make_unique<GenerationRoutes>(std::move(g));

    // Every request that waits for a slot holds an HTTP thread, so the pool must cover the running and the
    // queued ones plus a few for /health and /metrics; beyond that httplib queues connections itself.
    int threads = opt.http_threads;
    if (threads <= 0) {
        threads = engine.options().n_slots + static_cast<int>(engine.options().max_queue) + 8;
        threads = std::min(threads, 1024);
    }
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_keep_alive_timeout(opt.keep_alive_seconds);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    http.set_tcp_nodelay(true);
    // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and silently share
    // its traffic. SO_REUSEADDR alone still allows a quick restart (TIME_WAIT) but makes a port clash an error.
    http.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (opt.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), opt.api_key)) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        // Anthropic's clients send the key as x-api-key.
        const std::string x_api_key = req.get_header_value("x-api-key");
        if (!x_api_key.empty() && same_secret(x_api_key, opt.api_key)) return httplib::Server::HandlerResponse::Unhandled;
        res.set_header("WWW-Authenticate", "Bearer");
        send_error_for(req, res, status_error(401,
                                     auth.empty() && x_api_key.empty()
                                         ? "missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                         : "incorrect API key provided",
                                     "invalid_request_error", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });

    // httplib answers some errors itself with an empty body (unknown path, oversized body, unparseable
    // request): give them OpenAI-style JSON too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_length_ > 0) return httplib::Server::HandlerResponse::Unhandled;
        switch (res.status) {
            case 404:
                send_error_for(req, res, status_error(404, "unknown endpoint", "invalid_request_error", "not_found"));
                break;
            case 413:
                send_error_for(req, res, status_error(413,
                                             "the request body is larger than the server's limit of " +
                                                 std::to_string(opt.max_body_bytes) + " bytes",
                                             "invalid_request_error", "request_too_large"));
                break;
            default:
                send_error_for(req, res, status_error(res.status, "the request could not be processed (HTTP " +
                                                             std::to_string(res.status) + ")",
                                             res.status >= 500 ? "server_error" : "invalid_request_error", ""));
        }
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, status_error(500, "internal error: " + what, "server_error", "internal_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        counters.count_request(endpoint_label(req.path), res.status);
        if (opt.verbose) std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });

    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { routes->chat(req, res); });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { routes->completions(req, res); });
    // The Anthropic Messages API, the OpenAI Responses API and the chat page (their own files).
    http.Post("/v1/messages",
              [this](const httplib::Request& req, httplib::Response& res) { anthropic_messages(*routes, req, res); });
    http.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
        anthropic_count_tokens(*routes, req, res);
    });
    http.Post("/v1/responses",
              [this](const httplib::Request& req, httplib::Response& res) { responses_create(*routes, req, res); });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) { send_chat_page(res); });
    for (const char* path :
         {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"}) {
        http.Get(path, [](const httplib::Request& req, httplib::Response& res) {
            send_error_for(req, res, status_error(405, "use POST for this endpoint", "invalid_request_error",
                                                  "method_not_allowed"));
        });
    }
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200, models_json(opt.model_name, created, engine.options().n_ctx));
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        if (id != opt.model_name) {
            return send_error(res, status_error(404, "the model '" + id + "' does not exist; this server serves '" +
                                                         opt.model_name + "'",
                                                "invalid_request_error", "model_not_found"));
        }
        send_json(res, 200, models_json(opt.model_name, created, engine.options().n_ctx)["data"][0]);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        const EngineStats st = engine.stats();
        const bool stopping = registry.closed();
        send_json(res, stopping ? 503 : 200,
                  json{{"status", stopping ? "shutting_down" : "ok"},
                       {"model", opt.model_name},
                       {"slots", engine.options().n_slots},
                       {"requests_running", st.running},
                       {"queue_depth", st.queue_depth}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        ProcessStats proc;
        proc.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        proc.heap_allocated_bytes = heap_allocated_bytes();
        res.set_content(render_metrics(engine.stats(), counters.snapshot(), proc), "text/plain; version=0.0.4");
    });
}

// Runs beside listen(): once stop() is asked, cancel everything in flight, then stop the listener. httplib's
// stop() only works once the listener runs, so wait for that (or for listen() to have given up).
void Server::Impl::watch_for_stop() {
    {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop_requested || listen_done; });
        if (listen_done) return;
    }
    for (uint64_t id : registry.close()) engine.cancel(id);
    // Give the cancelled requests a moment to tell their clients (an error event, a 503) before the
    // listener stops and httplib cuts the remaining streams off.
    const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (registry.size() > 0 && std::chrono::steady_clock::now() < drain_until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(mu);
            if (listen_done) return;
        }
        if (http.is_running()) {
            http.stop();
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

Server::Server(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
    impl_->setup();
}

Server::~Server() {
    stop();
}

Result<int> Server::bind() {
    Impl& s = *impl_;
    int port = s.opt.port;
    if (port == 0) {
        port = s.http.bind_to_any_port(s.opt.host);
        if (port < 0) return make_error("cannot listen on " + s.opt.host + " (any port)");
    } else if (!s.http.bind_to_port(s.opt.host, port)) {
        return make_error("cannot listen on " + s.opt.host + ":" + std::to_string(port) +
                          " (address in use or not available)");
    }
    s.bound = true;
    return port;
}

Status Server::run() {
    Impl& s = *impl_;
    if (!s.bound) return make_error("Server::run called before bind");
    std::atomic<bool> engine_stop{false};
    std::thread engine_thread([&] {
        while (!engine_stop.load()) {
            if (!s.engine.step()) s.engine.wait_for_work(engine_stop, 100);
        }
    });
    std::thread watcher([&] { s.watch_for_stop(); });

    const bool ok = s.http.listen_after_bind();
    {
        std::lock_guard<std::mutex> lk(s.mu);
        s.listen_done = true;
    }
    s.cv.notify_all();
    watcher.join();
    // Every handler has returned; requests still in the engine have no reader any more.
    for (uint64_t id : s.registry.close()) s.engine.cancel(id);
    engine_stop = true;
    s.engine.notify();
    engine_thread.join();
    bool asked;
    {
        std::lock_guard<std::mutex> lk(s.mu);
        asked = s.stop_requested;
    }
    if (!ok && !asked) return make_error("the HTTP listener failed");
    return {};
}

void Server::stop() {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->stop_requested = true;
    }
    impl_->cv.notify_all();
}

}  // namespace dsv4::server
