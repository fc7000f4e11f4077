// The generating endpoints' shared path: validate, render and tokenize the prompt, submit it to the engine,
// then either wait for the whole answer or stream it as server-sent events (a client that goes away cancels
// its request, streaming or not). POST /v1/chat/completions and /v1/completions live here; the other chat APIs
// (anthropic_messages.cpp, responses_api.cpp) parse their own requests into a ChatRequest and bring a
// ChatStreamWriter for their event format, so all three run one generation path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/grammar_cache.h"
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
    GrammarCache* grammars = nullptr;     // compiled output grammars, shared across requests
};

// One engine request as a handler sees it.
struct Job {
    uint64_t id = 0;
    std::shared_ptr<EventChannel> channel;
    ResponseMeta meta;
    bool finished = false;
    GenerationEnd end = GenerationEnd::none;
    std::string error;
    Usage usage;
    int32_t stop_index = -1;  // the stop string that ended it
};

// How a chat generation ended, in the terms every chat API maps onto its own names.
enum class ChatOutcome { end_turn, stop_sequence, length, tool_calls };

// One chat generation as every chat API sees it (OpenAI chat completions, Anthropic messages, OpenAI
// responses): the engine request and its text parsed into reasoning, content and tool calls.
struct ChatRun {
    std::shared_ptr<Job> job;
    ChatAccumulator acc;
    std::vector<std::string> stop;             // the request's stop strings (to name the one that matched)
    int64_t n_prompt = 0;                      // prompt tokens (usage before the end reports them)
    bool logprobs = false;
    nlohmann::ordered_json pending_logprobs = nlohmann::ordered_json::array();  // not yet sent / all (blocking)
    bool opened = false;                       // the stream's opening bytes went out

    bool failed() const { return job->end == GenerationEnd::cancelled || job->end == GenerationEnd::error; }
    ChatOutcome outcome() const;
    // The stop string that ended the generation, or "" when none did.
    std::string stop_sequence() const;
};

// One API's wire format for a streamed chat answer; each call returns the bytes to send.
class ChatStreamWriter {
public:
    virtual ~ChatStreamWriter() = default;
    virtual std::string open(ChatRun& run) = 0;                         // at once, before any token
    virtual std::string delta(ChatRun& run, const ChatDelta& d) = 0;    // newly decided text / tool calls
    virtual std::string close(ChatRun& run) = 0;                        // the generation ended normally
    virtual std::string fail(ChatRun& run, const ApiError& error) = 0;  // it was cancelled or failed
};

// The error a request that did not end normally reports (cancelled: the server is stopping).
ApiError end_error(GenerationEnd end, const std::string& message);
// The answer to a non-streaming request whose client left (499): nobody reads it, but the request log and
// /metrics show it as the client's doing rather than an error of the server's.
ApiError client_gone_error();

class GenerationRoutes {
public:
    explicit GenerationRoutes(GenerationContext ctx) : ctx_(std::move(ctx)) {}

    void chat(const httplib::Request& req, httplib::Response& res);
    void completions(const httplib::Request& req, httplib::Response& res);

    // The 404 (code model_not_found) for a `model` this server does not serve (absent is fine).
    ApiResult<bool> check_model(const GenerationParams& gen) const;
    // The shared chat path. chat_prompt: the prompt ids of a parsed chat request. start_chat checks the
    // request's model, fits the prompt into the context (a request without max_tokens gets the room left,
    // capped at --max-tokens-default) and submits; `prompt_param` names the field a context error blames.
    ApiResult<std::vector<int32_t>> chat_prompt(const ChatRequest& r) const;
    ApiResult<std::shared_ptr<ChatRun>> start_chat(const ChatRequest& r, const char* id_prefix,
                                                   const std::string& prompt_param);
    // Blocks until the generation ends (the run then holds the whole message). Returns false when the
    // client's connection closed first: the request was cancelled and nobody is left to answer
    // (client_gone_error() is what the log should show).
    bool collect_chat(ChatRun& run);
    // Streams the run as server-sent events in the writer's format; a client going away cancels it.
    void stream_chat(httplib::Response& res, std::shared_ptr<ChatRun> run, std::shared_ptr<ChatStreamWriter> writer);

    const GenerationContext& context() const { return ctx_; }
    std::string id_hex(uint64_t x) const;

private:
    struct TextState;

    // Submit; the error is 400 (bad sampling values), 429 (queue full) or 503 (shutting down). score_prompt:
    // the engine also reports the prompt tokens' logprobs (GenerationRequest::prompt_logprobs).
    ApiResult<std::shared_ptr<Job>> start(std::vector<int32_t> prompt, const GenerationParams& gen,
                                          int64_t max_tokens, const char* id_prefix, GrammarConstraint constraint = {},
                                          bool score_prompt = false);
    // Waits for a non-streaming request's events; cancels it when the client's connection closes (then
    // returns false: there is nobody to answer).
    template <class Apply>
    bool collect(Job& job, Apply apply);
    ChatDelta apply(ChatRun& run, const TokenEvent& ev);
    std::string apply(TextState& st, const TokenEvent& ev);
    bool pump_chat(ChatRun& run, ChatStreamWriter& writer, httplib::DataSink& sink);
    bool pump_text(TextState& st, httplib::DataSink& sink);
    std::string echo_chunk(TextState& st);
    void end_stream(Job& job);
    const Tokenizer& tok() const { return ctx_.engine->tokenizer(); }

    GenerationContext ctx_;
};

}  // namespace dsv4::server
