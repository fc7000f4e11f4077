// OpenAI request validation: a parsed JSON body becomes a checked request struct (chat completion or text
// completion), or an ApiError that the HTTP layer sends as OpenAI's error body
// {"error": {"message", "type", "param", "code"}}. No HTTP and no engine here, so every rule is unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "server/output_constraint.h"
#include "tokenizer/chat_format.h"

namespace dsv4::server {

// One failed request: HTTP status plus the fields of OpenAI's error object. Empty param / code become null.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;
    std::string code;
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

// Shared by the request parsers of every API (OpenAI, Anthropic, Responses): a check's result (an error or
// nothing), the early return on an error, and a field read as "not given" when it is absent or JSON null.
using MaybeError = std::optional<ApiError>;
#define DSV4_API_TRY(expr)                                                 \
    do {                                                                   \
        if (::dsv4::server::MaybeError api_try_e_ = (expr)) return std::move(*api_try_e_); \
    } while (0)
const nlohmann::ordered_json* find_field(const nlohmann::ordered_json& obj, std::string_view key);
// {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
nlohmann::ordered_json error_json(const ApiError& error);

// A value or the ApiError explaining why there is none (Result<T> with an HTTP status and a param).
template <class T>
class [[nodiscard]] ApiResult {
public:
    ApiResult(T value) : v_(std::move(value)) {}
    ApiResult(ApiError error) : v_(std::move(error)) {}
    bool ok() const { return v_.index() == 0; }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    const ApiError& error() const { return std::get<1>(v_); }

private:
    std::variant<T, ApiError> v_;
};

// What request parsing needs to know about the server and the model.
struct RequestLimits {
    bool thinking_default = false;  // thinking mode when the request does not choose
    int64_t n_vocab = 0;            // logit_bias / token prompts must name ids below this
    size_t max_stop_strings = 16;
};

// The fields chat and text completions share.
struct GenerationParams {
    std::string model;                // must be one of the served ids when given (checked by the route)
    SamplingParams sampling;
    bool seed_given = false;          // otherwise the server picks a random seed
    int64_t max_tokens = -1;          // -1: until the context is full
    std::vector<std::string> stop;
    bool logprobs = false;
    int top_logprobs = 0;
    bool stream = false;
    bool include_usage = false;       // stream_options.include_usage
};

enum class ToolChoice { none, automatic, required, named };

struct ChatRequest {
    GenerationParams gen;
    // The conversation, normalised to what chat::encode_messages takes (string contents, known fields only)
    // with the request-level tools / response_format attached to the system message.
    nlohmann::ordered_json messages;
    chat::ChatOptions chat;
    ToolChoice tool_choice = ToolChoice::automatic;
    std::string tool_name;            // tool_choice named: the function to call
    size_t n_tools = 0;               // tools rendered into the prompt
    // Assistant text the prompt ends with, which the model continues (chat mode with tool_choice required or
    // named: the opening of a DSML tool-call block). The response parser reads it before the generated text.
    std::string forced_prefix;
    // The grammar the answer is held to (response_format, forced or strict tool calls): server/output_constraint.h.
    OutputGrammar output;
};

struct CompletionRequest {
    GenerationParams gen;
    bool prompt_is_tokens = false;
    std::string prompt_text;
    std::vector<int32_t> prompt_tokens;
    bool echo = false;                // prepend the prompt text (and with logprobs, the prompt's logprobs)
};

// The body as JSON (key order kept: tool schemas are rendered in their original order).
ApiResult<nlohmann::ordered_json> parse_json_body(std::string_view body);

ApiResult<ChatRequest> parse_chat_request(const nlohmann::ordered_json& body, const RequestLimits& limits);
ApiResult<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body, const RequestLimits& limits);

// The prompt text of a chat request: the DeepSeek-V4 rendering of its messages plus any forced prefix.
ApiResult<std::string> render_chat_prompt(const ChatRequest& request);

// Decides max_tokens against the context: the request's value, or when it gave none the room left, capped at
// `default_max_tokens` (> 0; 0: no cap). Errors (400, code context_length_exceeded) when the prompt alone fills
// the context (unless max_tokens is 0: a prompt only scored may fill it) or prompt + max_tokens exceeds it. `param` names the field the message blames.
ApiResult<int64_t> fit_context(int64_t prompt_tokens, int64_t max_tokens, int64_t n_ctx, const std::string& param,
                               int64_t default_max_tokens = 0);

// OpenAI's answer for a `model` the server does not serve: 404, code model_not_found, naming the served ids.
ApiError model_not_found(const std::string& model, const std::vector<std::string>& served);

}  // namespace dsv4::server
