// OpenAI response shapes: chat.completion / chat.completion.chunk / text_completion objects, usage, logprobs,
// the model list, and ChatAccumulator, which turns the text a chat request generates into OpenAI message
// deltas (reasoning_content, content, tool_calls) through the streaming DSML parser, so tool-call markup never
// reaches content. Engine-free: the server converts its token events into these plain inputs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_parser.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// What every object of one response repeats.
struct ResponseMeta {
    std::string id;      // chatcmpl-... / cmpl-...
    std::string model;
    int64_t created = 0; // unix seconds
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens restored from the prefix cache
};

// One generated token with its logprob and the most likely alternatives (most likely first).
struct TokenLogprobs {
    int32_t token = -1;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
};

// A tool call as OpenAI numbers it within the message.
struct ToolCallDelta {
    size_t index = 0;
    std::string id;
    chat::ToolCall call;
};

struct ChatDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Feeds a chat completion's text through ChatStreamParser and keeps the whole message. The generation may
// end without the EOS text (the engine stops on the EOS token, a stop string, or max_tokens), so finish()
// closes the message the way the grammar allows: after content, or after an unfinished reasoning. Output
// that breaks the grammar (malformed tool-call markup) ends the message where the markup began: what it held
// is never shown as content, and error() says why.
class ChatAccumulator {
public:
    // forced_prefix: assistant text the prompt already ended with (read before the generated text).
    // call_id_base: tool calls get ids call_id_base + "_" + index.
    ChatAccumulator(chat::ThinkingMode mode, std::string_view forced_prefix, std::string call_id_base);

    ChatDelta push(std::string_view text);
    ChatDelta finish();

    const chat::ParsedMessage& message() const { return message_; }
    const std::vector<std::string>& call_ids() const { return call_ids_; }
    bool has_tool_calls() const { return !message_.tool_calls.empty(); }
    const std::string& error() const { return error_; }

private:
    ChatDelta take(chat::StreamDelta d);

    chat::ChatStreamParser parser_;
    std::string call_id_base_;
    chat::ParsedMessage message_;
    std::vector<std::string> call_ids_;
    std::string error_;
    bool finished_ = false;
};

// Token text for JSON: invalid UTF-8 (a token holding part of a character) becomes U+FFFD.
std::string token_text_lossy(const Tokenizer& tok, int32_t token);

nlohmann::ordered_json usage_json(const Usage& usage);

// OpenAI's finish_reason for a generation that ended normally: "length" when max_tokens or the context cut
// it, else "tool_calls" when the message calls tools, else "stop".
const char* finish_reason_name(bool cut_by_length, bool has_tool_calls);

// ---- chat.completion -------------------------------------------------------------------------------------

// logprobs.content entry: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}.
nlohmann::ordered_json chat_logprob_entry(const Tokenizer& tok, const TokenLogprobs& lp);

// The non-streaming response. `logprobs` is the array of chat_logprob_entry (or null when not asked).
nlohmann::ordered_json chat_completion_json(const ResponseMeta& meta, const chat::ParsedMessage& message,
                                    const std::vector<std::string>& call_ids, const std::string& finish_reason,
                                    const Usage& usage, const nlohmann::ordered_json& logprobs);

// One chat.completion.chunk with the given delta; finish_reason and logprobs may be null. With
// include_usage every chunk carries "usage": null (OpenAI's shape), the last one the totals.
nlohmann::ordered_json chat_chunk(const ResponseMeta& meta, nlohmann::ordered_json delta, const nlohmann::ordered_json& finish_reason,
                          const nlohmann::ordered_json& logprobs, bool include_usage);
// Chunks for one accumulator delta: reasoning, content and tool calls each in their own chunk, in order.
std::vector<nlohmann::ordered_json> chat_delta_chunks(const ResponseMeta& meta, const ChatDelta& delta, bool include_usage);
// The usage chunk sent last when stream_options.include_usage is set: no choices.
nlohmann::ordered_json chat_usage_chunk(const ResponseMeta& meta, const Usage& usage);

// ---- text_completion -------------------------------------------------------------------------------------

// Legacy logprobs: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
class CompletionLogprobs {
public:
    void add(const Tokenizer& tok, const TokenLogprobs& lp, int64_t text_offset);
    // A token nothing predicts (the first prompt token of an echoed prompt): null logprob and alternatives.
    void add_unscored(const Tokenizer& tok, int32_t token, int64_t text_offset);
    bool empty() const { return tokens_.empty(); }
    nlohmann::ordered_json to_json() const;
    void clear();

private:
    nlohmann::ordered_json tokens_ = nlohmann::ordered_json::array(), logprobs_ = nlohmann::ordered_json::array();
    nlohmann::ordered_json top_ = nlohmann::ordered_json::array(), offsets_ = nlohmann::ordered_json::array();
};

nlohmann::ordered_json completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                               const Usage& usage, const nlohmann::ordered_json& logprobs);
nlohmann::ordered_json completion_chunk(const ResponseMeta& meta, const std::string& text, const nlohmann::ordered_json& finish_reason,
                                const nlohmann::ordered_json& logprobs, bool include_usage);
nlohmann::ordered_json completion_usage_chunk(const ResponseMeta& meta, const Usage& usage);

// ---- misc ------------------------------------------------------------------------------------------------

nlohmann::ordered_json models_json(const std::string& model, int64_t created, int64_t n_ctx);
// The same list with one entry per served id (the model's name and its aliases).
nlohmann::ordered_json models_json(const std::vector<std::string>& ids, int64_t created, int64_t n_ctx);

// Serialises for the wire; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string dump_json(const nlohmann::ordered_json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_data(const nlohmann::ordered_json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace dsv4::server
