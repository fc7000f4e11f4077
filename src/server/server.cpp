// The HTTP server (see server.h): cpp-httplib setup, routes, the checks every request passes first (Host,
// Origin, CORS preflight, the API key as a bearer token or x-api-key, JSON bodies), JSON error bodies for
// everything httplib or the connection front answers by itself (404, 413, ...; Anthropic's shape under
// /v1/messages, OpenAI's elsewhere), the request log, the engine loop thread, and the stop sequence: close the
// registry and cancel what is in flight, stop the connection front, let handlers drain, stop the engine.
#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
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
#include "server/anthropic_request.h"
#include "server/chat_page.h"
#include "server/event_channel.h"
#include "server/exchange.h"
#include "server/generation.h"
#include "server/http_front.h"
#include "server/http_guard.h"
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

// Anthropic's endpoints answer errors in Anthropic's body shape, everything else in OpenAI's: the checks
// before the routes, httplib's own errors and the connection front's all go through these two.
bool anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

void send_error_for(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
    if (anthropic_path(req.path)) return send_anthropic_error(res, error);
    send_error(res, error);
}

// The bearer token of an Authorization header; the scheme name is case-insensitive (RFC 9110 11.1).
bool bearer_token(const std::string& auth, std::string& token) {
    if (auth.size() < 7) return false;
    for (size_t i = 0; i < 6; ++i)
        if (std::tolower(static_cast<unsigned char>(auth[i])) != "bearer"[i]) return false;
    if (auth[6] != ' ') return false;
    size_t start = 7;
    while (start < auth.size() && auth[start] == ' ') ++start;
    token = auth.substr(start);
    return true;
}

// httplib's Server with its one-request entry point open to the connection front.
class RoutedServer : public httplib::Server {
public:
    bool serve_one(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
        return process_request(stream, close_connection, connection_closed, nullptr);
    }
    // httplib ends a chunked (streaming) response early once its own listening socket reads as closed. The
    // front owns the real socket, so this only marks the server as open (the value is never used as a socket)
    // or, at shutdown, as closed, which ends the streams still running as httplib's own stop() would.
    void set_open(bool open) { svr_sock_ = open ? 0 : INVALID_SOCKET; }
};

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
    RoutedServer http;
    std::unique_ptr<HttpFront> front;
    BrowserPolicy policy;
    HttpCounters counters;
    RequestRegistry registry;
    GrammarCache grammars{engine.tokenizer()};
    std::unique_ptr<GenerationRoutes> routes;
    const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    int64_t created = static_cast<int64_t>(std::time(nullptr));

    std::mutex mu;
    std::condition_variable cv;
    bool stop_requested = false;   // guarded by mu
    bool listen_done = false;      // guarded by mu
    bool bound = false;

    void setup();
    void setup_checks();
    void watch_for_stop();
    void log_exchange(const Exchange& ex) const;
};

