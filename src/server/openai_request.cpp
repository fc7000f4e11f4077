// OpenAI request validation (see openai_request.h). Every check names the offending field in `param` the
// way OpenAI does ("messages[2].content", "tools[0].function.name"), so a client can point at its mistake.
// Unknown top-level fields are ignored (clients send `user`, `store`, `metadata`, ...); known fields with the
// wrong type or an out-of-range value are rejected rather than silently replaced by a default.
#include "server/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>

namespace dsv4::server {

using ojson = nlohmann::ordered_json;

ApiError bad_request(std::string message, std::string param, std::string code) {
    ApiError e;
    e.status = 400;
    e.message = std::move(message);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
}

const ojson* find_field(const ojson& obj, std::string_view key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

nlohmann::ordered_json error_json(const ApiError& error) {
    ojson e = {{"message", error.message}, {"type", error.type}};
    e["param"] = error.param.empty() ? ojson(nullptr) : ojson(error.param);
    e["code"] = error.code.empty() ? ojson(nullptr) : ojson(error.code);
    return ojson{{"error", std::move(e)}};
}

namespace {


const char* json_kind(const ojson& v) {
    switch (v.type()) {
        case ojson::value_t::null: return "null";
        case ojson::value_t::boolean: return "a boolean";
        case ojson::value_t::string: return "a string";
        case ojson::value_t::array: return "an array";
        case ojson::value_t::object: return "an object";
        case ojson::value_t::number_float: return "a number";
        default: return "an integer";
    }
}

std::string number_text(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return buf;
}

ApiError wrong_type(const std::string& param, const char* expected, const ojson& got) {
    return bad_request("'" + param + "' must be " + expected + ", got " + json_kind(got), param, "invalid_type");
}

ApiError out_of_range(const std::string& param, const std::string& range, double got) {
    return bad_request("'" + param + "' must be " + range + ", got " + number_text(got), param, "invalid_value");
}

// A number in [lo, hi] (or (lo, hi] when lo_open).
MaybeError read_float(const ojson& obj, const char* key, float& out, double lo, double hi, bool lo_open = false) {
    const ojson* v = find_field(obj, key);
    if (!v) return {};
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
        return out_of_range(key, std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + "]", x);
    }
    out = static_cast<float>(x);
    return {};
}

// An integer (an integral float such as 16.0 counts) in [lo, hi].
MaybeError read_int(const ojson& obj, const std::string& key, int64_t& out, int64_t lo, int64_t hi) {
    const ojson* v = find_field(obj, key);
    if (!v) return {};
    if (v->is_number_integer()) {
        if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
            return out_of_range(key, "at most " + std::to_string(hi), static_cast<double>(v->get<uint64_t>()));
        }
        out = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15) {
        out = static_cast<int64_t>(v->get<double>());
    } else {
        return wrong_type(key, "an integer", *v);
    }
    if (out < lo || out > hi) {
        return out_of_range(key, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", static_cast<double>(out));
    }
    return {};
}

MaybeError read_bool(const ojson& obj, const char* key, bool& out) {
    const ojson* v = find_field(obj, key);
    if (!v) return {};
    if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
    out = v->get<bool>();
    return {};
}

MaybeError read_string(const ojson& obj, const char* key, std::string& out) {
    const ojson* v = find_field(obj, key);
    if (!v) return {};
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    out = v->get<std::string>();
    return {};
}

MaybeError read_stop(const ojson& body, const RequestLimits& limits, std::vector<std::string>& out) {
    const ojson* v = find_field(body, "stop");
    if (!v) return {};
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
        return {};
    }
    if (!v->is_array()) return wrong_type("stop", "a string or an array of strings", *v);
    if (v->size() > limits.max_stop_strings) {
        return bad_request("'stop' holds " + std::to_string(v->size()) + " strings; at most " +
                               std::to_string(limits.max_stop_strings) + " are allowed",
                           "stop", "invalid_value");
    }
    for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", (*v)[i]);
        out.push_back((*v)[i].get<std::string>());
    }
    return {};
}

