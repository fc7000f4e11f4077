// The two generating endpoints, POST /v1/chat/completions and POST /v1/completions: validate, render and
// tokenize the prompt, submit it to the engine, then either wait for the whole answer or stream it as
// server-sent events. A client that goes away cancels its request, streaming or not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "server/event_channel.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace dsv4::server {

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body);
void send_error(httplib::Response& res, const ApiError& error);

struct GenerationContext {
    Engine* engine = nullptr;
    HttpCounters* counters = nullptr;
    RequestRegistry* registry = nullptr;
    RequestLimits limits;
    std::vector<std::string> model_ids;  // served ids; the first is reported in responses
    int64_t default_max_tokens = 0;       // for requests without max_tokens (0: the rest of the context)
    uint64_t id_nonce = 0;  // makes response ids unique across server runs
};

class GenerationRoutes {
public:
    explicit GenerationRoutes(GenerationContext ctx) : ctx_(std::move(ctx)) {}

    void chat(const httplib::Request& req, httplib::Response& res);
    void completions(const httplib::Request& req, httplib::Response& res);

    struct Job;  // one engine request as a handler sees it (generation.cpp)

private:
    struct ChatState;
    struct TextState;

    // Submit; the error is 400 (bad sampling values), 429 (queue full) or 503 (shutting down).
    ApiResult<std::shared_ptr<Job>> start(std::vector<int32_t> prompt, const GenerationParams& gen,
                                          int64_t max_tokens, const char* id_prefix);
    // The 404 for a `model` this server does not serve (absent is fine).
    ApiResult<bool> check_model(const GenerationParams& gen) const;
    // Waits for a non-streaming request's events; cancels it when the client's connection closes (then
    // returns false: there is nobody to answer).
    template <class Apply>
    bool collect(Job& job, Apply apply);
    ChatDelta apply(ChatState& st, const TokenEvent& ev);
    std::string apply(TextState& st, const TokenEvent& ev);
    bool pump_chat(ChatState& st, httplib::DataSink& sink);
    bool pump_text(TextState& st, httplib::DataSink& sink);
    void end_stream(Job& job);
    const Tokenizer& tok() const { return ctx_.engine->tokenizer(); }

    GenerationContext ctx_;
};

}  // namespace dsv4::server