void Server::Impl::setup() {
    GenerationContext g;
    g.engine = &engine;
    g.counters = &counters;
    g.registry = &registry;
    g.limits.thinking_default = opt.thinking_default;
    g.limits.n_vocab = std::min<int64_t>(engine.tokenizer().n_vocab(), engine.model().config().n_vocab);
    g.model_ids = opt.model_ids;
    g.default_max_tokens = opt.default_max_tokens;
    g.id_nonce = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    g.grammars = &grammars;
    routes = std::make_unique<GenerationRoutes>(std::move(g));

    // Every request that waits for a slot holds a worker, so the pool covers the running and the queued ones
    // plus a few for /health and /metrics; beyond that complete requests wait in the front's queue.
    int threads = opt.http_threads;
    if (threads <= 0) {
        threads = engine.options().n_slots + static_cast<int>(engine.options().max_queue) + 8;
        threads = std::min(threads, 1024);
    }
    // Connections stay with the front; httplib only parses complete requests, routes and writes answers.
    FrontOptions fo;
    fo.host = opt.host;
    fo.port = opt.port;
    const size_t files = raise_open_file_limit();
    fo.max_connections = std::min(opt.max_connections, files > 64 ? files - 64 : size_t(1));
    fo.header_timeout_ms = opt.header_timeout_ms;
    fo.body_timeout_ms = opt.body_timeout_ms;
    fo.keep_alive_timeout_ms = opt.keep_alive_seconds * 1000;
    fo.keep_alive_max_requests = opt.keep_alive_max_requests;
    fo.workers = threads;
    fo.head.max_body_bytes = opt.max_body_bytes;
    fo.error_body = [](const std::string& path, const ApiError& e) {
        return dump_json(anthropic_path(path) ? anthropic_error_json(e) : error_json(e));
    };
    front = std::make_unique<HttpFront>(fo, [this](httplib::Stream& strm, bool close_connection, bool& closed) {
        const bool ok = http.serve_one(strm, close_connection, closed);
        if (opt.verbose)
            if (const Exchange* ex = current_exchange()) log_exchange(*ex);
        return ok;
    });
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_keep_alive_timeout(opt.keep_alive_seconds);
    http.set_keep_alive_max_count(opt.keep_alive_max_requests);

    policy.loopback_hosts_only = is_loopback_address(opt.host);
    policy.host_allow = opt.host_allow;
    policy.cors_origins = opt.cors_origins;
    setup_checks();

    // httplib answers some errors itself with an empty body (unknown path, unparseable request; 413 only if
    // the front's head check was bypassed): give them JSON too, in the endpoint's shape.
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
    http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error_for(req, res, status_error(500, "internal error: " + what, "server_error", "internal_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        counters.count_request(endpoint_label(req.path), res.status);
        if (Exchange* ex = current_exchange()) {
            ex->method = req.method;
            ex->path = req.path;
            ex->status = res.status;
        }
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
        send_json(res, 200, models_json(opt.model_ids, created, engine.options().n_ctx));
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        if (std::find(opt.model_ids.begin(), opt.model_ids.end(), id) == opt.model_ids.end()) {
            return send_error(res, model_not_found(id, opt.model_ids));
        }
        send_json(res, 200, models_json(id, created, engine.options().n_ctx)["data"][0]);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        const EngineStats st = engine.stats();
        const bool stopping = registry.closed();
        send_json(res, stopping ? 503 : 200,
                  json{{"status", stopping ? "shutting_down" : "ok"},
                       {"model", opt.model_ids.front()},
                       {"slots", engine.options().n_slots},
                       {"requests_running", st.running},
                       {"queue_depth", st.queue_depth}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        ProcessStats proc;
        proc.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        proc.heap_allocated_bytes = heap_allocated_bytes();
        proc.http_connections_open = front->open_connections();
        res.set_content(render_metrics(engine.stats(), counters.snapshot(), proc), "text/plain; version=0.0.4");
    });
}

// Every request passes these before its route: the Host check (DNS rebinding), the Origin check (pages of
// other sites), the CORS preflight, the API key on /v1/*, and JSON-only POST bodies.
void Server::Impl::setup_checks() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        using R = httplib::Server::HandlerResponse;
        const std::string host = req.get_header_value("Host");
        if (!host_allowed(policy, host)) {
            send_error_for(req, res,
                           status_error(403, "the Host header '" + host.substr(0, 200) +
                                                 "' does not name this server; start it with --host-allow " +
                                                 host_name(host).substr(0, 200) + " to accept it",
                                        "invalid_request_error", "invalid_host"));
            return R::Handled;
        }
        const std::string origin = req.get_header_value("Origin");
        const OriginCheck oc = check_origin(policy, origin, host);
        if (oc == OriginCheck::refused) {
            send_error_for(req, res,
                           status_error(403, "cross-origin requests from '" + origin.substr(0, 200) +
                                                 "' are not allowed; start the server with --cors-origin " +
                                                 origin.substr(0, 200) + " to allow them",
                                        "invalid_request_error", "origin_not_allowed"));
            return R::Handled;
        }
        if (oc == OriginCheck::allowed) {
            res.set_header("Access-Control-Allow-Origin", origin);
            res.set_header("Vary", "Origin");
        }
        if (req.method == "OPTIONS") {
            res.status = 204;
            res.set_header("Allow", "GET, POST, OPTIONS");
            if (oc == OriginCheck::allowed) {
                res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                // Anthropic's browser clients send their key and API version in headers of their own.
                res.set_header("Access-Control-Allow-Headers",
                               "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
                res.set_header("Access-Control-Max-Age", "600");
            }
            return R::Handled;
        }
        if (!opt.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
            // The key comes as a bearer token (OpenAI's clients) or as x-api-key (Anthropic's); either may match.
            const std::string auth = req.get_header_value("Authorization");
            const std::string x_api_key = req.get_header_value("x-api-key");
            std::string token;
            const bool bearer_ok = bearer_token(auth, token) && same_secret(token, opt.api_key);
            const bool x_api_key_ok = !x_api_key.empty() && same_secret(x_api_key, opt.api_key);
            if (!bearer_ok && !x_api_key_ok) {
                res.set_header("WWW-Authenticate", "Bearer");
                send_error_for(req, res,
                               status_error(401,
                                            auth.empty() && x_api_key.empty()
                                                ? "missing API key: send it as 'Authorization: Bearer KEY' or "
                                                  "'x-api-key: KEY'"
                                                : "incorrect API key provided",
                                            "invalid_request_error", "invalid_api_key"));
                return R::Handled;
            }
        }
        if (req.method == "POST" && !is_json_media_type(req.get_header_value("Content-Type"))) {
            const std::string ct = req.get_header_value("Content-Type");
            send_error_for(req, res,
                           status_error(415,
                                        "the request body must be JSON sent as 'Content-Type: application/json' "
                                        "(got " +
                                            (ct.empty() ? std::string("none") : "'" + ct.substr(0, 100) + "'") + ")",
                                        "invalid_request_error", "unsupported_media_type"));
            return R::Handled;
        }
        return R::Unhandled;
    });
}