// logit_bias: {"<token id>": bias in [-100, 100]}.
MaybeError read_logit_bias(const ojson& body, const RequestLimits& limits, SamplingParams& s) {
    const ojson* v = find_field(body, "logit_bias");
    if (!v) return {};
    if (!v->is_object()) return wrong_type("logit_bias", "an object mapping token ids to numbers", *v);
    for (const auto& [key, bias] : v->items()) {
        const std::string param = "logit_bias." + key;
        char* end = nullptr;
        errno = 0;
        const long long id = key.empty() ? -1 : std::strtoll(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= limits.n_vocab) {
            return bad_request("logit_bias key '" + key + "' is not a token id in [0, " + std::to_string(limits.n_vocab) +
                                   ")",
                               "logit_bias", "invalid_value");
        }
        if (!bias.is_number()) return wrong_type(param, "a number", bias);
        const double b = bias.get<double>();
        if (!std::isfinite(b) || b < -100 || b > 100) return out_of_range(param, "in [-100, 100]", b);
        s.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
    }
    return {};
}

// Fields shared by chat and text completions. min_max_tokens: 0 where a request may only score its prompt.
MaybeError read_generation(const ojson& body, const RequestLimits& limits, GenerationParams& g,
                           int64_t min_max_tokens = 1) {
    DSV4_API_TRY(read_string(body, "model", g.model));
    SamplingParams& s = g.sampling;
    DSV4_API_TRY(read_float(body, "temperature", s.temperature, 0.0, 2.0));
    DSV4_API_TRY(read_float(body, "top_p", s.top_p, 0.0, 1.0, /*lo_open=*/true));
    DSV4_API_TRY(read_float(body, "min_p", s.min_p, 0.0, 1.0));
    DSV4_API_TRY(read_float(body, "presence_penalty", s.presence_penalty, -2.0, 2.0));
    DSV4_API_TRY(read_float(body, "frequency_penalty", s.frequency_penalty, -2.0, 2.0));
    DSV4_API_TRY(read_float(body, "repetition_penalty", s.repetition_penalty, 0.0, 10.0, /*lo_open=*/true));
    int64_t top_k = 0;
    // -1 is vLLM's spelling of "off".
    DSV4_API_TRY(read_int(body, "top_k", top_k, -1, std::numeric_limits<int32_t>::max()));
    s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
    if (find_field(body, "seed")) {
        int64_t seed = 0;
        DSV4_API_TRY(read_int(body, "seed", seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
        s.seed = static_cast<uint64_t>(seed);
        g.seed_given = true;
    }
    DSV4_API_TRY(read_logit_bias(body, limits, s));

    int64_t n = 1;
    DSV4_API_TRY(read_int(body, "n", n, 1, std::numeric_limits<int32_t>::max()));
    if (n != 1) return bad_request("n > 1 is not supported: send one request per choice", "n", "unsupported_value");

    const int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
    DSV4_API_TRY(read_int(body, "max_tokens", g.max_tokens, min_max_tokens, kMaxTokens));
    // The newer name wins when both are given (OpenAI deprecated max_tokens for it).
    DSV4_API_TRY(read_int(body, "max_completion_tokens", g.max_tokens, 1, kMaxTokens));
    DSV4_API_TRY(read_stop(body, limits, g.stop));

    DSV4_API_TRY(read_bool(body, "stream", g.stream));
    if (const ojson* so = find_field(body, "stream_options")) {
        if (!g.stream) {
            return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options",
                               "invalid_value");
        }
        if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
        if (const ojson* iu = find_field(*so, "include_usage")) {
            if (!iu->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *iu);
            g.include_usage = iu->get<bool>();
        }
    }
    std::string user;
    DSV4_API_TRY(read_string(body, "user", user));
    return {};
}

// ---- Chat messages ---------------------------------------------------------------------------------------

// A message content as one string: a string, null (when allowed), or an array of text parts (joined with
// newlines, as vLLM does). Other part types (images, audio) are not supported by this model.
MaybeError content_text(const ojson& msg, const std::string& param, bool allow_null, std::string& out) {
    auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        if (allow_null) return {};
        return bad_request("'" + param + "' is required", param, "missing_required_parameter");
    }
    const ojson& c = *it;
    if (c.is_string()) {
        out = c.get<std::string>();
        return {};
    }
    if (!c.is_array()) return wrong_type(param, "a string or an array of content parts", c);
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string pp = param + "[" + std::to_string(i) + "]";
        const ojson& part = c[i];
        if (!part.is_object()) return wrong_type(pp, "an object", part);
        const ojson* type = find_field(part, "type");
        if (!type || !type->is_string()) return bad_request("'" + pp + ".type' must be a string", pp + ".type");
        const std::string t = type->get<std::string>();
        const char* text_key = t == "text" ? "text" : t == "refusal" ? "refusal" : nullptr;
        if (!text_key) {
            return bad_request("content part type '" + t + "' is not supported (only text)", pp + ".type",
                               "unsupported_value");
        }
        const ojson* text = find_field(part, text_key);
        if (!text || !text->is_string()) {
            return bad_request("'" + pp + "." + text_key + "' must be a string", pp + "." + text_key);
        }
        if (i > 0) out += '\n';
        out += text->get<std::string>();
    }
    return {};
}

