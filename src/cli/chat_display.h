// Renders a streamed chat completion on a terminal: reasoning (dimmed on a TTY) apart from the answer, tool
// calls as JSON lines. Falls back to the raw text when the completion does not follow the chat grammar
// (random-weight test models do that).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "tokenizer/chat_parser.h"

namespace dsv4::cli {

class ChatDisplay {
public:
    ChatDisplay(chat::ThinkingMode mode, std::FILE* out);
    void feed(std::string_view piece);
    void finish();
    const std::string& reasoning() const { return reasoning_; }
    const std::string& content() const { return content_; }
    const std::string& raw() const { return raw_; }

private:
    void show(const chat::StreamDelta& d);
    chat::ChatStreamParser parser_;
    std::FILE* out_;
    bool tty_;
    bool in_reasoning_ = false;
    bool failed_ = false;
    std::string raw_, reasoning_, content_;
    size_t raw_shown_ = 0;  // raw bytes already represented on screen (for the fallback)
};

}  // namespace dsv4::cli