// One line per request (-v): method, path, status, latency from the complete request to the end of the
// answer, and for generations the prompt, output and prefix-cache-hit token counts.
void Server::Impl::log_exchange(const Exchange& ex) const {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ex.received).count();
    char usage[128] = "";
    if (ex.prompt_tokens >= 0) {
        std::snprintf(usage, sizeof(usage), " prompt=%lld output=%lld cached=%lld", (long long)ex.prompt_tokens,
                      (long long)ex.completion_tokens, (long long)ex.cached_tokens);
    }
    std::fprintf(stderr, "dsv4 serve: %s %s %d %.1f ms%s\n", ex.method.c_str(), ex.path.c_str(), ex.status, ms,
                 usage);
}

// Runs beside the front: once stop() is asked, cancel everything in flight, give the cancelled requests a
// moment to tell their clients (an error event, a 503), then stop the front.
void Server::Impl::watch_for_stop() {
    {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop_requested || listen_done; });
        if (listen_done) return;
    }
    for (uint64_t id : registry.close()) engine.cancel(id);
    const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (registry.size() > 0 && std::chrono::steady_clock::now() < drain_until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    http.set_open(false);
    front->stop();
}

Server::Server(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
    impl_->setup();
}

Server::~Server() {
    stop();
}

Result<int> Server::bind() {
    Impl& s = *impl_;
    auto port = s.front->bind();
    if (!port.ok()) return port;
    s.http.set_open(true);
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

    Status st = s.front->run();
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
    return st;
}

void Server::stop() {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->stop_requested = true;
    }
    impl_->cv.notify_all();
}

}  // namespace dsv4::server