MaybeError normalize_tool_calls(const ojson& calls, const std::string& param, ojson& out) {
    if (!calls.is_array()) return wrong_type(param, "an array", calls);
    out = ojson::array();
    for (size_t j = 0; j < calls.size(); ++j) {
        const std::string pp = param + "[" + std::to_string(j) + "]";
        const ojson& call = calls[j];
        if (!call.is_object()) return wrong_type(pp, "an object", call);
        if (const ojson* type = find_field(call, "type"); type && *type != "function") {
            return bad_request("'" + pp + ".type' must be \"function\"", pp + ".type", "invalid_value");
        }
        const ojson* fn = find_field(call, "function");
        if (!fn || !fn->is_object()) return bad_request("'" + pp + ".function' must be an object", pp + ".function");
        const ojson* name = find_field(*fn, "name");
        if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
            return bad_request("'" + pp + ".function.name' must be a non-empty string", pp + ".function.name");
        }
        const ojson* args = find_field(*fn, "arguments");
        std::string args_text = "{}";
        if (args && args->is_string()) {
            args_text = args->get<std::string>();
            // The encoder passes unparseable text through as one raw argument, but a parsed non-object has no
            // DSML rendering.
            ojson parsed = ojson::parse(args_text, nullptr, /*allow_exceptions=*/false);
            if (!parsed.is_discarded() && !parsed.is_object()) {
                return bad_request("'" + pp + ".function.arguments' must encode a JSON object", pp + ".function.arguments");
            }
        } else if (args && args->is_object()) {
            args_text = args->dump();
        } else if (args) {
            return wrong_type(pp + ".function.arguments", "a string holding a JSON object", *args);
        }
        ojson c = {{"type", "function"}, {"function", {{"name", *name}, {"arguments", args_text}}}};
        if (const ojson* id = find_field(call, "id")) {
            if (!id->is_string()) return wrong_type(pp + ".id", "a string", *id);
            c["id"] = *id;
        }
        out.push_back(std::move(c));
    }
    return {};
}

