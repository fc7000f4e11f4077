#include "cli/chat_display.h"

#include <unistd.h>

namespace dsv4::cli {

ChatDisplay::ChatDisplay(chat::ThinkingMode mode, std::FILE* out)
    : parser_(mode), out_(out), tty_(isatty(fileno(out)) != 0) {}

void ChatDisplay::show(const chat::StreamDelta& d) {
    if (!d.reasoning.empty()) {
        if (!in_reasoning_ && tty_) std::fputs("\x1b[2m", out_);
        in_reasoning_ = true;
        std::fwrite(d.reasoning.data(), 1, d.reasoning.size(), out_);
        reasoning_ += d.reasoning;
    }
    if (!d.content.empty() || !d.tool_calls.empty()) {
        if (in_reasoning_) {
            if (tty_) std::fputs("\x1b[0m", out_);
            std::fputs("\n\n", out_);
            in_reasoning_ = false;
        }
        std::fwrite(d.content.data(), 1, d.content.size(), out_);
        content_ += d.content;
        for (const auto& c : d.tool_calls) std::fprintf(out_, "\n[tool call] %s(%s)\n", c.name.c_str(), c.arguments.c_str());
    }
    std::fflush(out_);
}

void ChatDisplay::feed(std::string_view piece) {
    raw_ += piece;
    if (failed_) {
        std::fwrite(piece.data(), 1, piece.size(), out_);
        std::fflush(out_);
        return;
    }
    auto d = parser_.feed(piece);
    if (!d.ok()) {
        // Not the chat grammar: show what the parser held back, then raw text from here on.
        failed_ = true;
        if (in_reasoning_ && tty_) std::fputs("\x1b[0m", out_);
        std::string rest = raw_.substr(std::min(raw_.size(), raw_shown_));
        std::fwrite(rest.data(), 1, rest.size(), out_);
        std::fflush(out_);
        return;
    }
    raw_shown_ = raw_.size() - parser_.held_bytes();
    show(*d);
}

void ChatDisplay::finish() {
    if (!failed_) {
        auto d = parser_.finish();
        if (d.ok()) {
            show(*d);
        } else {
            std::string rest = raw_.substr(std::min(raw_.size(), raw_shown_));
            std::fwrite(rest.data(), 1, rest.size(), out_);
        }
    }
    if (in_reasoning_ && tty_) std::fputs("\x1b[0m", out_);
    std::fputs("\n", out_);
    std::fflush(out_);
}

}  // namespace dsv4::cli
