// DeepSeek-V4 chat encoder: a C++ port of the official encoding_dsv4.py encode_messages (tool-message merging,
// tool-result ordering, reasoning dropping, per-message rendering, DSML tool calls). It works on JSON copies
// the way the Python does so that each step can be checked against the original line by line; where Python
// would format a value with str(), py_str reproduces that for scalars and rejects lists and objects (whose
// Python repr no client relies on).
#include "tokenizer/chat_format.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace dsv4::chat {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kReasoningEffortMaxPreamble =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// The official TOOLS_TEMPLATE with its token placeholders filled in, split around {tool_schemas}.
constexpr std::string_view kToolsPrefix = R"TPL(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)TPL";
constexpr std::string_view kToolsSuffix =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

struct TaskToken {
    std::string_view task;
    std::string_view token;
};
constexpr TaskToken kTaskTokens[] = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},  {"read_url", "<｜read_url｜>"},
};

void append(std::string& out, std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) out += p;
}

// ---- Python value semantics -------------------------------------------------------------------------------

const ojson& null_json() {
    static const ojson kNull;
    return kNull;
}

// msg.get(key): the value, or None (null) when absent.
const ojson& get(const ojson& obj, std::string_view key) {
    if (!obj.is_object()) return null_json();
    auto it = obj.find(key);
    return it == obj.end() ? null_json() : *it;
}

bool has_key(const ojson& obj, std::string_view key) { return obj.is_object() && obj.contains(key); }

bool is_none(const ojson& v) { return v.is_null(); }

// Python truthiness of a JSON value.
bool truthy(const ojson& v) {
    switch (v.type()) {
        case ojson::value_t::null: return false;
        case ojson::value_t::boolean: return v.get<bool>();
        case ojson::value_t::number_integer: return v.get<int64_t>() != 0;
        case ojson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
        case ojson::value_t::number_float: return v.get<double>() != 0.0;
        case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
        case ojson::value_t::array:
        case ojson::value_t::object: return !v.empty();
        default: return true;
    }
}

bool role_is(const ojson& msg, std::string_view role) {
    const ojson& r = get(msg, "role");
    return r.is_string() && r.get_ref<const std::string&>() == role;
}

std::string py_float_repr(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    // Shortest round-trip digits, then Python's repr layout: positional when -4 < decpt <= 16.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    std::string out;
    if (!sci.empty() && sci[0] == '-') {
        out += '-';
        sci.remove_prefix(1);
    }
    size_t epos = sci.find('e');
    std::string digits;
    for (char c : sci.substr(0, epos))
        if (c != '.') digits += c;
    int exp10 = 0;
    std::from_chars(sci.data() + epos + (sci[epos + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
    int decpt = exp10 + 1;  // value = 0.d1d2... * 10^decpt
    int nd = static_cast<int>(digits.size());
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        } else if (decpt >= nd) {
            out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
        }
    } else {
        out += digits.substr(0, 1);
        if (nd > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        out += e;
    }
    return out;
}

// str(value) for the scalars Python's str.format would print.
Result<std::string> py_str(const ojson& v, std::string_view what) {
    switch (v.type()) {
        case ojson::value_t::string: return v.get<std::string>();
        case ojson::value_t::null: return std::string("None");
        case ojson::value_t::boolean: return std::string(v.get<bool>() ? "True" : "False");
        case ojson::value_t::number_integer: return std::to_string(v.get<int64_t>());
        case ojson::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
        case ojson::value_t::number_float: return py_float_repr(v.get<double>());
        default: return make_error(std::string(what) + " must be a string, not a JSON " + v.type_name());
    }
}

void dump_python(const ojson& v, std::string& out);

void dump_python_string(std::string_view s, std::string& out) {
    out += '"';
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char esc[8];
                    std::snprintf(esc, sizeof(esc), "\\u%04x", c);
                    out += esc;
                } else {
                    out += ch;  // ensure_ascii=False: everything else, UTF-8 included, goes out as is
                }
        }
    }
    out += '"';
}

