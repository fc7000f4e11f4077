// The server layer without a socket, for the server tests: an engine stepped by its own thread, as `dsv4
// serve` runs it, and the generation routes on top (their handlers are called directly). Header-only: only
// the tests that link the server library include it.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "server/generation.h"
#include "server/metrics.h"

namespace dsv4::test {

class ServedEngine {
public:
    ServedEngine(Model& m, const Tokenizer& tok, const EngineOptions& eo) {
        engine_ = std::make_unique<Engine>(m, tok, eo);
        server::GenerationContext g;
        g.engine = engine_.get();
        g.counters = &counters_;
        g.registry = &registry_;
        g.limits.n_vocab = std::min<int64_t>(tok.n_vocab(), m.config().n_vocab);
        g.model_ids = {"synth-tiny"};
        routes_ = std::make_unique<server::GenerationRoutes>(g);
        loop_ = std::thread([this] {
            while (!stop_.load())
                if (!engine_->step()) engine_->wait_for_work(stop_, 50);
        });
    }
    ~ServedEngine() {
        stop_ = true;
        engine_->notify();
        loop_.join();
    }
    ServedEngine(const ServedEngine&) = delete;
    ServedEngine& operator=(const ServedEngine&) = delete;

    Engine& engine() { return *engine_; }
    server::GenerationRoutes& routes() { return *routes_; }
    std::string metrics() const {
        return server::render_metrics(engine_->stats(), counters_.snapshot(), server::ProcessStats{});
    }

private:
    std::unique_ptr<Engine> engine_;
    server::HttpCounters counters_;
    server::RequestRegistry registry_;
    std::unique_ptr<server::GenerationRoutes> routes_;
    std::atomic<bool> stop_{false};
    std::thread loop_;
};

}  // namespace dsv4::test
