// The Anthropic Messages endpoints (see anthropic_messages.h). Content blocks appear in the order the model
// wrote them (thinking, text, tool_use); a tool call's input is sent whole, as one input_json_delta, since the
// DSML parser releases a call only once its markup is complete and checked.
#include "server/anthropic_messages.h"

#include "server/anthropic_request.h"
#include "server/chat_blocks.h"

namespace dsv4::server {

using json = nlohmann::ordered_json;

namespace {

// "call_<hex>_<n>" -> "toolu_<hex>_<n>": Anthropic's id prefix on the shared call ids.
std::string tool_use_id(const std::string& call_id) {
    return "toolu_" + (call_id.rfind("call_", 0) == 0 ? call_id.substr(5) : call_id);
}

json tool_input(const std::string& arguments) {
    json input = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
    return input.is_object() ? input : json::object();
}

json stop_sequence_json(const ChatRun& run) {
    return run.outcome() == ChatOutcome::stop_sequence ? json(run.stop_sequence()) : json(nullptr);
}

std::string event(const char* type, json data) {
    return "event: " + std::string(type) + "\ndata: " + dump_json(data) + "\n\n";
}

class AnthropicWriter : public ChatStreamWriter {
public:
    std::string open(ChatRun& run) override {
        json message = {{"id", run.job->meta.id},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", run.job->meta.model},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", anthropic_usage_json({run.n_prompt, 0, 0})}};
        std::string out = event("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
        return out + event("ping", {{"type", "ping"}});
    }

    std::string delta(ChatRun&, const ChatDelta& d) override { return blocks(blocks_.push(d)); }

    std::string close(ChatRun& run) override {
        std::string out = blocks(blocks_.finish());
        json delta = {{"stop_reason", anthropic_stop_reason(run.outcome())}, {"stop_sequence", stop_sequence_json(run)}};
        out += event("message_delta",
                     {{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", anthropic_usage_json(run.job->usage)}});
        return out + event("message_stop", {{"type", "message_stop"}});
    }

    std::string fail(ChatRun&, const ApiError& error) override {
        return event("error", anthropic_error_json(error));
    }

private:
    std::string blocks(const std::vector<BlockEvent>& events) {
        std::string out;
        for (const BlockEvent& e : events) {
            const size_t index = e.index;
            switch (e.type) {
                case BlockEvent::Type::open: {
                    json block;
                    if (e.kind == BlockKind::reasoning) block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
                    else if (e.kind == BlockKind::text) block = {{"type", "text"}, {"text", ""}};
                    else block = {{"type", "tool_use"}, {"id", tool_use_id(e.tool.id)}, {"name", e.tool.call.name},
                                  {"input", json::object()}};
                    out += event("content_block_start",
                                 {{"type", "content_block_start"}, {"index", index}, {"content_block", std::move(block)}});
                    break;
                }
                case BlockEvent::Type::append: {
                    json delta;
                    if (e.kind == BlockKind::reasoning) delta = {{"type", "thinking_delta"}, {"thinking", e.text}};
                    else if (e.kind == BlockKind::text) delta = {{"type", "text_delta"}, {"text", e.text}};
                    else delta = {{"type", "input_json_delta"}, {"partial_json", tool_input(e.text).dump()}};
                    out += event("content_block_delta",
                                 {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(delta)}});
                    break;
                }
                case BlockEvent::Type::close:
                    out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
                    break;
            }
        }
        return out;
    }

    ChatBlocks blocks_;
};

}  // namespace

const char* anthropic_stop_reason(ChatOutcome outcome) {
    switch (outcome) {
        case ChatOutcome::length: return "max_tokens";
        case ChatOutcome::tool_calls: return "tool_use";
        case ChatOutcome::stop_sequence: return "stop_sequence";
        case ChatOutcome::end_turn: break;
    }
    return "end_turn";
}

json anthropic_usage_json(const Usage& usage) {
    return json{{"input_tokens", usage.prompt_tokens - usage.cached_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", usage.cached_tokens},
                {"output_tokens", usage.completion_tokens}};
}

json anthropic_message_json(const ChatRun& run) {
    const chat::ParsedMessage& m = run.acc.message();
    json content = json::array();
    if (!m.reasoning_content.empty()) {
        content.push_back({{"type", "thinking"}, {"thinking", m.reasoning_content}, {"signature", ""}});
    }
    if (!m.content.empty()) content.push_back({{"type", "text"}, {"text", m.content}});
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
        const std::string id = i < run.acc.call_ids().size() ? run.acc.call_ids()[i] : "call_" + std::to_string(i);
        content.push_back({{"type", "tool_use"},
                           {"id", tool_use_id(id)},
                           {"name", m.tool_calls[i].name},
                           {"input", tool_input(m.tool_calls[i].arguments)}});
    }
    return json{{"id", run.job->meta.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", run.job->meta.model},
                {"content", std::move(content)},
                {"stop_reason", anthropic_stop_reason(run.outcome())},
                {"stop_sequence", stop_sequence_json(run)},
                {"usage", anthropic_usage_json(run.job->usage)}};
}

std::shared_ptr<ChatStreamWriter> anthropic_stream_writer() { return std::make_shared<AnthropicWriter>(); }

void send_anthropic_error(httplib::Response& res, const ApiError& error) {
    send_json(res, error.status, anthropic_error_json(error));
}

void anthropic_messages(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body.ok()) return send_anthropic_error(res, body.error());
    auto r = parse_messages_request(*body, routes.context().limits, /*for_count_tokens=*/false);
    if (!r.ok()) return send_anthropic_error(res, r.error());
    auto run = routes.start_chat(*r, "msg_", "messages");
    if (!run.ok()) return send_anthropic_error(res, run.error());
    if (r->gen.stream) return routes.stream_chat(res, *run, anthropic_stream_writer());
    ChatRun& c = **run;
    if (!routes.collect_chat(c)) return send_anthropic_error(res, client_gone_error());
    if (c.failed()) return send_anthropic_error(res, end_error(c.job->end, c.job->error));
    send_json(res, 200, anthropic_message_json(c));
}

void anthropic_count_tokens(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body.ok()) return send_anthropic_error(res, body.error());
    auto r = parse_messages_request(*body, routes.context().limits, /*for_count_tokens=*/true);
    if (!r.ok()) return send_anthropic_error(res, r.error());
    if (auto m = routes.check_model(r->gen); !m.ok()) return send_anthropic_error(res, m.error());
    auto ids = routes.chat_prompt(*r);
    if (!ids.ok()) return send_anthropic_error(res, ids.error());
    send_json(res, 200, json{{"input_tokens", ids->size()}});
}

}  // namespace dsv4::server