void dump_python(const ojson& v, std::string& out) {
    switch (v.type()) {
        case ojson::value_t::null: out += "null"; break;
        case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
        case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
        case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
        case ojson::value_t::number_float: out += py_float_repr(v.get<double>()); break;
        case ojson::value_t::string: dump_python_string(v.get_ref<const std::string&>(), out); break;
        case ojson::value_t::array: {
            out += '[';
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump_python(e, out);
            }
            out += ']';
            break;
        }
        case ojson::value_t::object: {
            out += '{';
            bool first = true;
            for (const auto& [k, e] : v.items()) {
                if (!first) out += ", ";
                first = false;
                dump_python_string(k, out);
                out += ": ";
                dump_python(e, out);
            }
            out += '}';
            break;
        }
        default: out += "null"; break;  // binary / discarded never come from parsed JSON
    }
}

// ---- Preprocessing (merge_tool_messages, sort_tool_results_by_call_order, _drop_thinking_messages) ---------

// Tool messages become tool_result blocks of a user message; consecutive user messages are merged too.
ojson merge_tool_messages(const ojson& messages) {
    ojson merged = ojson::array();
    for (const ojson& msg : messages) {
        auto prev_is_merged_user = [&] {
            return !merged.empty() && role_is(merged.back(), "user") && has_key(merged.back(), "content_blocks");
        };
        if (role_is(msg, "tool")) {
            ojson block = {{"type", "tool_result"},
                           {"tool_use_id", has_key(msg, "tool_call_id") ? msg.at("tool_call_id") : ojson("")},
                           {"content", has_key(msg, "content") ? msg.at("content") : ojson("")}};
            if (prev_is_merged_user()) {
                merged.back()["content_blocks"].push_back(std::move(block));
            } else {
                merged.push_back({{"role", "user"}, {"content_blocks", ojson::array({std::move(block)})}});
            }
        } else if (role_is(msg, "user")) {
            ojson content = has_key(msg, "content") ? msg.at("content") : ojson("");
            ojson text_block = {{"type", "text"}, {"text", content}};
            if (prev_is_merged_user() && is_none(get(merged.back(), "task"))) {
                merged.back()["content_blocks"].push_back(std::move(text_block));
            } else {
                ojson m = {{"role", "user"}, {"content", content}, {"content_blocks", ojson::array({text_block})}};
                for (const char* key : {"task", "wo_eos", "mask"})
                    if (has_key(msg, key)) m[key] = msg.at(key);
                merged.push_back(std::move(m));
            }
        } else {
            merged.push_back(msg);
        }
    }
    return merged;
}

// Tool results follow the order of the calls in the preceding assistant turn, whatever order they came in.
void sort_tool_results_by_call_order(ojson& messages) {
    std::vector<std::pair<ojson, size_t>> call_order;  // tool-call id -> position (a Python dict)
    auto order_of = [&](const ojson& id) -> size_t {
        for (const auto& [k, pos] : call_order)
            if (k == id) return pos;
        return 0;
    };
    for (ojson& msg : messages) {
        if (role_is(msg, "assistant") && truthy(get(msg, "tool_calls"))) {
            call_order.clear();
            const ojson& calls = msg["tool_calls"];
            if (!calls.is_array()) continue;
            for (size_t i = 0; i < calls.size(); ++i) {
                ojson id = get(calls[i], "id");
                if (!truthy(id)) {
                    const ojson& fn = get(calls[i], "function");
                    id = has_key(fn, "id") ? fn.at("id") : ojson("");
                }
                if (!truthy(id)) continue;
                auto it = std::find_if(call_order.begin(), call_order.end(), [&](auto& e) { return e.first == id; });
                if (it != call_order.end()) {
                    it->second = i;
                } else {
                    call_order.emplace_back(id, i);
                }
            }
        } else if (role_is(msg, "user") && truthy(get(msg, "content_blocks"))) {
            ojson& blocks = msg["content_blocks"];
            std::vector<ojson> tool_blocks;
            for (const ojson& b : blocks)
                if (get(b, "type") == "tool_result") tool_blocks.push_back(b);
            if (tool_blocks.size() <= 1 || call_order.empty()) continue;
            std::stable_sort(tool_blocks.begin(), tool_blocks.end(), [&](const ojson& a, const ojson& b) {
                auto id = [](const ojson& blk) { return has_key(blk, "tool_use_id") ? blk.at("tool_use_id") : ojson(""); };
                return order_of(id(a)) < order_of(id(b));
            });
            size_t next = 0;
            for (ojson& b : blocks)
                if (get(b, "type") == "tool_result") b = tool_blocks[next++];
        }
    }
}