// Checks one message and rebuilds it with only the fields the encoder should see, so that a client cannot
// reach encoder-internal fields (task, wo_eos, content_blocks) through the API.
MaybeError normalize_message(const ojson& msg, size_t index, ojson& out) {
    const std::string param = "messages[" + std::to_string(index) + "]";
    if (!msg.is_object()) return wrong_type(param, "an object", msg);
    const ojson* role_v = find_field(msg, "role");
    if (!role_v) return bad_request("'" + param + ".role' is required", param + ".role", "missing_required_parameter");
    if (!role_v->is_string()) return wrong_type(param + ".role", "a string", *role_v);
    const std::string role = role_v->get<std::string>();
    const std::string cparam = param + ".content";
    out = ojson{{"role", role}};
    std::string content;
    if (role == "system" || role == "user" || role == "developer") {
        DSV4_API_TRY(content_text(msg, cparam, /*allow_null=*/false, content));
        if (role == "developer" && content.empty()) {
            return bad_request("'" + cparam + "' must not be empty for a developer message", cparam);
        }
        out["content"] = content;
    } else if (role == "assistant") {
        DSV4_API_TRY(content_text(msg, cparam, /*allow_null=*/true, content));
        out["content"] = content;
        if (const ojson* rc = find_field(msg, "reasoning_content")) {
            if (!rc->is_string()) return wrong_type(param + ".reasoning_content", "a string", *rc);
            out["reasoning_content"] = *rc;
        }
        if (const ojson* calls = find_field(msg, "tool_calls")) {
            ojson norm;
            DSV4_API_TRY(normalize_tool_calls(*calls, param + ".tool_calls", norm));
            if (!norm.empty()) out["tool_calls"] = std::move(norm);
        }
    } else if (role == "tool") {
        DSV4_API_TRY(content_text(msg, cparam, /*allow_null=*/false, content));
        out["content"] = content;
        const ojson* id = find_field(msg, "tool_call_id");
        if (!id || !id->is_string()) {
            return bad_request("'" + param + ".tool_call_id' must be a string naming the call it answers",
                               param + ".tool_call_id", "missing_required_parameter");
        }
        out["tool_call_id"] = *id;
    } else {
        return bad_request("'" + param + ".role' is '" + role +
                               "'; expected one of system, developer, user, assistant, tool",
                           param + ".role", "invalid_value");
    }
    return {};
}

// ---- Tools -----------------------------------------------------------------------------------------------

bool valid_function_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

MaybeError check_schema(const ojson& schema, const std::string& param) {
    if (!schema.is_object()) return wrong_type(param, "a JSON Schema object", schema);
    if (const ojson* t = find_field(schema, "type"); t && !t->is_string() && !t->is_array()) {
        return wrong_type(param + ".type", "a string", *t);
    }
    if (const ojson* p = find_field(schema, "properties"); p && !p->is_object()) {
        return wrong_type(param + ".properties", "an object", *p);
    }
    if (const ojson* r = find_field(schema, "required")) {
        if (!r->is_array()) return wrong_type(param + ".required", "an array of strings", *r);
        for (const ojson& x : *r)
            if (!x.is_string()) return wrong_type(param + ".required", "an array of strings", *r);
    }
    return {};
}

MaybeError check_tools(const ojson& tools, std::set<std::string>& names) {
    if (!tools.is_array()) return wrong_type("tools", "an array", tools);
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string param = "tools[" + std::to_string(i) + "]";
        const ojson& tool = tools[i];
        if (!tool.is_object()) return wrong_type(param, "an object", tool);
        const ojson* type = find_field(tool, "type");
        if (!type || *type != "function") {
            return bad_request("'" + param + ".type' must be \"function\"", param + ".type", "invalid_value");
        }
        const ojson* fn = find_field(tool, "function");
        if (!fn || !fn->is_object()) return bad_request("'" + param + ".function' must be an object", param + ".function");
        const ojson* name = find_field(*fn, "name");
        if (!name || !name->is_string() || !valid_function_name(name->get<std::string>())) {
            return bad_request("'" + param +
                                   ".function.name' must be 1-64 characters of a-z, A-Z, 0-9, '_', '-' or '.'",
                               param + ".function.name", "invalid_value");
        }
        if (!names.insert(name->get<std::string>()).second) {
            return bad_request("tool name '" + name->get<std::string>() + "' is defined twice", param + ".function.name",
                               "invalid_value");
        }
        if (const ojson* d = find_field(*fn, "description"); d && !d->is_string()) {
            return wrong_type(param + ".function.description", "a string", *d);
        }
        if (const ojson* p = find_field(*fn, "parameters")) DSV4_API_TRY(check_schema(*p, param + ".function.parameters"));
        if (const ojson* s = find_field(*fn, "strict"); s && !s->is_boolean()) {
            return wrong_type(param + ".function.strict", "a boolean", *s);
        }
    }
    return {};
}

