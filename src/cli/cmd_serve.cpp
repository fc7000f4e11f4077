// `dsv4 serve`: load a model and serve the OpenAI-compatible HTTP API (server/server.h) until SIGINT or
// SIGTERM, then shut down gracefully (stop accepting, cancel running requests, exit 0).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate.h"
#include "cli/synth_options.h"

#if defined(DSV4_HAVE_SERVER)
#include <csignal>
#include <ctime>
#include <thread>
#include <atomic>

#include <pthread.h>

#include "model/deepseek4.h"
#include "runtime/engine.h"
#include "runtime/slot_plan.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#endif

namespace dsv4::cli {

#if defined(DSV4_HAVE_SERVER)

namespace {

// The model's name: general.name from the file, else the file name without .gguf.
std::string model_name(const Model& m, const std::string& path) {
    auto name = m.file().get_str("general.name");
    if (name.ok() && !name->empty()) return *name;
    std::string base = path.substr(path.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
    return base;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
    CLI::App app{"Serve the OpenAI-compatible HTTP API (chat/completions, completions, models, health, metrics)"};
    ModelOptions mo;
    std::string thinking = "off", prefix_cache = "on";
    std::vector<std::string> aliases;
    server::ServerOptions so;
    EngineOptions eo;
    eo.max_queue = 64;
    int64_t ctx = 0;
    DeviceOptions dev;
    add_model_options(app, mo, false);
    SynthOptions synth;
    add_synth_options(app, synth, "serve");
    app.add_option("--host", so.host, "address to listen on")->capture_default_str();
    app.add_option("--port", so.port, "port to listen on (0: any free port)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    app.add_option("-c,--ctx", ctx, "context size per request in tokens (0: min(4096, the model's))")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
    int parallel = 0;
    app.add_option("-p,--parallel", parallel,
                   "requests decoded at once (KV-cache slots; default 64 on a GPU, where the sequences of a step share "
                   "its weight reads, 4 on the CPU; lowered to what memory holds)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' on /v1/* (also: DSV4_API_KEY)")
        ->envname("DSV4_API_KEY");
    app.add_option("--thinking-default", thinking, "thinking mode for chat requests that do not choose")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    std::string kv_memory;
    app.add_option("--kv-memory", kv_memory,
                   "memory the KV-cache slots may take, e.g. 40G or 512M (default: what the device or host has "
                   "free beside the weights, less room for a step's activations); --parallel is lowered to what "
                   "fits, and the other requests wait in the queue");
    app.add_option("--max-queue", eo.max_queue, "requests waiting for a slot before new ones get HTTP 429")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    app.add_option("--max-body-bytes", so.max_body_bytes, "largest request body accepted (larger: HTTP 413)")
        ->capture_default_str()
        ->check(CLI::Range(1024, 1 << 30));
    app.add_option("--alias", aliases,
                   "model ids to serve, comma-separated or repeated; the first is reported in responses, and a "
                   "request's 'model' must be one of them (default: the file's general.name)")
        ->delimiter(',');
    app.add_option("--default-max-tokens", so.default_max_tokens,
                   "tokens generated for requests that set no max_tokens (0: the rest of the context)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
    app.add_option("--max-connections", so.max_connections,
                   "open connections at most; beyond this new ones get HTTP 503 at once")
        ->capture_default_str()
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    app.add_option("--header-timeout-ms", so.header_timeout_ms,
                   "time a request's line and headers may take to arrive (then HTTP 408)")
        ->capture_default_str()
        ->check(CLI::Range(100, 3600 * 1000));
    app.add_option("--body-timeout-ms", so.body_timeout_ms, "time a request body may take after its headers (then 408)")
        ->capture_default_str()
        ->check(CLI::Range(100, 3600 * 1000));
    app.add_option("--keep-alive", so.keep_alive_seconds, "seconds an idle keep-alive connection stays open")
        ->capture_default_str()
        ->check(CLI::Range(1, 3600));
    app.add_option("--keep-alive-requests", so.keep_alive_max_requests, "requests served on one connection at most")
        ->capture_default_str()
        ->check(CLI::Range(size_t(1), size_t(1) << 30));
    app.add_option("--host-allow", so.host_allow,
                   "Host header names accepted besides the loopback ones, comma-separated ('*': any); when "
                   "listening beyond the loopback, only these (if given)")
        ->delimiter(',');
    app.add_option("--cors-origin", so.cors_origins,
                   "origins allowed to call the API from a browser (CORS), comma-separated, e.g. "
                   "http://localhost:3000 ('*': any); none by default")
        ->delimiter(',');
    app.add_option("--prefix-cache", prefix_cache, "reuse the state of shared prompt prefixes")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}));
    app.add_flag("-v,--verbose", so.verbose, "log every request to stderr");
    std::string speculative;
    add_speculative_option(app, speculative);
    add_device_options(app, dev);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    if (mo.path.empty() == synth.preset.empty()) return fail("give exactly one of -m MODEL or --synth PRESET");
    if (!synth.preset.empty() && synth.vocab_path.empty())
        return fail("--synth needs --vocab FILE: a server needs the tokenizer of a GGUF that has one");
    if (!synth.vocab_path.empty() && synth.preset.empty()) return fail("--vocab gives a --synth model its tokenizer");
    if (!mo.mtp.empty() && mo.path.empty()) return fail("--mtp attaches a sidecar to -m MODEL, not to --synth");
    if (!kv_memory.empty()) {
        auto bytes = parse_byte_size(kv_memory);
        if (!bytes.ok()) return fail("--kv-memory: " + bytes.error());
        eo.kv_memory = *bytes;
    }
    so.thinking_default = thinking == "on";
    eo.prefix_cache = prefix_cache == "on";

    // SIGINT/SIGTERM are taken by a waiting thread (sigwait), never by an async handler: block them before
    // any thread starts so that every thread inherits the mask. A write to a closed socket must fail with
    // EPIPE rather than kill the process.
    std::signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    auto backend = make_backend(dev);
    if (!backend.ok()) return fail(backend.error());
    auto model = synth.preset.empty() ? load_model(mo, **backend, true)
                                      : make_synth_model(synth, **backend, dev.threads, true);
    if (!model.ok()) return fail(model.error());
    auto tok = Tokenizer::from_gguf((*model)->file());
    if (!tok.ok()) return fail("the model file has no usable tokenizer: " + tok.error());

    auto drafts = speculative_drafts(speculative, **model);
    if (!drafts.ok()) return fail(drafts.error());
    eo.speculative = *drafts;
    const int64_t n_ctx_train = (*model)->config().n_ctx_train;
    eo.n_ctx = ctx > 0 ? ctx : (n_ctx_train > 0 ? std::min<int64_t>(4096, n_ctx_train) : 4096);
    if (n_ctx_train > 0 && eo.n_ctx > n_ctx_train) {
        std::fprintf(stderr, "dsv4 serve: warning: --ctx %lld is beyond the model's training context %lld\n",
                     (long long)eo.n_ctx, (long long)n_ctx_train);
    }
    so.model_ids = aliases.empty() ? std::vector<std::string>{model_name(**model, mo.path.empty() ? "synth-" + synth.preset : mo.path)} : aliases;

    eo.n_slots = parallel > 0 ? parallel : (*backend)->is_host() ? 4 : 64;
    auto plan = plan_slots(**model, eo);
    if (!plan.ok()) return fail(plan.error());
    if (plan->slots < eo.n_slots) {
        std::fprintf(stderr, "dsv4 serve: %s\n", describe_slot_limit(*plan, eo).c_str());
        eo.n_slots = plan->slots;
    }
    Engine engine(**model, **tok, eo);
    server::Server srv(engine, so);
    auto port = srv.bind();
    if (!port.ok()) return fail(port.error());

    std::atomic<bool> done{false};
    std::thread signals([&] {
        const timespec poll = {0, 200 * 1000 * 1000};
        bool stopping = false;
        while (!done.load()) {
            const int sig = sigtimedwait(&stop_signals, nullptr, &poll);
            if (sig != SIGINT && sig != SIGTERM) continue;
            if (stopping) {
                // A second signal while draining: the user wants out now.
                std::fprintf(stderr, "dsv4 serve: second signal, exiting immediately\n");
                std::_Exit(130);
            }
            stopping = true;
            std::fprintf(stderr, "dsv4 serve: %s received, shutting down (again to exit at once)\n",
                         sig == SIGINT ? "SIGINT" : "SIGTERM");
            srv.stop();
        }
    });

    const std::string source = synth.preset.empty() ? mo.path : "random weights, preset " + synth.preset;
    std::printf("dsv4 serve: model '%s' (%s), %d slots x %lld tokens on %s\n", so.model_ids.front().c_str(),
                source.c_str(), eo.n_slots, (long long)eo.n_ctx, (*backend)->name());
    const bool v6 = so.host.find(':') != std::string::npos;
    std::printf("dsv4 serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", so.host.c_str(), v6 ? "]" : "", *port);
    std::fflush(stdout);

    Status st = srv.run();
    done = true;
    signals.join();
    if (!st.ok()) return fail(st.error());
    std::fprintf(stderr, "dsv4 serve: stopped\n");
    return 0;
}

#else

int cmd_serve(int, char**) {
    return fail("this dsv4 was built without the HTTP server (DSV4_MINIMAL): rebuild without it to use 'serve'");
}

#endif

}  // namespace dsv4::cli