int find_last_user_index(const ojson& messages) {
    for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i)
        if (role_is(messages[i], "user") || role_is(messages[i], "developer")) return i;
    return -1;
}

// Before the last user turn: assistant reasoning is removed and developer (or unknown-role) messages go away.
ojson drop_thinking_messages(const ojson& messages) {
    int last_user = find_last_user_index(messages);
    ojson result = ojson::array();
    for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
        const ojson& msg = messages[i];
        bool keep = false;
        for (const char* r : {"user", "system", "tool", "latest_reminder", "direct_search_results"})
            keep = keep || role_is(msg, r);
        if (keep || i >= last_user) {
            result.push_back(msg);
        } else if (role_is(msg, "assistant")) {
            ojson m = msg;
            m.erase("reasoning_content");
            result.push_back(std::move(m));
        }
    }
    return result;
}

// ---- Rendering -------------------------------------------------------------------------------------------

Status check_tools(const ojson& tools) {
    if (!tools.is_array()) return make_error("message tools must be an array of {\"type\": \"function\", ...}");
    for (size_t i = 0; i < tools.size(); ++i)
        if (!has_key(tools[i], "function")) return make_error("tool " + std::to_string(i) + " has no \"function\"");
    return {};
}

Status check_tool_calls(const ojson& tool_calls) {
    if (!tool_calls.is_array()) return make_error("tool_calls must be an array");
    for (size_t i = 0; i < tool_calls.size(); ++i) {
        const ojson& fn = get(tool_calls[i], "function");
        if (!has_key(fn, "name") || !has_key(fn, "arguments")) {
            return make_error("tool call " + std::to_string(i) + " needs function.name and function.arguments");
        }
    }
    return {};
}

Result<std::string> render_tools(const ojson& tools) {
    DSV4_TRY(check_tools(tools));
    std::string out(kToolsPrefix);
    for (size_t i = 0; i < tools.size(); ++i) {
        if (i > 0) out += '\n';
        dump_python(tools[i].at("function"), out);
    }
    out += kToolsSuffix;
    return out;
}

std::string render_response_format(const ojson& response_format) {
    return std::string(kResponseFormatPrefix) + to_python_json(response_format);
}