MaybeError read_tool_choice(const ojson& body, const std::set<std::string>& names, ChatRequest& r) {
    const ojson* v = find_field(body, "tool_choice");
    if (!v) {
        r.tool_choice = ToolChoice::automatic;
    } else if (v->is_string()) {
        const std::string s = v->get<std::string>();
        if (s == "none") r.tool_choice = ToolChoice::none;
        else if (s == "auto") r.tool_choice = ToolChoice::automatic;
        else if (s == "required") r.tool_choice = ToolChoice::required;
        else return bad_request("'tool_choice' must be none, auto, required or a function", "tool_choice", "invalid_value");
    } else if (v->is_object()) {
        const ojson* fn = find_field(*v, "function");
        const ojson* name = fn && fn->is_object() ? find_field(*fn, "name") : nullptr;
        const ojson* type = find_field(*v, "type");
        if (!type || *type != "function" || !name || !name->is_string()) {
            return bad_request("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                               "tool_choice", "invalid_value");
        }
        r.tool_choice = ToolChoice::named;
        r.tool_name = name->get<std::string>();
        if (!names.count(r.tool_name)) {
            return bad_request("tool_choice names '" + r.tool_name + "', which is not in 'tools'", "tool_choice",
                               "invalid_value");
        }
    } else {
        return wrong_type("tool_choice", "a string or an object", *v);
    }
    if ((r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named) && names.empty()) {
        return bad_request("tool_choice '" + std::string(r.tool_choice == ToolChoice::required ? "required" : "function") +
                               "' needs a non-empty 'tools' list",
                           "tool_choice", "invalid_value");
    }
    return {};
}

MaybeError read_response_format(const ojson& body, ojson& out) {
    const ojson* v = find_field(body, "response_format");
    if (!v) return {};
    if (!v->is_object()) return wrong_type("response_format", "an object", *v);
    const ojson* type = find_field(*v, "type");
    if (!type || !type->is_string()) {
        return bad_request("'response_format.type' must be text, json_object or json_schema", "response_format.type");
    }
    const std::string t = type->get<std::string>();
    if (t == "text") return {};  // the default: nothing to tell the model
    if (t == "json_schema") {
        const ojson* js = find_field(*v, "json_schema");
        if (!js || !js->is_object()) {
            return bad_request("'response_format.json_schema' must be an object", "response_format.json_schema");
        }
        const ojson* name = find_field(*js, "name");
        if (!name || !name->is_string() || !valid_function_name(name->get<std::string>())) {
            return bad_request("'response_format.json_schema.name' must be 1-64 characters of a-z, A-Z, 0-9, '_', '-' or '.'",
                               "response_format.json_schema.name");
        }
        if (const ojson* s = find_field(*js, "schema")) DSV4_API_TRY(check_schema(*s, "response_format.json_schema.schema"));
    } else if (t != "json_object") {
        return bad_request("'response_format.type' must be text, json_object or json_schema, got '" + t + "'",
                           "response_format.type", "invalid_value");
    }
    out = *v;
    return {};
}

// Thinking is on when reasoning_effort is high/max or chat_template_kwargs.thinking is true, off when the
// request asks for a lower effort or thinking false, and the server default otherwise.
MaybeError read_thinking(const ojson& body, const RequestLimits& limits, chat::ChatOptions& opt) {
    bool on = false, off = false;
    if (const ojson* e = find_field(body, "reasoning_effort")) {
        if (!e->is_string()) return wrong_type("reasoning_effort", "a string", *e);
        const std::string s = e->get<std::string>();
        if (s == "high" || s == "max") {
            on = true;
            if (s == "max") opt.reasoning_effort = chat::ReasoningEffort::max;
        } else if (s == "none" || s == "minimal" || s == "low" || s == "medium") {
            off = true;
        } else {
            return bad_request("'reasoning_effort' must be none, minimal, low, medium, high or max, got '" + s + "'",
                               "reasoning_effort", "invalid_value");
        }
    }
    if (const ojson* kw = find_field(body, "chat_template_kwargs")) {
        if (!kw->is_object()) return wrong_type("chat_template_kwargs", "an object", *kw);
        for (const char* key : {"thinking", "enable_thinking"}) {
            if (const ojson* t = find_field(*kw, key)) {
                if (!t->is_boolean()) return wrong_type(std::string("chat_template_kwargs.") + key, "a boolean", *t);
                (t->get<bool>() ? on : off) = true;
            }
        }
    }
    const bool thinking = on || (!off && limits.thinking_default);
    opt.thinking_mode = thinking ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
    if (!thinking) opt.reasoning_effort = chat::ReasoningEffort::none;
    return {};
}

}  // namespace

