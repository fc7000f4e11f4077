// DeepSeek-V4 completion parser. parse_completion follows the official parse_message_from_completion_text
// step by step (earliest-stop reads, the DSML tool-call grammar, the final special-token check). The two
// regular expressions it uses are reproduced as hand matchers with Python's exact semantics, including `$`
// also matching before one trailing newline and `\s` being Unicode whitespace. ChatStreamParser runs the same
// grammar as a state machine over a growing buffer; it only acts on a marker once no earlier marker can still
// appear, which is what makes its output independent of how the text is split.
#include "tokenizer/chat_parser.h"

#include <initializer_list>
#include <optional>
#include <span>
#include <utility>

namespace dsv4::chat {
namespace {

using ojson = nlohmann::ordered_json;
constexpr size_t npos = std::string_view::npos;

// ---- Pieces shared by both parsers ----------------------------------------------------------------------

// Python's str.isspace() set (what `\s` matches in a str pattern).
bool is_py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// Decodes one UTF-8 code point at s[i]; returns its byte length, 0 when malformed.
size_t utf8_decode(std::string_view s, size_t i, uint32_t& cp) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = b(i);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return 0;
    cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
        if ((b(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    return len;
}

// Where a pattern ending in `tail$` can match: Python's `$` (no MULTILINE) matches at the end of the text or
// just before a newline that ends it. For the two tails used here (`">\n` and `<`) at most one place fits.
bool ends_with_at_dollar(std::string_view c, std::string_view tail, size_t& tail_pos) {
    if (c.size() >= tail.size() + 1 && c.back() == '\n' &&
        c.substr(c.size() - 1 - tail.size(), tail.size()) == tail) {
        tail_pos = c.size() - 1 - tail.size();
        return true;
    }
    if (c.size() >= tail.size() && c.substr(c.size() - tail.size()) == tail) {
        tail_pos = c.size() - tail.size();
        return true;
    }
    return false;
}

// re.findall(r'^\s*name="(.*?)">\n$', c, DOTALL) giving exactly one match.
std::optional<std::string> match_invoke_name(std::string_view c) {
    size_t i = 0;
    while (i < c.size()) {
        uint32_t cp = 0;
        size_t len = utf8_decode(c, i, cp);
        if (len == 0 || !is_py_space(cp)) break;
        i += len;
    }
    constexpr std::string_view kOpen = "name=\"";
    if (c.substr(i, kOpen.size()) != kOpen) return std::nullopt;
    const size_t name_begin = i + kOpen.size();
    size_t tail_pos = 0;
    if (!ends_with_at_dollar(c, "\">\n", tail_pos) || tail_pos < name_begin) return std::nullopt;
    return std::string(c.substr(name_begin, tail_pos - name_begin));
}

struct Param {
    std::string name;
    std::string value;
    bool is_string = false;
};

// re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', c, DOTALL) giving exactly one match.
std::optional<Param> match_parameter(std::string_view c) {
    constexpr std::string_view kOpen = " name=\"";
    if (c.substr(0, kOpen.size()) != kOpen) return std::nullopt;
    size_t value_end = 0;
    if (!ends_with_at_dollar(c, "<", value_end)) return std::nullopt;
    // The lazy name group stops at the first `" string="true|false">` that leaves room for the value.
    for (size_t k = c.find("\" string=\"", kOpen.size()); k != npos; k = c.find("\" string=\"", k + 1)) {
        for (std::string_view flag : {std::string_view("true"), std::string_view("false")}) {
            size_t f = k + 10;
            if (c.substr(f, flag.size()) != flag || c.substr(f + flag.size(), 2) != "\">") continue;
            size_t value_begin = f + flag.size() + 2;
            if (value_begin > value_end) continue;
            return Param{std::string(c.substr(kOpen.size(), k - kOpen.size())),
                         std::string(c.substr(value_begin, value_end - value_begin)), flag == "true"};
        }
    }
    return std::nullopt;
}

// decode_dsml_to_arguments: string parameters are JSON-quoted, the others are pasted verbatim.
ToolCall make_tool_call(std::string name, const std::vector<std::pair<std::string, std::pair<std::string, bool>>>& args) {
    std::string json = "{";
    for (size_t i = 0; i < args.size(); ++i) {
        if (i > 0) json += ", ";
        json += to_python_json_string(args[i].first);
        json += ": ";
        json += args[i].second.second ? to_python_json_string(args[i].second.first) : args[i].second.first;
    }
    json += "}";
    return ToolCall{std::move(name), std::move(json)};
}

// ---- One-shot parser ------------------------------------------------------------------------------------

struct Read {
    size_t next;               // index after the stop marker (or the end of the text)
    std::string_view content;  // text before it
    int stop;                  // which marker, -1 for none (the text ran out)
};

// _read_until_stop: the earliest occurrence of any stop; on a tie the one listed first.
Read read_until_stop(std::string_view text, size_t index, std::initializer_list<std::string_view> stops) {
    size_t best = text.size();
    int which = -1;
    int i = 0;
    for (std::string_view s : stops) {
        size_t p = text.find(s, index);
        if (p != npos && p < best) {
            best = p;
            which = i;
        }
        ++i;
    }
    if (which < 0) return Read{text.size(), text.substr(index), -1};
    return Read{best + std::data(stops)[which].size(), text.substr(index, best - index), which};
}

struct ToolCallsRead {
    size_t next;
    std::vector<ToolCall> calls;
};

Result<ToolCallsRead> parse_tool_calls(std::string_view text, size_t index) {
    ToolCallsRead out;
    while (index < text.size()) {
        Read r = read_until_stop(text, index, {kInvokeStart, kToolCallsEnd});
        index = r.next;
        if (r.content != ">\n") return make_error("tool call format error: expected '>\\n' before an invoke");
        if (r.stop == 1) break;
        if (r.stop < 0) return make_error("missing special token in tool calls");

        r = read_until_stop(text, index, {kParameterStart, kInvokeEnd});
        index = r.next;
        std::optional<std::string> name = match_invoke_name(r.content);
        if (!name) return make_error("tool name format error: '" + std::string(r.content) + "'");
        std::vector<std::pair<std::string, std::pair<std::string, bool>>> args;
        while (r.stop == 0) {
            r = read_until_stop(text, index, {kParameterEnd});
            index = r.next;
            std::optional<Param> p = match_parameter(r.content);
            if (!p) return make_error("parameter format error: '" + std::string(r.content) + "'");
            for (const auto& a : args)
                if (a.first == p->name) return make_error("duplicate parameter name '" + p->name + "'");
            args.push_back({p->name, {p->value, p->is_string}});
            r = read_until_stop(text, index, {kParameterStart, kInvokeEnd});
            index = r.next;
            if (r.content != ">\n") return make_error("parameter format error: expected '>\\n' after a parameter");
        }
        out.calls.push_back(make_tool_call(std::move(*name), args));
    }
    out.next = index;
    return out;
}

// ---- Streaming helpers ----------------------------------------------------------------------------------

enum class ScanKind { found, none, wait };
struct Scan {
    ScanKind kind;
    size_t pos;  // found: the marker's start; wait: how much text is decided (no marker can start before it)
    int which;   // found: the marker's index
};

// The streaming counterpart of read_until_stop: a marker found in the buffer is only the official parser's
// stop if no earlier marker (or an earlier-listed one at the same place) can still complete with more text.
Scan scan_markers(std::string_view buf, std::span<const std::string_view> markers, bool final) {
    size_t best = npos;
    int which = -1;
    size_t max_len = 0;
    int i = 0;
    for (std::string_view m : markers) {
        size_t p = buf.find(m);
        if (p != npos && p < best) {
            best = p;
            which = i;
        }
        max_len = std::max(max_len, m.size());
        ++i;
    }
    if (!final) {
        size_t q = buf.size() >= max_len ? buf.size() - max_len + 1 : 0;
        for (; q < buf.size() && (best == npos || q <= best); ++q) {
            std::string_view tail = buf.substr(q);
            int k = 0;
            for (std::string_view m : markers) {
                if (tail.size() < m.size() && m.substr(0, tail.size()) == tail && (q < best || k < which)) {
                    return Scan{ScanKind::wait, q, -1};
                }
                ++k;
            }
        }
        if (best == npos) return Scan{ScanKind::wait, buf.size(), -1};
    }
    if (best == npos) return Scan{ScanKind::none, buf.size(), -1};
    return Scan{ScanKind::found, best, which};
}

// Shortens a prefix that ends the buffer so it does not cut a UTF-8 sequence in two.
size_t utf8_safe_prefix(std::string_view buf, size_t n) {
    if (n != buf.size() || n == 0) return n;
    size_t i = n;
    int cont = 0;
    while (i > 0 && cont < 3 && (static_cast<unsigned char>(buf[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++cont;
    }
    if (i == 0) return n;
    unsigned char lead = static_cast<unsigned char>(buf[i - 1]);
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return (lead >= 0xC0 && n - (i - 1) < need) ? i - 1 : n;
}

bool is_prefix_of(std::string_view prefix, std::string_view whole) { return whole.substr(0, prefix.size()) == prefix; }

// Marker sets per streaming phase; the first entries are the official parser's stops, in its order, and the
// rest are the special tokens whose appearance makes the official parser reject the text.
constexpr std::string_view kReasoningMarkers[] = {kThinkEnd, kToolCallsStart, kBos, kEos, kThinkStart, kDsml};
constexpr std::string_view kContentMarkers[] = {kEos, kToolCallsStart, kBos, kThinkStart, kThinkEnd, kDsml};
constexpr std::string_view kBlockMarkers[] = {kInvokeStart, kToolCallsEnd};
constexpr std::string_view kInvokeMarkers[] = {kParameterStart, kInvokeEnd};
constexpr std::string_view kParameterMarkers[] = {kParameterEnd};

}  // namespace

nlohmann::ordered_json to_openai_message(const ParsedMessage& message) {
    ojson calls = ojson::array();
    for (const ToolCall& c : message.tool_calls)
        calls.push_back({{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return ojson{{"role", "assistant"},
                 {"content", message.content},
                 {"reasoning_content", message.reasoning_content},
                 {"tool_calls", std::move(calls)}};
}

Result<ParsedMessage> parse_completion(std::string_view text, ThinkingMode mode) {
    ParsedMessage msg;
    size_t index = 0;
    if (mode == ThinkingMode::thinking) {
        Read r = read_until_stop(text, index, {kThinkEnd, kToolCallsStart});
        msg.reasoning_content = std::string(r.content);
        if (r.stop != 0) return make_error("invalid thinking format: missing </think>");
        index = r.next;
    }
    Read r = read_until_stop(text, index, {kEos, kToolCallsStart});
    msg.content = std::string(r.content);
    index = r.next;
    int stop = r.stop;
    if (stop == 1) {
        DSV4_ASSIGN_OR_RETURN(ToolCallsRead calls, parse_tool_calls(text, index));
        msg.tool_calls = std::move(calls.calls);
        Read tail = read_until_stop(text, calls.next, {kEos});
        if (!tail.content.empty()) return make_error("unexpected content after tool calls");
        index = tail.next;
        stop = tail.stop < 0 ? -1 : 0;
    } else if (stop != 0) {
        return make_error("invalid format: missing EOS token");
    }
    if (index != text.size() || stop > 0) return make_error("unexpected content at end");
    for (std::string_view sp : {kBos, kEos, kThinkStart, kThinkEnd, kDsml}) {
        if (msg.content.find(sp) != npos || msg.reasoning_content.find(sp) != npos) {
            return make_error("unexpected special token '" + std::string(sp) + "' in content");
        }
    }
    return msg;
}

ChatStreamParser::ChatStreamParser(ThinkingMode mode)
    : phase_(mode == ThinkingMode::thinking ? Phase::reasoning : Phase::content) {}

Error ChatStreamParser::fail(std::string message) {
    phase_ = Phase::failed;
    error_ = std::move(message);
    buffer_.clear();
    return make_error(error_);
}

Result<StreamDelta> ChatStreamParser::feed(std::string_view piece) {
    if (phase_ == Phase::failed) return make_error(error_);
    buffer_.append(piece);
    return step(false);
}

Result<StreamDelta> ChatStreamParser::finish() {
    if (phase_ == Phase::failed) return make_error(error_);
    return step(true);
}

Result<StreamDelta> ChatStreamParser::step(bool final) {
    StreamDelta d;
    auto emit_call = [&] {
        d.tool_calls.push_back(make_tool_call(std::move(call_name_), call_args_));
        call_name_.clear();
        call_args_.clear();
    };
    for (;;) {
        switch (phase_) {
            case Phase::reasoning:
            case Phase::content: {
                const bool reasoning = phase_ == Phase::reasoning;
                std::string& out = reasoning ? d.reasoning : d.content;
                Scan s = scan_markers(buffer_, reasoning ? kReasoningMarkers : kContentMarkers, final);
                if (s.kind == ScanKind::none) {
                    return fail(reasoning ? "invalid thinking format: missing </think>"
                                          : "invalid format: missing EOS token");
                }
                if (s.kind == ScanKind::wait) {
                    size_t n = utf8_safe_prefix(buffer_, s.pos);
                    out.append(buffer_, 0, n);
                    consume(n);
                    return d;
                }
                out.append(buffer_, 0, s.pos);
                std::string_view marker = (reasoning ? kReasoningMarkers : kContentMarkers)[s.which];
                if (s.which == 0) {  // </think> ends the reasoning, EOS ends the message
                    consume(s.pos + marker.size());
                    phase_ = reasoning ? Phase::content : Phase::after_eos;
                } else if (!reasoning && s.which == 1) {
                    consume(s.pos + marker.size());
                    phase_ = Phase::tool_block;
                } else if (reasoning && s.which == 1) {
                    return fail("invalid thinking format: tool calls before </think>");
                } else {
                    return fail("unexpected special token '" + std::string(marker) + "' in " +
                                (reasoning ? "reasoning" : "content"));
                }
                break;
            }
            case Phase::tool_block:
            case Phase::tool_param_after: {
                const bool block = phase_ == Phase::tool_block;
                // The official loop stops when the text ends between two invokes.
                if (block && buffer_.empty()) return d;
                Scan s = scan_markers(buffer_, block ? kBlockMarkers : kInvokeMarkers, final);
                std::string_view decided = std::string_view(buffer_).substr(0, s.pos);
                if (s.kind == ScanKind::wait) {
                    if (!is_prefix_of(decided, ">\n")) return fail("tool call format error: expected '>\\n'");
                    return d;
                }
                if (decided != ">\n") return fail("tool call format error: expected '>\\n'");
                if (s.kind == ScanKind::none) {
                    if (block) return fail("missing special token in tool calls");
                    consume(buffer_.size());
                    emit_call();
                    phase_ = Phase::tool_block;
                    break;
                }
                std::string_view marker = (block ? kBlockMarkers : kInvokeMarkers)[s.which];
                consume(s.pos + marker.size());
                if (block) {
                    phase_ = s.which == 0 ? Phase::tool_name : Phase::after_tools;
                } else if (s.which == 0) {
                    phase_ = Phase::tool_param;
                } else {
                    emit_call();
                    phase_ = Phase::tool_block;
                }
                break;
            }
            case Phase::tool_name: {
                Scan s = scan_markers(buffer_, kInvokeMarkers, final);
                if (s.kind == ScanKind::wait) return d;
                std::optional<std::string> name = match_invoke_name(std::string_view(buffer_).substr(0, s.pos));
                if (!name) return fail("tool name format error");
                call_name_ = std::move(*name);
                call_args_.clear();
                if (s.kind == ScanKind::found && s.which == 0) {
                    consume(s.pos + kParameterStart.size());
                    phase_ = Phase::tool_param;
                } else {
                    consume(s.kind == ScanKind::found ? s.pos + kInvokeEnd.size() : buffer_.size());
                    emit_call();
                    phase_ = Phase::tool_block;
                }
                break;
            }
            case Phase::tool_param: {
                Scan s = scan_markers(buffer_, kParameterMarkers, final);
                if (s.kind == ScanKind::wait) return d;
                std::optional<Param> p = match_parameter(std::string_view(buffer_).substr(0, s.pos));
                if (!p) return fail("parameter format error");
                for (const auto& a : call_args_)
                    if (a.first == p->name) return fail("duplicate parameter name '" + p->name + "'");
                call_args_.push_back({std::move(p->name), {std::move(p->value), p->is_string}});
                consume(s.kind == ScanKind::found ? s.pos + kParameterEnd.size() : buffer_.size());
                phase_ = Phase::tool_param_after;
                break;
            }
            case Phase::after_tools: {
                if (buffer_.empty()) return d;
                if (is_prefix_of(kEos, buffer_)) {
                    consume(kEos.size());
                    phase_ = Phase::after_eos;
                    break;
                }
                if (!final && is_prefix_of(buffer_, kEos)) return d;
                return fail("unexpected content after tool calls");
            }
            case Phase::after_eos:
                if (!buffer_.empty()) return fail("unexpected content after the end of the message");
                return d;
            case Phase::failed: return make_error(error_);
        }
    }
}

}  // namespace dsv4::chat
