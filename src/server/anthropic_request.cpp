// Anthropic request translation (see anthropic_request.h). The Anthropic shape is checked here, field by
// field with the field named in the message; the translated body then goes through parse_chat_request, which
// applies the rules both APIs share (sampling ranges, tool schemas, message rendering limits).
#include "server/anthropic_request.h"

#include <optional>
#include <string>

namespace dsv4::server {

using ojson = nlohmann::ordered_json;

namespace {

ApiError invalid(const std::string& param, const std::string& message) {
    return bad_request(param + ": " + message, param, "invalid_request");
}

// Text blocks ([{"type": "text", "text": ...}]) or a string, as one string (blocks joined by newlines).
// The type of content block b (param p): an error unless b is an object with a string 'type'.
MaybeError block_type(const ojson& b, const std::string& p, std::string& t) {
    const ojson* type = b.is_object() ? find_field(b, "type") : nullptr;
    if (!type || !type->is_string()) return invalid(p, "must be a content block with a 'type'");
    t = type->get<std::string>();
    return {};
}

MaybeError text_of(const ojson& v, const std::string& param, std::string& out) {
    if (v.is_string()) {
        out = v.get<std::string>();
        return {};
    }
    if (!v.is_array()) return invalid(param, "must be a string or an array of text blocks");
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = param + "." + std::to_string(i);
        const ojson& b = v[i];
        std::string t;
        DSV4_API_TRY(block_type(b, p, t));
        if (t != "text") {
            return invalid(p + ".type", "block type '" + t + "' is not supported here (only text)");
        }
        const ojson* text = find_field(b, "text");
        if (!text || !text->is_string()) return invalid(p + ".text", "must be a string");
        if (i > 0) out += '\n';
        out += text->get<std::string>();
    }
    return {};
}

MaybeError user_message(const ojson& content, const std::string& param, ojson& out) {
    if (content.is_string()) {
        out.push_back({{"role", "user"}, {"content", content}});
        return {};
    }
    if (!content.is_array()) return invalid(param, "must be a string or an array of content blocks");
    std::string text;
    bool has_text = false;
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string p = param + "." + std::to_string(i);
        const ojson& b = content[i];
        std::string t;
        DSV4_API_TRY(block_type(b, p, t));
        if (t == "text") {
            const ojson* s = find_field(b, "text");
            if (!s || !s->is_string()) return invalid(p + ".text", "must be a string");
            if (has_text) text += '\n';
            text += s->get<std::string>();
            has_text = true;
        } else if (t == "tool_result") {
            const ojson* id = find_field(b, "tool_use_id");
            if (!id || !id->is_string()) return invalid(p + ".tool_use_id", "must be a string");
            std::string result;
            if (const ojson* c = find_field(b, "content")) DSV4_API_TRY(text_of(*c, p + ".content", result));
            if (const ojson* e = find_field(b, "is_error")) {
                if (!e->is_boolean()) return invalid(p + ".is_error", "must be a boolean");
                if (e->get<bool>()) result = "Error: " + result;
            }
            out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
        } else {
            return invalid(p + ".type", "block type '" + t + "' is not supported in user messages (text and tool_result are)");
        }
    }
    if (has_text) out.push_back({{"role", "user"}, {"content", text}});
    return {};
}

