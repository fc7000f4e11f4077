// Responses request translation (see responses_request.h). Input items become chat messages: a
// function_call joins the assistant message before it (or starts one), a reasoning item's text becomes the
// reasoning_content of the assistant message that follows, a function_call_output becomes a tool message.
// The translated body then passes through parse_chat_request's shared checks.
#include "server/responses_request.h"

#include <optional>
#include <string>

namespace dsv4::server {

using ojson = nlohmann::ordered_json;

namespace {

ApiError invalid(const std::string& param, const std::string& message, const char* code = "invalid_value") {
    return bad_request("'" + param + "' " + message, param, code);
}

// A content value: a string or parts of type input_text / output_text / text / summary_text / reasoning_text.
MaybeError content_text(const ojson& c, const std::string& param, std::string& out) {
    if (c.is_string()) {
        out = c.get<std::string>();
        return {};
    }
    if (!c.is_array()) return invalid(param, "must be a string or an array of content parts", "invalid_type");
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const ojson* type = c[i].is_object() ? find_field(c[i], "type") : nullptr;
        if (!type || !type->is_string()) return invalid(p + ".type", "must be a string", "invalid_type");
        const std::string t = type->get<std::string>();
        if (t != "input_text" && t != "output_text" && t != "text" && t != "summary_text" && t != "reasoning_text") {
            return invalid(p + ".type", "is '" + t + "'; only text parts are supported", "unsupported_value");
        }
        const ojson* text = find_field(c[i], "text");
        if (!text || !text->is_string()) return invalid(p + ".text", "must be a string", "invalid_type");
        if (i > 0) out += '\n';
        out += text->get<std::string>();
    }
    return {};
}

struct InputBuilder {
    ojson messages = ojson::array();
    std::string pending_reasoning;  // from reasoning items, for the next assistant message

