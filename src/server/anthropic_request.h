// Anthropic Messages API requests (POST /v1/messages, /v1/messages/count_tokens): a parsed JSON body is
// checked against Anthropic's shape and translated into the same ChatRequest an OpenAI chat completion
// becomes (system, messages with text / tool_use / tool_result / thinking blocks, tools, tool_choice,
// thinking, stop_sequences, sampling), so both APIs share one prompt rendering and one generation path.
// Also Anthropic's error body. No HTTP and no engine here.
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace dsv4::server {

// for_count_tokens: max_tokens is not required (count_tokens takes no generation settings).
ApiResult<ChatRequest> parse_messages_request(const nlohmann::ordered_json& body, const RequestLimits& limits,
                                              bool for_count_tokens);

// {"type": "error", "error": {"type": "invalid_request_error" | "authentication_error" | ..., "message"}},
// the type chosen from the HTTP status as Anthropic does.
nlohmann::ordered_json anthropic_error_json(const ApiError& error);

}  // namespace dsv4::server