MaybeError assistant_message(const ojson& content, const std::string& param, ojson& out) {
    ojson msg = {{"role", "assistant"}, {"content", ""}};
    if (content.is_string()) {
        msg["content"] = content;
        out.push_back(std::move(msg));
        return {};
    }
    if (!content.is_array()) return invalid(param, "must be a string or an array of content blocks");
    std::string text, reasoning;
    ojson calls = ojson::array();
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string p = param + "." + std::to_string(i);
        const ojson& b = content[i];
        std::string t;
        DSV4_API_TRY(block_type(b, p, t));
        if (t == "text") {
            const ojson* s = find_field(b, "text");
            if (!s || !s->is_string()) return invalid(p + ".text", "must be a string");
            text += s->get<std::string>();
        } else if (t == "thinking") {
            // Thinking blocks come back as they were sent; the signature is not checked (this server signs none).
            const ojson* s = find_field(b, "thinking");
            if (!s || !s->is_string()) return invalid(p + ".thinking", "must be a string");
            reasoning += s->get<std::string>();
        } else if (t == "redacted_thinking") {
            // Another service's encrypted reasoning: nothing this model can read.
        } else if (t == "tool_use") {
            const ojson* id = find_field(b, "id");
            const ojson* name = find_field(b, "name");
            const ojson* input = find_field(b, "input");
            if (!id || !id->is_string()) return invalid(p + ".id", "must be a string");
            if (!name || !name->is_string()) return invalid(p + ".name", "must be a string");
            if (input && !input->is_object()) return invalid(p + ".input", "must be an object");
            calls.push_back({{"id", *id},
                             {"type", "function"},
                             {"function", {{"name", *name}, {"arguments", input ? input->dump() : "{}"}}}});
        } else {
            return invalid(p + ".type",
                           "block type '" + t + "' is not supported in assistant messages (text, thinking, tool_use are)");
        }
    }
    msg["content"] = text;
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out.push_back(std::move(msg));
    return {};
}

MaybeError translate_tools(const ojson& tools, ojson& out) {
    if (!tools.is_array()) return invalid("tools", "must be an array");
    out = ojson::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string p = "tools." + std::to_string(i);
        const ojson& t = tools[i];
        if (!t.is_object()) return invalid(p, "must be an object");
        if (const ojson* type = find_field(t, "type"); type && *type != "custom") {
            return invalid(p + ".type", "only client tools (type 'custom' or none) are supported");
        }
        const ojson* name = find_field(t, "name");
        if (!name || !name->is_string()) return invalid(p + ".name", "must be a string");
        ojson fn = {{"name", *name}};
        if (const ojson* d = find_field(t, "description")) {
            if (!d->is_string()) return invalid(p + ".description", "must be a string");
            fn["description"] = *d;
        }
        const ojson* schema = find_field(t, "input_schema");
        if (!schema || !schema->is_object()) return invalid(p + ".input_schema", "must be a JSON Schema object");
        fn["parameters"] = *schema;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return {};
}

MaybeError translate_tool_choice(const ojson& tc, ojson& out) {
    const ojson* type = tc.is_object() ? find_field(tc, "type") : nullptr;
    if (!type || !type->is_string()) return invalid("tool_choice", "must be an object with a 'type'");
    const std::string t = type->get<std::string>();
    if (t == "auto") out = "auto";
    else if (t == "any") out = "required";
    else if (t == "none") out = "none";
    else if (t == "tool") {
        const ojson* name = find_field(tc, "name");
        if (!name || !name->is_string()) return invalid("tool_choice.name", "must name a tool");
        out = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
        return invalid("tool_choice.type", "must be auto, any, tool or none, got '" + t + "'");
    }
    if (const ojson* d = find_field(tc, "disable_parallel_tool_use"); d && !d->is_boolean()) {
        return invalid("tool_choice.disable_parallel_tool_use", "must be a boolean");
    }
    return {};
}

// thinking {"type": "enabled", "budget_tokens": N} turns on the model's thinking mode (the model has no
// budget of its own: the budget is checked, and max_tokens bounds reasoning and answer together).
MaybeError translate_thinking(const ojson& th, const ojson* max_tokens, bool& on) {
    const ojson* type = th.is_object() ? find_field(th, "type") : nullptr;
    if (!type || !type->is_string()) return invalid("thinking", "must be an object with a 'type'");
    if (*type == "disabled") {
        on = false;
        return {};
    }
    if (*type != "enabled") return invalid("thinking.type", "must be enabled or disabled");
    const ojson* budget = find_field(th, "budget_tokens");
    if (!budget || !budget->is_number_integer() || budget->get<int64_t>() < 1) {
        return invalid("thinking.budget_tokens", "must be a positive integer");
    }
    if (max_tokens && max_tokens->is_number_integer() && budget->get<int64_t>() >= max_tokens->get<int64_t>()) {
        return invalid("thinking.budget_tokens", "must be less than max_tokens");
    }
    on = true;
    return {};
}

}  // namespace

