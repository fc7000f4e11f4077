// DeepSeek-V4 chat format, parser side: turns the text a model generated after the prompt into an assistant
// message {reasoning_content, content, tool_calls}. parse_completion is a port of the official
// parse_message_from_completion_text (it rejects what the official parser rejects); ChatStreamParser is an
// independent incremental implementation of the same grammar for streaming, which never lets a piece of
// markup (or a prefix of one that may still become markup) out as reasoning or content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_format.h"

namespace dsv4::chat {

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object as text, built exactly as the official decoder builds it
    bool operator==(const ToolCall&) const = default;
};

struct ParsedMessage {
    std::string reasoning_content;
    std::string content;
    std::vector<ToolCall> tool_calls;
    bool operator==(const ParsedMessage&) const = default;
};

// {"role": "assistant", "content", "reasoning_content", "tool_calls": [{"type": "function",
//  "function": {"name", "arguments"}}]}: the official parser's output shape (OpenAI's message shape).
nlohmann::ordered_json to_openai_message(const ParsedMessage& message);

// `text` is the whole completion, ending with the EOS text; in thinking mode it starts inside the reasoning
// (the prompt ended with "<think>").
Result<ParsedMessage> parse_completion(std::string_view text, ThinkingMode mode);

// What one feed() makes final: reasoning and content text to append, and tool calls that are complete.
struct StreamDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Incremental parser: feed the completion in pieces of any size (token texts, bytes); the concatenated deltas
// equal parse_completion of the concatenated text, and an input parse_completion rejects makes feed() or
// finish() fail. Text that could still be the start of a marker ("</think>", EOS, the DSML tool-call opener,
// a special token) is held back until it is decided, and so is an incomplete UTF-8 sequence at the end.
// After an error every later call returns the same error.
class ChatStreamParser {
public:
    explicit ChatStreamParser(ThinkingMode mode);

    Result<StreamDelta> feed(std::string_view piece);
    // The completion is over: flush what was held back and check that it ended where the grammar allows.
    Result<StreamDelta> finish();
    // The EOS text has been read (later text would be an error).
    bool saw_eos() const { return phase_ == Phase::after_eos; }
    // Bytes read but not yet decided.
    size_t held_bytes() const { return buffer_.size(); }

private:
    enum class Phase {
        reasoning,
        content,
        tool_block,        // between invokes: expects ">\n" then <invoke or the block's end
        tool_name,         // after "<｜DSML｜invoke": ` name="...">\n`
        tool_param,        // after "<｜DSML｜parameter": ` name=".." string="..">value<`
        tool_param_after,  // after "/｜DSML｜parameter": expects ">\n"
        after_tools,       // after the block's end: only EOS may follow
        after_eos,
        failed,
    };

    Result<StreamDelta> step(bool final);
    Error fail(std::string message);
    void consume(size_t n) { buffer_.erase(0, n); }

    Phase phase_;
    std::string buffer_;  // undecided input
    std::string error_;
    // The tool call being read.
    std::string call_name_;
    std::vector<std::pair<std::string, std::pair<std::string, bool>>> call_args_;  // name -> (value, is string)
};

}  // namespace dsv4::chat
