// DeepSeek-V4 chat format, encoder side: renders an OpenAI-style message list into the prompt text the model
// was trained on. A port of the official `encoding/encoding_dsv4.py` (encode_messages and its helpers); the
// marker strings and template texts below are data that must match the official ones byte for byte.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4::chat {

// Special-token texts. The tokenizer maps them to ids; here they are plain strings.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
// The DSML tool-call markup the model writes and the parser reads.
inline constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";  // how a tool-call block opens
inline constexpr std::string_view kToolCallsEnd = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeStart = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeEnd = "</｜DSML｜invoke";
inline constexpr std::string_view kParameterStart = "<｜DSML｜parameter";
inline constexpr std::string_view kParameterEnd = "/｜DSML｜parameter";

enum class ThinkingMode { chat, thinking };
// "high" renders exactly like no effort; only "max" adds the preamble (official behaviour).
enum class ReasoningEffort { none, high, max };

struct ChatOptions {
    ThinkingMode thinking_mode = ThinkingMode::chat;
    // Drop reasoning_content of assistant turns before the last user turn (thinking mode only). The
    // encoder turns this off by itself when any message carries tools, as the official one does.
    bool drop_thinking = true;
    ReasoningEffort reasoning_effort = ReasoningEffort::none;
    bool add_bos = true;  // official add_default_bos_token
};

Result<ThinkingMode> parse_thinking_mode(std::string_view name);
Result<ReasoningEffort> parse_reasoning_effort(std::string_view name);
const char* thinking_mode_name(ThinkingMode mode);

// Options as the fixtures and the official encode_messages keyword arguments spell them:
// {"thinking_mode": "chat"|"thinking", "drop_thinking": bool, "reasoning_effort": "high"|"max"|null,
//  "add_default_bos_token": bool}. Unknown keys are rejected so that a new option is never silently ignored.
Result<ChatOptions> chat_options_from_json(const nlohmann::ordered_json& options);

// Renders `messages` (a JSON array of message objects: role system|developer|user|assistant|tool|
// latest_reminder, with content, reasoning_content, tool_calls, tool_call_id, tools, response_format, task,
// wo_eos as in the official encoder). Returns an error where the official encoder raises.
// Pass an ordered_json parsed from the request: the tool schemas are rendered in their original key order,
// which a key-sorted nlohmann::json would lose.
Result<std::string> encode_messages(const nlohmann::ordered_json& messages, const ChatOptions& options);

// Maps OpenAI's request-level `tools` / `response_format` onto the message list the way the official encoder
// takes them: onto the leading system message when it has none of its own, else onto a new empty system
// message inserted first. Null or empty arguments leave the list unchanged.
Result<nlohmann::ordered_json> attach_request_tools(nlohmann::ordered_json messages,
                                                    const nlohmann::ordered_json& tools,
                                                    const nlohmann::ordered_json& response_format);

// Python's json.dumps(value, ensure_ascii=False) with its default separators (", " and ": ") and float repr;
// the official encoder serialises tool schemas and tool-call arguments this way.
std::string to_python_json(const nlohmann::ordered_json& value);
// Python's json.dumps of one string (quotes included).
std::string to_python_json_string(std::string_view text);

}  // namespace dsv4::chat
