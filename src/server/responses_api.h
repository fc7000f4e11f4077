// POST /v1/responses (the OpenAI Responses API) on the shared chat path: the request becomes a ChatRequest
// (responses_request.h); the answer is a response object whose output items are reasoning, message and
// function_call, or, streaming, the Responses event sequence (response.created, response.output_item.*,
// response.output_text.delta, response.reasoning_text.delta, response.function_call_arguments.delta,
// response.completed).
#pragma once

#include <memory>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/generation.h"

namespace dsv4::server {

void responses_create(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res);

// The response object; status "in_progress" (before the end: empty output, null usage), "completed",
// "incomplete" (max_output_tokens or the context cut it) or "failed".
nlohmann::ordered_json responses_object(const ChatRun& run, const nlohmann::ordered_json& echo, const char* status);
// The streaming event writer; `echo`: the request fields every response object repeats.
std::shared_ptr<ChatStreamWriter> responses_stream_writer(nlohmann::ordered_json echo);

}  // namespace dsv4::server