ApiResult<ojson> parse_json_body(std::string_view body) {
    if (body.empty()) return bad_request("the request body is empty; expected a JSON object", {}, "invalid_json");
    ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return bad_request("the request body is not valid JSON", {}, "invalid_json");
    if (!j.is_object()) return bad_request(std::string("the request body must be a JSON object, got ") + json_kind(j));
    return j;
}

ApiResult<ChatRequest> parse_chat_request(const ojson& body, const RequestLimits& limits) {
    ChatRequest r;
    DSV4_API_TRY(read_generation(body, limits, r.gen));
    DSV4_API_TRY(read_bool(body, "logprobs", r.gen.logprobs));
    int64_t top = 0;
    DSV4_API_TRY(read_int(body, "top_logprobs", top, 0, 20));
    if (top > 0 && !r.gen.logprobs) {
        return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs", "invalid_value");
    }
    r.gen.top_logprobs = static_cast<int>(top);
    r.gen.sampling.top_logprobs = r.gen.top_logprobs;

    const ojson* messages = find_field(body, "messages");
    if (!messages) return bad_request("'messages' is required", "messages", "missing_required_parameter");
    if (!messages->is_array()) return wrong_type("messages", "an array", *messages);
    if (messages->empty()) return bad_request("'messages' must hold at least one message", "messages", "invalid_value");
    ojson norm = ojson::array();
    for (size_t i = 0; i < messages->size(); ++i) {
        ojson m;
        DSV4_API_TRY(normalize_message((*messages)[i], i, m));
        norm.push_back(std::move(m));
    }

    std::set<std::string> names;
    ojson tools;
    if (const ojson* t = find_field(body, "tools")) {
        DSV4_API_TRY(check_tools(*t, names));
        tools = *t;
    }
    DSV4_API_TRY(read_tool_choice(body, names, r));
    if (const ojson* p = find_field(body, "parallel_tool_calls"); p && !p->is_boolean()) {
        return wrong_type("parallel_tool_calls", "a boolean", *p);
    }
    ojson response_format;
    DSV4_API_TRY(read_response_format(body, response_format));
    DSV4_API_TRY(read_thinking(body, limits, r.chat));

    // tool_choice none: the model is not told about the tools at all.
    if (r.tool_choice == ToolChoice::none) tools = ojson();
    r.n_tools = tools.is_array() ? tools.size() : 0;
    auto attached = chat::attach_request_tools(std::move(norm), tools, response_format);
    if (!attached.ok()) return bad_request(attached.error(), "messages");
    r.messages = std::move(*attached);

    // Forcing a call: in chat mode the answer starts right after the prompt, so the prompt can open the
    // tool-call block itself (and name the function). Thinking mode reasons first; there the choice is only
    // rendered as the tools list.
    if (r.chat.thinking_mode == chat::ThinkingMode::chat &&
        (r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named)) {
        r.forced_prefix = std::string(chat::kToolCallsStart) + ">\n" + std::string(chat::kInvokeStart) + " name=\"";
        if (r.tool_choice == ToolChoice::named) r.forced_prefix += r.tool_name + "\">\n";
    }
    const bool forced = r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named;
    if (auto e = output_grammar(response_format, tools, forced, r.tool_choice == ToolChoice::named ? r.tool_name : "",
                                r.chat.thinking_mode, r.forced_prefix, r.output)) {
        return bad_request(e->message, e->param, "unsupported_schema");
    }
    return r;
}

