// OpenAI Responses API requests (POST /v1/responses): `input` (a string, or items: messages, function_call,
// function_call_output, reasoning), `instructions`, function tools, tool_choice, reasoning, text.format,
// max_output_tokens and sampling, checked and translated into the ChatRequest a chat completion becomes, so
// the Responses API shares the chat path's rendering and generation. No HTTP and no engine here.
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace dsv4::server {

struct ResponsesRequest {
    ChatRequest chat;
    // Request fields a response object repeats (instructions, max_output_tokens, tools, tool_choice,
    // temperature, top_p, parallel_tool_calls, metadata), in the response's order.
    nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

ApiResult<ResponsesRequest> parse_responses_request(const nlohmann::ordered_json& body, const RequestLimits& limits);

}  // namespace dsv4::server