ApiResult<ChatRequest> parse_messages_request(const ojson& body, const RequestLimits& limits, bool for_count_tokens) {
    ojson oa = ojson::object();
    if (const ojson* m = find_field(body, "model")) {
        if (!m->is_string()) return invalid("model", "must be a string");
        oa["model"] = *m;
    }
    const ojson* max_tokens = find_field(body, "max_tokens");
    if (!for_count_tokens) {
        if (!max_tokens) return bad_request("max_tokens: Field required", "max_tokens", "missing_required_parameter");
        if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
            return invalid("max_tokens", "must be a positive integer");
        }
        oa["max_tokens"] = *max_tokens;
    }

    ojson messages = ojson::array();
    if (const ojson* sys = find_field(body, "system")) {
        std::string text;
        DSV4_API_TRY(text_of(*sys, "system", text));
        messages.push_back({{"role", "system"}, {"content", text}});
    }
    const ojson* msgs = find_field(body, "messages");
    if (!msgs) return bad_request("messages: Field required", "messages", "missing_required_parameter");
    if (!msgs->is_array() || msgs->empty()) return invalid("messages", "must be a non-empty array");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const std::string p = "messages." + std::to_string(i);
        const ojson& m = (*msgs)[i];
        const ojson* role = m.is_object() ? find_field(m, "role") : nullptr;
        if (!role || !role->is_string()) return invalid(p + ".role", "must be user or assistant");
        const ojson* content = find_field(m, "content");
        if (!content) return invalid(p + ".content", "Field required");
        if (*role == "user") {
            DSV4_API_TRY(user_message(*content, p + ".content", messages));
        } else if (*role == "assistant") {
            if (i + 1 == msgs->size() && !for_count_tokens) {
                return invalid(p, "the conversation ends with an assistant message; continuing a prefilled "
                                  "assistant turn is not supported");
            }
            DSV4_API_TRY(assistant_message(*content, p + ".content", messages));
        } else {
            return invalid(p + ".role", "must be user or assistant, got '" + role->dump() + "'");
        }
    }
    oa["messages"] = std::move(messages);

    for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
        if (const ojson* v = find_field(body, key)) oa[key] = *v;
    }
    if (const ojson* t = find_field(body, "temperature"); t && t->is_number() && t->get<double>() > 1.0) {
        return invalid("temperature", "must be in [0, 1]");
    }
    if (const ojson* s = find_field(body, "stop_sequences")) {
        if (!s->is_array()) return invalid("stop_sequences", "must be an array of strings");
        oa["stop"] = *s;
    }
    if (const ojson* md = find_field(body, "metadata"); md && !md->is_object()) {
        return invalid("metadata", "must be an object");
    }
    if (const ojson* tools = find_field(body, "tools")) {
        ojson t;
        DSV4_API_TRY(translate_tools(*tools, t));
        if (!t.empty()) oa["tools"] = std::move(t);
    }
    if (const ojson* tc = find_field(body, "tool_choice")) {
        ojson t;
        DSV4_API_TRY(translate_tool_choice(*tc, t));
        // "any" / "tool" without tools is caught by the shared check; "auto" / "none" without tools mean nothing.
        if (oa.contains("tools") || !t.is_string() || t == "required") oa["tool_choice"] = std::move(t);
    }
    bool thinking = limits.thinking_default;
    if (const ojson* th = find_field(body, "thinking")) DSV4_API_TRY(translate_thinking(*th, max_tokens, thinking));
    oa["chat_template_kwargs"] = {{"thinking", thinking}};

    auto r = parse_chat_request(oa, limits);
    if (!r.ok()) return r.error();
    return r;
}

ojson anthropic_error_json(const ApiError& error) {
    const char* type = "invalid_request_error";
    switch (error.status) {
        case 401: type = "authentication_error"; break;
        case 403: type = "permission_error"; break;
        case 404: type = "not_found_error"; break;
        case 413: type = "request_too_large"; break;
        case 429: type = "rate_limit_error"; break;
        case 503: type = "overloaded_error"; break;
        default: type = error.status >= 500 ? "api_error" : "invalid_request_error";
    }
    return ojson{{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}};
}

}  // namespace dsv4::server