ApiResult<CompletionRequest> parse_completion_request(const ojson& body, const RequestLimits& limits) {
    CompletionRequest r;
    r.gen.max_tokens = 16;  // OpenAI's documented default for /v1/completions
    // max_tokens 0 is how evaluation harnesses score a prompt (with echo and logprobs).
    DSV4_API_TRY(read_generation(body, limits, r.gen, /*min_max_tokens=*/0));
    if (const ojson* lp = find_field(body, "logprobs")) {
        int64_t n = 0;
        DSV4_API_TRY(read_int(body, "logprobs", n, 0, 20));
        (void)lp;
        r.gen.logprobs = true;
        r.gen.top_logprobs = static_cast<int>(n);
        r.gen.sampling.top_logprobs = r.gen.top_logprobs;
    }
    DSV4_API_TRY(read_bool(body, "echo", r.echo));
    if (const ojson* s = find_field(body, "suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty())) {
        return bad_request("'suffix' is not supported", "suffix", "unsupported_value");
    }
    int64_t best_of = 1;
    DSV4_API_TRY(read_int(body, "best_of", best_of, 1, 1));

    const ojson* p = find_field(body, "prompt");
    if (!p) return bad_request("'prompt' is required", "prompt", "missing_required_parameter");
    const ojson* one = p;
    if (p->is_array() && !p->empty() && !(*p)[0].is_number()) {
        // A list of prompts asks for a batch of choices: only a list of one is accepted.
        if (p->size() != 1) {
            return bad_request("only one prompt per request is supported", "prompt", "unsupported_value");
        }
        one = &(*p)[0];
    }
    if (one->is_string()) {
        r.prompt_text = one->get<std::string>();
    } else if (one->is_array()) {
        if (one->empty()) return bad_request("'prompt' must not be an empty token list", "prompt", "invalid_value");
        r.prompt_is_tokens = true;
        for (size_t i = 0; i < one->size(); ++i) {
            const ojson& t = (*one)[i];
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= limits.n_vocab) {
                return bad_request("prompt token " + std::to_string(i) + " is not a token id in [0, " +
                                       std::to_string(limits.n_vocab) + ")",
                                   "prompt", "invalid_value");
            }
            r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
    } else {
        return wrong_type("prompt", "a string or an array of token ids", *p);
    }
    return r;
}

ApiResult<std::string> render_chat_prompt(const ChatRequest& request) {
    auto text = chat::encode_messages(request.messages, request.chat);
    if (!text.ok()) return bad_request("cannot render the conversation: " + text.error(), "messages");
    return *text + request.forced_prefix;
}

ApiError model_not_found(const std::string& model, const std::vector<std::string>& served) {
    std::string names;
    for (const std::string& id : served) names += (names.empty() ? "'" : ", '") + id + "'";
    ApiError e = bad_request("The model '" + model.substr(0, 200) + "' does not exist; this server serves " + names +
                                 " (start it with --alias to add names)",
                             "model", "model_not_found");
    e.status = 404;
    return e;
}

ApiResult<int64_t> fit_context(int64_t prompt_tokens, int64_t max_tokens, int64_t n_ctx, const std::string& param,
                               int64_t default_max_tokens) {
    // A prompt that is only scored (max_tokens 0) may fill the context; one to continue must leave room.
    if (prompt_tokens > n_ctx || (prompt_tokens == n_ctx && max_tokens != 0)) {
        return bad_request("This model's maximum context length is " + std::to_string(n_ctx) + " tokens, but the " +
                               param + " alone take " + std::to_string(prompt_tokens) +
                               " tokens. Shorten the " + param + ".",
                           param, "context_length_exceeded");
    }
    if (max_tokens < 0) {
        const int64_t room = n_ctx - prompt_tokens;
        return default_max_tokens > 0 ? std::min(room, default_max_tokens) : room;
    }
    if (prompt_tokens + max_tokens > n_ctx) {
        return bad_request("This model's maximum context length is " + std::to_string(n_ctx) + " tokens, but " +
                               std::to_string(prompt_tokens + max_tokens) + " were requested (" +
                               std::to_string(prompt_tokens) + " in the " + param + " + " +
                               std::to_string(max_tokens) + " for the completion). Lower max_tokens or shorten the " +
                               param + ".",
                           "max_tokens", "context_length_exceeded");
    }
    return max_tokens;
}

}  // namespace dsv4::server