// encode_arguments_to_dsml: one <parameter> line per argument; strings raw, everything else as JSON.
Result<std::string> encode_arguments_to_dsml(const ojson& arguments_field, const std::string& tool_name) {
    ojson args;
    if (arguments_field.is_string()) {
        args = ojson::parse(arguments_field.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
        // Unparseable arguments travel as one raw string parameter, as the official encoder does.
        if (args.is_discarded()) args = ojson{{"arguments", arguments_field}};
    } else {
        args = ojson{{"arguments", arguments_field}};
    }
    if (!args.is_object()) {
        return make_error("tool call '" + tool_name + "': arguments must be a JSON object, got " + args.type_name());
    }
    std::string out;
    bool first = true;
    for (const auto& [key, value] : args.items()) {
        if (!first) out += '\n';
        first = false;
        append(out, {"<", kDsml, "parameter name=\"", key, "\" string=\"", value.is_string() ? "true" : "false", "\">",
                     value.is_string() ? value.get_ref<const std::string&>() : to_python_json(value), "</", kDsml,
                     "parameter>"});
    }
    return out;
}

Result<std::string> render_tool_calls(const ojson& tool_calls) {
    DSV4_TRY(check_tool_calls(tool_calls));
    std::string invokes;
    for (size_t i = 0; i < tool_calls.size(); ++i) {
        const ojson& fn = tool_calls[i].at("function");
        DSV4_ASSIGN_OR_RETURN(std::string name, py_str(fn.at("name"), "tool call name"));
        DSV4_ASSIGN_OR_RETURN(std::string params, encode_arguments_to_dsml(fn.at("arguments"), name));
        if (i > 0) invokes += '\n';
        append(invokes, {"<", kDsml, "invoke name=\"", name, "\">\n", params, "\n</", kDsml, "invoke>"});
    }
    std::string out;
    append(out, {"\n\n<", kDsml, "tool_calls>\n", invokes, "\n</", kDsml, "tool_calls>"});
    return out;
}

Result<std::string> render_user_blocks(const ojson& blocks) {
    std::string out;
    bool first = true;
    for (const ojson& block : blocks) {
        if (!first) out += "\n\n";
        first = false;
        const ojson& type = get(block, "type");
        if (type == "text") {
            const ojson& text = has_key(block, "text") ? block.at("text") : ojson("");
            if (!text.is_string()) return make_error(std::string("user message content must be a string, not ") +
                                                     (text.is_null() ? "null" : text.type_name()));
            out += text.get<std::string>();
        } else if (type == "tool_result") {
            ojson content = has_key(block, "content") ? block.at("content") : ojson("");
            std::string text;
            if (content.is_array()) {
                bool first_part = true;
                for (const ojson& part : content) {
                    if (!part.is_object()) return make_error("tool message content parts must be objects");
                    if (!first_part) text += "\n\n";
                    first_part = false;
                    if (get(part, "type") == "text") {
                        const ojson& t = has_key(part, "text") ? part.at("text") : ojson("");
                        if (!t.is_string()) return make_error("tool message text part must hold a string");
                        text += t.get<std::string>();
                    } else {
                        DSV4_ASSIGN_OR_RETURN(std::string part_type, py_str(get(part, "type"), "content part type"));
                        text += "[Unsupported " + part_type + "]";
                    }
                }
            } else {
                DSV4_ASSIGN_OR_RETURN(text, py_str(content, "tool message content"));
            }
            out += "<tool_result>" + text + "</tool_result>";
        } else {
            DSV4_ASSIGN_OR_RETURN(std::string block_type, py_str(type, "content block type"));
            out += "[Unsupported " + block_type + "]";
        }
    }
    return out;
}

// render_message: one message plus the transition tokens that depend on what follows it.
Result<std::string> render_message(size_t index, const ojson& messages, const ChatOptions& opt, bool drop_thinking) {
    const ojson& msg = messages[index];
    const bool thinking = opt.thinking_mode == ThinkingMode::thinking;
    const int last_user = find_last_user_index(messages);
    const ojson& content = get(msg, "content");
    const ojson& tools = get(msg, "tools");
    const ojson& response_format = get(msg, "response_format");

    // The official encoder converts tools and tool_calls from the OpenAI shape for every role, so a malformed
    // list is an error even on a message that does not render it.
    if (truthy(tools)) DSV4_TRY(check_tools(tools));
    if (truthy(get(msg, "tool_calls"))) DSV4_TRY(check_tool_calls(msg.at("tool_calls")));

    std::string prompt;
    if (index == 0 && thinking && opt.reasoning_effort == ReasoningEffort::max) prompt += kReasoningEffortMaxPreamble;

    if (role_is(msg, "system")) {
        DSV4_ASSIGN_OR_RETURN(std::string text, py_str(truthy(content) ? content : ojson(""), "system content"));
        prompt += text;
        if (truthy(tools)) {
            DSV4_ASSIGN_OR_RETURN(std::string rendered, render_tools(tools));
            prompt += "\n\n" + rendered;
        }
        if (truthy(response_format)) prompt += "\n\n" + render_response_format(response_format);
    } else if (role_is(msg, "developer")) {
        if (!truthy(content)) return make_error("developer message " + std::to_string(index) + " has no content");
        if (!content.is_string()) return make_error("developer message content must be a string");
        prompt += std::string(kUser) + content.get<std::string>();
        if (truthy(tools)) {
            DSV4_ASSIGN_OR_RETURN(std::string rendered, render_tools(tools));
            prompt += "\n\n" + rendered;
        }
        if (truthy(response_format)) prompt += "\n\n" + render_response_format(response_format);
    } else if (role_is(msg, "user")) {
        prompt += kUser;
        const ojson& blocks = get(msg, "content_blocks");
        if (truthy(blocks)) {
            DSV4_ASSIGN_OR_RETURN(std::string text, render_user_blocks(blocks));
            prompt += text;
        } else {
            DSV4_ASSIGN_OR_RETURN(std::string text, py_str(truthy(content) ? content : ojson(""), "user content"));
            prompt += text;
        }
    } else if (role_is(msg, "latest_reminder")) {
        DSV4_ASSIGN_OR_RETURN(std::string text, py_str(content, "latest_reminder content"));
        prompt += std::string(kLatestReminder) + text;
    } else if (role_is(msg, "assistant")) {
        std::string tool_text;
        if (truthy(get(msg, "tool_calls"))) {
            DSV4_ASSIGN_OR_RETURN(tool_text, render_tool_calls(msg.at("tool_calls")));
        }
        DSV4_ASSIGN_OR_RETURN(std::string summary, py_str(truthy(content) ? content : ojson(""), "assistant content"));
        // The turn right after a task message is the task's answer: it never carries thinking.
        const bool prev_has_task = index >= 1 && !is_none(get(messages[index - 1], "task"));
        std::string thinking_part;
        if (thinking && !prev_has_task && (!drop_thinking || static_cast<int>(index) > last_user)) {
            const ojson& rc = get(msg, "reasoning_content");
            DSV4_ASSIGN_OR_RETURN(std::string reasoning, py_str(truthy(rc) ? rc : ojson(""), "reasoning_content"));
            thinking_part = reasoning + std::string(kThinkEnd);
        }
        prompt += thinking_part + summary + tool_text;
        if (!truthy(get(msg, "wo_eos"))) prompt += kEos;
    } else {
        // A tool message cannot get here: merge_tool_messages turned it into a user message.
        std::string role = get(msg, "role").is_string() ? get(msg, "role").get<std::string>() : get(msg, "role").dump();
        return make_error("message " + std::to_string(index) + ": unknown role '" + role + "'");
    }

    // Transition tokens: only when the next message is an assistant / latest_reminder turn, or at the end.
    if (index + 1 < messages.size() && !role_is(messages[index + 1], "assistant") &&
        !role_is(messages[index + 1], "latest_reminder")) {
        return prompt;
    }
    const ojson& task = get(msg, "task");
    if (!is_none(task)) {
        const TaskToken* found = nullptr;
        for (const auto& t : kTaskTokens)
            if (task.is_string() && task.get_ref<const std::string&>() == t.task) found = &t;
        if (!found) return make_error("message " + std::to_string(index) + ": invalid task " + task.dump());
        if (found->task != "action") {
            prompt += found->token;
        } else {
            prompt += kAssistant;
            prompt += thinking ? kThinkStart : kThinkEnd;
            prompt += found->token;
        }
    } else if (role_is(msg, "user") || role_is(msg, "developer")) {
        prompt += kAssistant;
        if (thinking && (!drop_thinking || static_cast<int>(index) >= last_user)) {
            prompt += kThinkStart;
        } else {
            prompt += kThinkEnd;
        }
    }
    return prompt;
}

}  // namespace

