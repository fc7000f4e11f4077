// The Responses endpoint (see responses_api.h). Output item ids derive from the response id and the item's
// position, so the streamed items and the final response object name the same items without the writer
// keeping a second copy of the answer. A function call's arguments arrive whole (the DSML parser releases a
// call once its markup closes), as one arguments delta.
#include "server/responses_api.h"

#include "server/chat_blocks.h"
#include "server/responses_request.h"

namespace dsv4::server {

using json = nlohmann::ordered_json;

namespace {

// "resp_<hex>" -> "<prefix>_<hex>_<index>".
std::string item_id(const ChatRun& run, const char* prefix, size_t index) {
    const std::string& id = run.job->meta.id;
    const std::string base = id.rfind("resp_", 0) == 0 ? id.substr(5) : id;
    return std::string(prefix) + "_" + base + "_" + std::to_string(index);
}

json text_part(const std::string& text) {
    return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json reasoning_part(const std::string& text) { return json{{"type", "reasoning_text"}, {"text", text}}; }

json reasoning_item(const ChatRun& run, size_t index, json content, const char* status) {
    return json{{"id", item_id(run, "rs", index)},
                {"type", "reasoning"},
                {"status", status},
                {"summary", json::array()},
                {"content", std::move(content)}};
}

json message_item(const ChatRun& run, size_t index, json content, const char* status) {
    return json{{"id", item_id(run, "msg", index)},
                {"type", "message"},
                {"status", status},
                {"role", "assistant"},
                {"content", std::move(content)}};
}

json function_item(const ChatRun& run, size_t index, const ToolCallDelta& t, const std::string& arguments,
                   const char* status) {
    return json{{"id", item_id(run, "fc", index)}, {"type", "function_call"}, {"status", status},
                {"arguments", arguments},          {"call_id", t.id},         {"name", t.call.name}};
}

json usage_object(const Usage& u) {
    return json{{"input_tokens", u.prompt_tokens},
                {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                {"output_tokens", u.completion_tokens},
                {"output_tokens_details", {{"reasoning_tokens", 0}}},
                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// The output items of the whole answer, numbered as ChatBlocks numbers them while streaming.
json output_items(const ChatRun& run) {
    const chat::ParsedMessage& m = run.acc.message();
    json out = json::array();
    if (!m.reasoning_content.empty()) {
        out.push_back(reasoning_item(run, out.size(), json::array({reasoning_part(m.reasoning_content)}), "completed"));
    }
    if (!m.content.empty()) out.push_back(message_item(run, out.size(), json::array({text_part(m.content)}), "completed"));
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
        ToolCallDelta t;
        t.index = i;
        t.id = i < run.acc.call_ids().size() ? run.acc.call_ids()[i] : "call_" + std::to_string(i);
        t.call = m.tool_calls[i];
        out.push_back(function_item(run, out.size(), t, t.call.arguments, "completed"));
    }
    return out;
}

const char* end_status(const ChatRun& run) {
    return run.outcome() == ChatOutcome::length ? "incomplete" : "completed";
}

class ResponsesWriter : public ChatStreamWriter {
public:
    explicit ResponsesWriter(json echo) : echo_(std::move(echo)) {}

    std::string open(ChatRun& run) override {
        std::string out = event("response.created", {{"response", responses_object(run, echo_, "in_progress")}});
        return out + event("response.in_progress", {{"response", responses_object(run, echo_, "in_progress")}});
    }

    std::string delta(ChatRun& run, const ChatDelta& d) override { return blocks(run, blocks_.push(d)); }

    std::string close(ChatRun& run) override {
        std::string out = blocks(run, blocks_.finish());
        const char* status = end_status(run);
        const std::string type = std::string("response.") + (std::string(status) == "completed" ? "completed" : "incomplete");
        return out + event(type.c_str(), {{"response", responses_object(run, echo_, status)}});
    }

    std::string fail(ChatRun& run, const ApiError& error) override {
        json r = responses_object(run, echo_, "failed");
        r["error"] = {{"code", error.code.empty() ? "server_error" : error.code}, {"message", error.message}};
        return event("response.failed", {{"response", std::move(r)}});
    }

private:
    std::string event(const char* type, json fields) {
        json data = {{"type", type}, {"sequence_number", sequence_++}};
        for (auto& [k, v] : fields.items()) data[k] = std::move(v);
        return "event: " + std::string(type) + "\ndata: " + dump_json(data) + "\n\n";
    }

    json item(const ChatRun& run, const BlockEvent& e, const char* status) {
        if (e.kind == BlockKind::reasoning) {
            return reasoning_item(run, e.index, std::string(status) == "completed" ? json::array({reasoning_part(text_)})
                                                                                    : json::array(),
                                  status);
        }
        if (e.kind == BlockKind::text) {
            return message_item(run, e.index, std::string(status) == "completed" ? json::array({text_part(text_)})
                                                                                  : json::array(),
                                status);
        }
        return function_item(run, e.index, tool_, std::string(status) == "completed" ? text_ : "", status);
    }

    std::string blocks(const ChatRun& run, const std::vector<BlockEvent>& events) {
        std::string out;
        for (const BlockEvent& e : events) {
            const std::string id = e.kind == BlockKind::reasoning ? item_id(run, "rs", e.index)
                                   : e.kind == BlockKind::text    ? item_id(run, "msg", e.index)
                                                                  : item_id(run, "fc", e.index);
            const json where = {{"item_id", id}, {"output_index", e.index}};
            auto with = [&](json extra) {
                json j = where;
                for (auto& [k, v] : extra.items()) j[k] = std::move(v);
                return j;
            };
            switch (e.type) {
                case BlockEvent::Type::open:
                    text_.clear();
                    if (e.kind == BlockKind::tool_call) tool_ = e.tool;
                    out += event("response.output_item.added",
                                 {{"output_index", e.index}, {"item", item(run, e, "in_progress")}});
                    if (e.kind == BlockKind::text) {
                        out += event("response.content_part.added", with({{"content_index", 0}, {"part", text_part("")}}));
                    } else if (e.kind == BlockKind::reasoning) {
                        out += event("response.content_part.added",
                                     with({{"content_index", 0}, {"part", reasoning_part("")}}));
                    }
                    break;
                case BlockEvent::Type::append:
                    text_ += e.text;
                    if (e.kind == BlockKind::text) {
                        out += event("response.output_text.delta",
                                     with({{"content_index", 0}, {"delta", e.text}, {"logprobs", json::array()}}));
                    } else if (e.kind == BlockKind::reasoning) {
                        out += event("response.reasoning_text.delta", with({{"content_index", 0}, {"delta", e.text}}));
                    } else {
                        out += event("response.function_call_arguments.delta", with({{"delta", e.text}}));
                    }
                    break;
                case BlockEvent::Type::close:
                    if (e.kind == BlockKind::text) {
                        out += event("response.output_text.done",
                                     with({{"content_index", 0}, {"text", text_}, {"logprobs", json::array()}}));
                        out += event("response.content_part.done", with({{"content_index", 0}, {"part", text_part(text_)}}));
                    } else if (e.kind == BlockKind::reasoning) {
                        out += event("response.reasoning_text.done", with({{"content_index", 0}, {"text", text_}}));
                        out += event("response.content_part.done",
                                     with({{"content_index", 0}, {"part", reasoning_part(text_)}}));
                    } else {
                        out += event("response.function_call_arguments.done",
                                     with({{"name", tool_.call.name}, {"arguments", text_}}));
                    }
                    out += event("response.output_item.done",
                                 {{"output_index", e.index}, {"item", item(run, e, "completed")}});
                    break;
            }
        }
        return out;
    }

    json echo_;
    ChatBlocks blocks_;
    int64_t sequence_ = 0;
    std::string text_;    // the open block's text so far
    ToolCallDelta tool_;  // the open block's call
};

}  // namespace

json responses_object(const ChatRun& run, const json& echo, const char* status) {
    const bool done = std::string(status) != "in_progress";
    json r = {{"id", run.job->meta.id},
              {"object", "response"},
              {"created_at", run.job->meta.created},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", nullptr}};
    if (std::string(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    for (const auto& [k, v] : echo.items()) r[k] = v;
    r["model"] = run.job->meta.model;
    r["output"] = done && std::string(status) != "failed" ? output_items(run) : json::array();
    r["usage"] = done ? usage_object(run.job->usage) : json(nullptr);
    return r;
}

std::shared_ptr<ChatStreamWriter> responses_stream_writer(json echo) {
    return std::make_shared<ResponsesWriter>(std::move(echo));
}

void responses_create(GenerationRoutes& routes, const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body.ok()) return send_error(res, body.error());
    auto r = parse_responses_request(*body, routes.context().limits);
    if (!r.ok()) return send_error(res, r.error());
    auto run = routes.start_chat(r->chat, "resp_", "input");
    if (!run.ok()) return send_error(res, run.error());
    if (r->chat.gen.stream) return routes.stream_chat(res, *run, responses_stream_writer(r->echo));
    ChatRun& c = **run;
    if (!routes.collect_chat(c)) return send_error(res, client_gone_error());
    if (c.failed()) return send_error(res, end_error(c.job->end, c.job->error));
    send_json(res, 200, responses_object(c, r->echo, end_status(c)));
}

}  // namespace dsv4::server
