// OpenAI response shapes (see openai_response.h). Objects keep insertion order (ordered_json), which follows
// OpenAI's own responses: id, object, created, model, choices, usage.
#include "server/openai_response.h"

#include "tokenizer/utf8.h"

namespace dsv4::server {

using json = nlohmann::ordered_json;

// ---- ChatAccumulator -------------------------------------------------------------------------------------

ChatAccumulator::ChatAccumulator(chat::ThinkingMode mode, std::string_view forced_prefix, std::string call_id_base)
    : parser_(mode), call_id_base_(std::move(call_id_base)) {
    // The prefix is the opening of a tool-call block: markup only, so it yields no delta of its own.
    if (!forced_prefix.empty()) (void)push(forced_prefix);
}

ChatDelta ChatAccumulator::take(chat::StreamDelta d) {
    ChatDelta out;
    message_.reasoning_content += d.reasoning;
    message_.content += d.content;
    out.reasoning = std::move(d.reasoning);
    out.content = std::move(d.content);
    for (chat::ToolCall& c : d.tool_calls) {
        ToolCallDelta t;
        t.index = message_.tool_calls.size();
        t.id = call_id_base_ + "_" + std::to_string(t.index);
        t.call = c;
        call_ids_.push_back(t.id);
        message_.tool_calls.push_back(std::move(c));
        out.tool_calls.push_back(std::move(t));
    }
    return out;
}

ChatDelta ChatAccumulator::push(std::string_view text) {
    if (finished_ || !error_.empty() || text.empty()) return {};
    auto d = parser_.feed(text);
    if (!d.ok()) {
        error_ = d.error();
        return {};
    }
    return take(std::move(*d));
}

ChatDelta ChatAccumulator::finish() {
    if (finished_ || !error_.empty()) return {};
    finished_ = true;
    if (parser_.saw_eos()) {
        auto d = parser_.finish();
        if (!d.ok()) {
            error_ = d.error();
            return {};
        }
        return take(std::move(*d));
    }
    // No EOS text: close the message as the model would have. After content (or tool calls) that is the EOS
    // text; inside an unfinished reasoning it is "</think>" first. The parser is copied for each attempt
    // because a failed feed poisons it.
    const std::string eos(chat::kEos);
    const std::string closings[] = {eos, std::string(chat::kThinkEnd) + eos};
    std::string first_error;
    for (const std::string& closing : closings) {
        chat::ChatStreamParser p = parser_;
        auto d = p.feed(closing);
        if (!d.ok()) {
            if (first_error.empty()) first_error = d.error();
            continue;
        }
        auto f = p.finish();
        if (!f.ok()) {
            if (first_error.empty()) first_error = f.error();
            continue;
        }
        parser_ = std::move(p);
        ChatDelta out = take(std::move(*d));
        ChatDelta tail = take(std::move(*f));
        out.reasoning += tail.reasoning;
        out.content += tail.content;
        for (auto& t : tail.tool_calls) out.tool_calls.push_back(std::move(t));
        return out;
    }
    error_ = "the completion ended inside tool-call markup: " + first_error;
    return {};
}

// ---- shared pieces ---------------------------------------------------------------------------------------

std::string token_text_lossy(const Tokenizer& tok, int32_t token) {
    if (token < 0 || token >= tok.n_vocab()) return {};
    Utf8Streamer s(Utf8Streamer::Invalid::replace);
    std::string out = s.push(tok.token_text(token));
    out += s.flush();
    return out;
}

json usage_json(const Usage& u) {
    return json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

const char* finish_reason_name(bool cut_by_length, bool has_tool_calls) {
    if (cut_by_length) return "length";
    return has_tool_calls ? "tool_calls" : "stop";
}

namespace {

json token_bytes(const Tokenizer& tok, int32_t token) {
    json bytes = json::array();
    if (token < 0 || token >= tok.n_vocab()) return bytes;
    for (char c : tok.token_text(token)) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return bytes;
}

json tool_call_json(const std::string& id, const chat::ToolCall& c) {
    return json{{"id", id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

// ---- chat ------------------------------------------------------------------------------------------------

json chat_logprob_entry(const Tokenizer& tok, const TokenLogprobs& lp) {
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
        top.push_back({{"token", token_text_lossy(tok, id)}, {"logprob", logprob}, {"bytes", token_bytes(tok, id)}});
    }
    return json{{"token", token_text_lossy(tok, lp.token)},
                {"logprob", lp.logprob},
                {"bytes", token_bytes(tok, lp.token)},
                {"top_logprobs", std::move(top)}};
}

json chat_completion_json(const ResponseMeta& meta, const chat::ParsedMessage& message,
                          const std::vector<std::string>& call_ids, const std::string& finish_reason,
                          const Usage& usage, const json& logprobs) {
    json msg = {{"role", "assistant"}};
    // OpenAI sends null content next to tool calls; an empty answer otherwise stays "".
    msg["content"] = message.content.empty() && !message.tool_calls.empty() ? json(nullptr) : json(message.content);
    if (!message.reasoning_content.empty()) msg["reasoning_content"] = message.reasoning_content;
    if (!message.tool_calls.empty()) {
        json calls = json::array();
        for (size_t i = 0; i < message.tool_calls.size(); ++i) {
            const std::string id = i < call_ids.size() ? call_ids[i] : "call_" + std::to_string(i);
            calls.push_back(tool_call_json(id, message.tool_calls[i]));
        }
        msg["tool_calls"] = std::move(calls);
    }
    json choice = {{"index", 0}, {"message", std::move(msg)}};
    choice["logprobs"] = logprobs.is_null() ? json(nullptr) : json{{"content", logprobs}};
    choice["finish_reason"] = finish_reason;
    return json{{"id", meta.id},
                {"object", "chat.completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_json(usage)}};
}

json chat_chunk(const ResponseMeta& meta, json delta, const json& finish_reason, const json& logprobs,
                bool include_usage) {
    json choice = {{"index", 0}, {"delta", std::move(delta)}};
    choice["logprobs"] = logprobs.is_null() ? json(nullptr) : json{{"content", logprobs}};
    choice["finish_reason"] = finish_reason;
    json chunk = {{"id", meta.id},
                  {"object", "chat.completion.chunk"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array({std::move(choice)})}};
    if (include_usage) chunk["usage"] = nullptr;
    return chunk;
}

std::vector<json> chat_delta_chunks(const ResponseMeta& meta, const ChatDelta& d, bool include_usage) {
    std::vector<json> out;
    if (!d.reasoning.empty()) {
        out.push_back(chat_chunk(meta, {{"reasoning_content", d.reasoning}}, nullptr, nullptr, include_usage));
    }
    if (!d.content.empty()) out.push_back(chat_chunk(meta, {{"content", d.content}}, nullptr, nullptr, include_usage));
    if (!d.tool_calls.empty()) {
        // Each call arrives whole (the parser releases a call once its markup closes), so one delta carries
        // id, name and the complete arguments.
        json calls = json::array();
        for (const ToolCallDelta& t : d.tool_calls) {
            json c = tool_call_json(t.id, t.call);
            c["index"] = t.index;
            calls.push_back(std::move(c));
        }
        out.push_back(chat_chunk(meta, {{"tool_calls", std::move(calls)}}, nullptr, nullptr, include_usage));
    }
    return out;
}

json chat_usage_chunk(const ResponseMeta& meta, const Usage& usage) {
    return json{{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array()},
                {"usage", usage_json(usage)}};
}

// ---- text completions ------------------------------------------------------------------------------------

void CompletionLogprobs::add(const Tokenizer& tok, const TokenLogprobs& lp, int64_t text_offset) {
    tokens_.push_back(token_text_lossy(tok, lp.token));
    logprobs_.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, logprob] : lp.top) top[token_text_lossy(tok, id)] = logprob;
    top_.push_back(std::move(top));
    offsets_.push_back(text_offset);
}

void CompletionLogprobs::add_unscored(const Tokenizer& tok, int32_t token, int64_t text_offset) {
    tokens_.push_back(token_text_lossy(tok, token));
    logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
    offsets_.push_back(text_offset);
}

json CompletionLogprobs::to_json() const {
    return json{{"tokens", tokens_}, {"token_logprobs", logprobs_}, {"top_logprobs", top_}, {"text_offset", offsets_}};
}

void CompletionLogprobs::clear() { *this = CompletionLogprobs(); }

json completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                     const Usage& usage, const json& logprobs) {
    json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
    return json{{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_json(usage)}};
}

json completion_chunk(const ResponseMeta& meta, const std::string& text, const json& finish_reason,
                      const json& logprobs, bool include_usage) {
    json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
    json chunk = {{"id", meta.id},
                  {"object", "text_completion"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array({std::move(choice)})}};
    if (include_usage) chunk["usage"] = nullptr;
    return chunk;
}

json completion_usage_chunk(const ResponseMeta& meta, const Usage& usage) {
    return json{{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array()},
                {"usage", usage_json(usage)}};
}

// ---- misc ------------------------------------------------------------------------------------------------

json models_json(const std::string& model, int64_t created, int64_t n_ctx) {
    json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "dsv4"}};
    m["max_model_len"] = n_ctx;
    return json{{"object", "list"}, {"data", json::array({std::move(m)})}};
}

json models_json(const std::vector<std::string>& ids, int64_t created, int64_t n_ctx) {
    json list = json{{"object", "list"}, {"data", json::array()}};
    for (const std::string& id : ids) list["data"].push_back(models_json(id, created, n_ctx)["data"][0]);
    return list;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace dsv4::server