std::string to_python_json(const nlohmann::ordered_json& value) {
    std::string out;
    dump_python(value, out);
    return out;
}

std::string to_python_json_string(std::string_view text) {
    std::string out;
    dump_python_string(text, out);
    return out;
}

Result<ThinkingMode> parse_thinking_mode(std::string_view name) {
    if (name == "chat") return ThinkingMode::chat;
    if (name == "thinking") return ThinkingMode::thinking;
    return make_error("invalid thinking_mode '" + std::string(name) + "' (expected chat or thinking)");
}

Result<ReasoningEffort> parse_reasoning_effort(std::string_view name) {
    if (name.empty() || name == "none") return ReasoningEffort::none;
    if (name == "high") return ReasoningEffort::high;
    if (name == "max") return ReasoningEffort::max;
    return make_error("invalid reasoning_effort '" + std::string(name) + "' (expected high or max)");
}

const char* thinking_mode_name(ThinkingMode mode) { return mode == ThinkingMode::thinking ? "thinking" : "chat"; }

Result<ChatOptions> chat_options_from_json(const nlohmann::ordered_json& options) {
    ChatOptions opt;
    if (options.is_null()) return opt;
    if (!options.is_object()) return make_error("chat options must be a JSON object");
    for (const auto& [key, value] : options.items()) {
        if (key == "thinking_mode") {
            if (!value.is_string()) return make_error("chat option thinking_mode must be a string");
            DSV4_ASSIGN_OR_RETURN(opt.thinking_mode, parse_thinking_mode(value.get<std::string>()));
        } else if (key == "drop_thinking" || key == "add_default_bos_token") {
            if (!value.is_boolean()) return make_error("chat option " + key + " must be true or false");
            (key == "drop_thinking" ? opt.drop_thinking : opt.add_bos) = value.get<bool>();
        } else if (key == "reasoning_effort") {
            if (value.is_null()) {
                opt.reasoning_effort = ReasoningEffort::none;
            } else if (value.is_string() && value.get<std::string>() != "none" && !value.get<std::string>().empty()) {
                DSV4_ASSIGN_OR_RETURN(opt.reasoning_effort, parse_reasoning_effort(value.get<std::string>()));
            } else {
                return make_error("invalid reasoning_effort " + value.dump() + " (expected \"high\", \"max\" or null)");
            }
        } else {
            return make_error("unknown chat option '" + key + "'");
        }
    }
    return opt;
}