    ojson& assistant() {
        if (messages.empty() || messages.back()["role"] != "assistant") {
            messages.push_back({{"role", "assistant"}, {"content", ""}});
        }
        ojson& m = messages.back();
        if (!pending_reasoning.empty()) {
            m["reasoning_content"] = m.value("reasoning_content", "") + pending_reasoning;
            pending_reasoning.clear();
        }
        return m;
    }
};

MaybeError input_item(const ojson& item, const std::string& p, InputBuilder& b) {
    if (!item.is_object()) return invalid(p, "must be an object", "invalid_type");
    std::string type = "message";
    if (const ojson* t = find_field(item, "type")) {
        if (!t->is_string()) return invalid(p + ".type", "must be a string", "invalid_type");
        type = t->get<std::string>();
    }
    if (type == "message") {
        const ojson* role = find_field(item, "role");
        if (!role || !role->is_string()) return invalid(p + ".role", "must be user, assistant, system or developer");
        const std::string r = role->get<std::string>();
        const ojson* c = find_field(item, "content");
        if (!c) return invalid(p + ".content", "is required", "missing_required_parameter");
        std::string text;
        DSV4_API_TRY(content_text(*c, p + ".content", text));
        if (r == "assistant") {
            ojson& m = b.assistant();
            m["content"] = m["content"].get<std::string>() + text;
        } else if (r == "user" || r == "system" || r == "developer") {
            b.messages.push_back({{"role", r}, {"content", text}});
        } else {
            return invalid(p + ".role", "is '" + r + "'; expected user, assistant, system or developer");
        }
    } else if (type == "function_call") {
        const ojson* id = find_field(item, "call_id");
        const ojson* name = find_field(item, "name");
        const ojson* args = find_field(item, "arguments");
        if (!id || !id->is_string()) return invalid(p + ".call_id", "must be a string", "invalid_type");
        if (!name || !name->is_string()) return invalid(p + ".name", "must be a string", "invalid_type");
        if (args && !args->is_string()) return invalid(p + ".arguments", "must be a string of JSON", "invalid_type");
        ojson& m = b.assistant();
        if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
        m["tool_calls"].push_back({{"id", *id},
                                   {"type", "function"},
                                   {"function", {{"name", *name}, {"arguments", args ? *args : ojson("{}")}}}});
    } else if (type == "function_call_output") {
        const ojson* id = find_field(item, "call_id");
        const ojson* out = find_field(item, "output");
        if (!id || !id->is_string()) return invalid(p + ".call_id", "must be a string", "invalid_type");
        if (!out) return invalid(p + ".output", "is required", "missing_required_parameter");
        std::string text;
        DSV4_API_TRY(content_text(*out, p + ".output", text));
        b.messages.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", text}});
    } else if (type == "reasoning") {
        // The model's own reasoning text comes back in `content` (reasoning_text); summaries stand in for it.
        std::string text;
        if (const ojson* c = find_field(item, "content"); c && !c->empty()) {
            DSV4_API_TRY(content_text(*c, p + ".content", text));
        } else if (const ojson* s = find_field(item, "summary")) {
            DSV4_API_TRY(content_text(*s, p + ".summary", text));
        }
        b.pending_reasoning += text;
    } else {
        return invalid(p + ".type",
                       "is '" + type + "'; supported input items are message, function_call, function_call_output "
                       "and reasoning",
                       "unsupported_value");
    }
    return {};
}

MaybeError translate_tools(const ojson& tools, ojson& out) {
    if (!tools.is_array()) return invalid("tools", "must be an array", "invalid_type");
    out = ojson::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string p = "tools[" + std::to_string(i) + "]";
        const ojson& t = tools[i];
        if (!t.is_object()) return invalid(p, "must be an object", "invalid_type");
        const ojson* type = find_field(t, "type");
        if (!type || *type != "function") {
            return invalid(p + ".type", "must be \"function\" (built-in tools are not supported)", "unsupported_value");
        }
        ojson fn = ojson::object();
        for (const char* key : {"name", "description", "parameters", "strict"}) {
            if (const ojson* v = find_field(t, key)) fn[key] = *v;
        }
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return {};
}

MaybeError translate_tool_choice(const ojson& tc, ojson& out) {
    if (tc.is_string()) {
        out = tc;
        return {};
    }
    const ojson* type = tc.is_object() ? find_field(tc, "type") : nullptr;
    const ojson* name = tc.is_object() ? find_field(tc, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string()) {
        return invalid("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
    }
    out = {{"type", "function"}, {"function", {{"name", *name}}}};
    return {};
}

MaybeError translate_text_format(const ojson& text, ojson& oa) {
    if (!text.is_object()) return invalid("text", "must be an object", "invalid_type");
    const ojson* f = find_field(text, "format");
    if (!f) return {};
    const ojson* type = f->is_object() ? find_field(*f, "type") : nullptr;
    if (!type || !type->is_string()) return invalid("text.format.type", "must be text, json_object or json_schema");
    if (*type == "json_schema") {
        ojson js = ojson::object();
        for (const char* key : {"name", "schema", "strict", "description"}) {
            if (const ojson* v = find_field(*f, key)) js[key] = *v;
        }
        oa["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    } else {
        oa["response_format"] = {{"type", *type}};
    }
    return {};
}

}  // namespace

ApiResult<ResponsesRequest> parse_responses_request(const ojson& body, const RequestLimits& limits) {
    ResponsesRequest r;
    ojson oa = ojson::object();
    if (const ojson* m = find_field(body, "model")) oa["model"] = *m;
    if (const ojson* p = find_field(body, "previous_response_id")) {
        (void)p;
        return invalid("previous_response_id", "is not supported: this server stores no responses; send the whole "
                                               "conversation in 'input'",
                       "unsupported_parameter");
    }

    InputBuilder b;
    if (const ojson* ins = find_field(body, "instructions")) {
        if (!ins->is_string()) return invalid("instructions", "must be a string", "invalid_type");
        b.messages.push_back({{"role", "system"}, {"content", *ins}});
    }
    const ojson* input = find_field(body, "input");
    if (!input) return invalid("input", "is required", "missing_required_parameter");
    if (input->is_string()) {
        b.messages.push_back({{"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
        if (input->empty()) return invalid("input", "must hold at least one item");
        for (size_t i = 0; i < input->size(); ++i) {
            DSV4_API_TRY(input_item((*input)[i], "input[" + std::to_string(i) + "]", b));
        }
    } else {
        return invalid("input", "must be a string or an array of input items", "invalid_type");
    }
    if (!b.messages.empty() && b.messages.back()["role"] == "assistant" && !b.messages.back().contains("tool_calls")) {
        return invalid("input", "ends with an assistant message; continuing an assistant turn is not supported");
    }
    oa["messages"] = std::move(b.messages);

    if (const ojson* v = find_field(body, "max_output_tokens")) oa["max_tokens"] = *v;
    for (const char* key : {"temperature", "top_p", "stream", "parallel_tool_calls"}) {
        if (const ojson* v = find_field(body, key)) oa[key] = *v;
    }
    if (const ojson* tools = find_field(body, "tools")) {
        ojson t;
        DSV4_API_TRY(translate_tools(*tools, t));
        if (!t.empty()) oa["tools"] = std::move(t);
    }
    if (const ojson* tc = find_field(body, "tool_choice")) {
        ojson t;
        DSV4_API_TRY(translate_tool_choice(*tc, t));
        oa["tool_choice"] = std::move(t);
    }
    if (const ojson* reasoning = find_field(body, "reasoning")) {
        if (!reasoning->is_object()) return invalid("reasoning", "must be an object", "invalid_type");
        const ojson* effort = find_field(*reasoning, "effort");
        if (effort && !effort->is_string()) return invalid("reasoning.effort", "must be a string", "invalid_type");
        oa["reasoning_effort"] = effort ? *effort : ojson("high");
    }
    if (const ojson* text = find_field(body, "text")) DSV4_API_TRY(translate_text_format(*text, oa));
    if (const ojson* md = find_field(body, "metadata"); md && !md->is_object()) {
        return invalid("metadata", "must be an object", "invalid_type");
    }

    auto chat = parse_chat_request(oa, limits);
    if (!chat.ok()) return chat.error();
    r.chat = std::move(*chat);

    const ojson* instructions = find_field(body, "instructions");
    r.echo["instructions"] = instructions ? *instructions : ojson(nullptr);
    r.echo["max_output_tokens"] = oa.contains("max_tokens") ? oa["max_tokens"] : ojson(nullptr);
    const ojson* parallel = find_field(body, "parallel_tool_calls");
    r.echo["parallel_tool_calls"] = parallel ? *parallel : ojson(true);
    r.echo["temperature"] = oa.contains("temperature") ? oa["temperature"] : ojson(1.0);
    const ojson* tool_choice = find_field(body, "tool_choice");
    r.echo["tool_choice"] = tool_choice ? *tool_choice : ojson("auto");
    const ojson* tools = find_field(body, "tools");
    r.echo["tools"] = tools ? *tools : ojson::array();
    r.echo["top_p"] = oa.contains("top_p") ? oa["top_p"] : ojson(1.0);
    const ojson* metadata = find_field(body, "metadata");
    r.echo["metadata"] = metadata ? *metadata : ojson::object();
    return r;
}

}  // namespace dsv4::server
