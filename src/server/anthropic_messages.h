// POST /v1/messages and POST /v1/messages/count_tokens (the Anthropic Messages API) on the shared chat path:
// the request becomes a ChatRequest (anthropic_request.h), the answer a message object or Anthropic's stream
// of events (message_start, content_block_start / _delta / _stop, message_delta, message_stop, ping).
#pragma once

#include <memory>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/generation.h"

namespace dsv4::server {

void anthropic_messages(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res);
void anthropic_count_tokens(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res);
void send_anthropic_error(httplib::Response& res, const ApiError& error);

// Anthropic's names: stop_reason from how the generation ended, usage from the engine's counts (input_tokens
// leaves out the prompt tokens read from the prefix cache, which cache_read_input_tokens counts).
const char* anthropic_stop_reason(ChatOutcome outcome);
nlohmann::ordered_json anthropic_usage_json(const Usage& usage);
// The non-streaming response body, and the streaming event writer.
nlohmann::ordered_json anthropic_message_json(const ChatRun& run);
std::shared_ptr<ChatStreamWriter> anthropic_stream_writer();

}  // namespace dsv4::server