Result<std::string> encode_messages(const nlohmann::ordered_json& messages, const ChatOptions& options) {
    if (!messages.is_array()) return make_error("messages must be a JSON array");
    for (size_t i = 0; i < messages.size(); ++i)
        if (!messages[i].is_object()) return make_error("message " + std::to_string(i) + " is not a JSON object");

    ojson full = merge_tool_messages(messages);
    sort_tool_results_by_call_order(full);

    // Tool use needs the reasoning of every earlier step, so tools anywhere switch dropping off.
    bool drop = options.drop_thinking;
    for (const ojson& m : full)
        if (truthy(get(m, "tools"))) drop = false;
    if (options.thinking_mode == ThinkingMode::thinking && drop) full = drop_thinking_messages(full);

    std::string prompt = options.add_bos ? std::string(kBos) : std::string();
    for (size_t i = 0; i < full.size(); ++i) {
        DSV4_ASSIGN_OR_RETURN(std::string part, render_message(i, full, options, drop));
        prompt += part;
    }
    return prompt;
}

Result<nlohmann::ordered_json> attach_request_tools(nlohmann::ordered_json messages,
                                                    const nlohmann::ordered_json& tools,
                                                    const nlohmann::ordered_json& response_format) {
    if (!messages.is_array()) return make_error("messages must be a JSON array");
    const bool add_tools = truthy(tools);
    const bool add_format = truthy(response_format);
    if (add_tools && !tools.is_array()) return make_error("tools must be a JSON array");
    if (!add_tools && !add_format) return messages;

    const bool lead_system = !messages.empty() && role_is(messages[0], "system");
    if (lead_system && ((add_tools && truthy(get(messages[0], "tools"))) ||
                        (add_format && truthy(get(messages[0], "response_format"))))) {
        return make_error("tools/response_format given both for the request and on the system message");
    }
    if (!lead_system) messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", ""}});
    if (add_tools) messages[0]["tools"] = tools;
    if (add_format) messages[0]["response_format"] = response_format;
    return messages;
}

}  // namespace dsv4::chat
