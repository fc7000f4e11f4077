// Tests for the DeepSeek-V4 completion parser: the official-parser fixture, quirks of the official grammar
// (expected values taken from the official parse_message_from_completion_text), encode -> parse round trips,
// and the streaming parser, which must give the one-shot result for every way of splitting the text while
// never emitting markup, checked on the fixtures and on thousands of generated (often malformed) completions.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_format.h"
#include "tokenizer/chat_parser.h"

namespace {

using dsv4::chat::ChatStreamParser;
using dsv4::chat::ParsedMessage;
using dsv4::chat::ThinkingMode;
using dsv4::chat::ToolCall;
using ojson = nlohmann::ordered_json;

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kHdr = "\n\n<｜DSML｜tool_calls>\n";

ojson load_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ojson::parse(ss.str());
}

ThinkingMode mode_of(const ojson& c) {
    return c["thinking_mode"] == "thinking" ? ThinkingMode::thinking : ThinkingMode::chat;
}

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

struct StreamRun {
    bool ok = false;
    ParsedMessage msg;
};

// Feeds `text` cut at `cuts` (sorted byte offsets); checks every delta on the way.
StreamRun run_stream(const std::string& text, ThinkingMode mode, const std::vector<size_t>& cuts, bool check_utf8) {
    ChatStreamParser p(mode);
    StreamRun run;
    auto take = [&](const dsv4::chat::StreamDelta& d) {
        for (const std::string* s : {&d.reasoning, &d.content}) {
            EXPECT_EQ(s->find("｜DSML｜"), std::string::npos) << "markup leaked: " << *s;
            EXPECT_EQ(s->find("</think>"), std::string::npos) << "markup leaked: " << *s;
            EXPECT_EQ(s->find(kEos), std::string::npos) << "markup leaked: " << *s;
            if (check_utf8) {
                EXPECT_TRUE(valid_utf8(*s)) << "split UTF-8 in a delta";
            }
        }
        run.msg.reasoning_content += d.reasoning;
        run.msg.content += d.content;
        run.msg.tool_calls.insert(run.msg.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    };
    size_t prev = 0;
    std::vector<size_t> bounds = cuts;
    bounds.push_back(text.size());
    for (size_t b : bounds) {
        auto d = p.feed(std::string_view(text).substr(prev, b - prev));
        prev = b;
        if (!d.ok()) return run;
        take(*d);
    }
    auto d = p.finish();
    if (!d.ok()) return run;
    take(*d);
    run.ok = true;
    return run;
}

std::vector<size_t> random_cuts(size_t len, std::mt19937_64& rng, size_t max_cuts) {
    std::vector<size_t> cuts;
    if (len == 0) return cuts;
    size_t n = rng() % (max_cuts + 1);
    for (size_t i = 0; i < n; ++i) cuts.push_back(rng() % (len + 1));
    std::sort(cuts.begin(), cuts.end());
    return cuts;
}

// The streaming parser agrees with the one-shot parser on `text` for whole, byte-by-byte and random splits.
void expect_stream_matches(const std::string& text, ThinkingMode mode, std::mt19937_64& rng, int n_random,
                           bool check_utf8) {
    auto oneshot = dsv4::chat::parse_completion(text, mode);
    std::vector<std::vector<size_t>> splits = {{}};
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    splits.push_back(every);
    for (int i = 0; i < n_random; ++i) splits.push_back(random_cuts(text.size(), rng, 12));
    for (const auto& cuts : splits) {
        StreamRun s = run_stream(text, mode, cuts, check_utf8 && valid_utf8(text));
        ASSERT_EQ(s.ok, oneshot.ok()) << "one-shot " << (oneshot.ok() ? "accepts" : "rejects: " + oneshot.error())
                                      << ", stream disagrees; " << cuts.size() << " cuts; text: " << ojson(text).dump();
        if (oneshot.ok()) {
            ASSERT_EQ(s.msg, *oneshot) << "text: " << ojson(text).dump() << " cuts: " << ojson(cuts).dump();
        }
    }
}

TEST(ChatParser, MatchesEveryFixtureCase) {
    ojson cases = load_json(std::string(DSV4_SHARED_DIR) + "/fixtures/chat/parse_cases.json");
    ASSERT_TRUE(cases.is_array());
    ASSERT_GE(cases.size(), 8u);
    for (const ojson& c : cases) {
        const std::string text = c["text"].get<std::string>();
        SCOPED_TRACE(ojson(text).dump());
        auto r = dsv4::chat::parse_completion(text, mode_of(c));
        if (!c["error"].is_null()) {
            EXPECT_FALSE(r.ok()) << "the official parser raises " << c["error"].dump();
            continue;
        }
        ASSERT_TRUE(r.ok()) << r.error();
        const ojson& want = c["message"];
        EXPECT_EQ(r->content, want["content"].get<std::string>());
        EXPECT_EQ(r->reasoning_content, want["reasoning_content"].get<std::string>());
        ASSERT_EQ(r->tool_calls.size(), want["tool_calls"].size());
        for (size_t i = 0; i < r->tool_calls.size(); ++i) {
            const ojson& fn = want["tool_calls"][i]["function"];
            EXPECT_EQ(want["tool_calls"][i]["type"], "function");
            EXPECT_EQ(r->tool_calls[i].name, fn["name"].get<std::string>());
            EXPECT_EQ(ojson::parse(r->tool_calls[i].arguments), ojson::parse(fn["arguments"].get<std::string>()));
        }
        ojson as_openai = dsv4::chat::to_openai_message(*r);
        EXPECT_EQ(as_openai["role"], "assistant");
        EXPECT_EQ(as_openai["tool_calls"].size(), want["tool_calls"].size());
    }
}

TEST(ChatParser, StreamingMatchesOneShotOnFixtureCases) {
    std::mt19937_64 rng(1234);
    ojson cases = load_json(std::string(DSV4_SHARED_DIR) + "/fixtures/chat/parse_cases.json");
    for (const ojson& c : cases) expect_stream_matches(c["text"].get<std::string>(), mode_of(c), rng, 200, true);
}

TEST(ChatParser, OfficialGrammarQuirks) {
    // `$` also matches before a final newline, `\s` is Unicode whitespace, string="false" values are pasted
    // verbatim and string="true" values JSON-quoted. Expected values come from the official parser.
    auto r = dsv4::chat::parse_completion(
        "x" + kHdr + "<｜DSML｜invoke name=\"f\">\n\n<｜DSML｜parameter name=\"a\" string=\"true\">v<\n/｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos, ThinkingMode::chat);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->content, "x");
    ASSERT_EQ(r->tool_calls.size(), 1u);
    EXPECT_EQ(r->tool_calls[0], (ToolCall{"f", "{\"a\": \"v\"}"}));

    r = dsv4::chat::parse_completion(kHdr + "<｜DSML｜invoke\u3000name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">"
                                     "[1, 2]</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\" string=\"true\">q\"\n"
                                     "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos,
                                     ThinkingMode::chat);
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_EQ(r->tool_calls.size(), 1u);
    EXPECT_EQ(r->tool_calls[0].arguments, "{\"a\": [1, 2], \"b\": \"q\\\"\\n\"}");

    // The official parser accepts a tool-call block cut short after a parameter or without the EOS.
    r = dsv4::chat::parse_completion("ok" + kHdr + "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                                     "string=\"true\">1</｜DSML｜parameter>\n", ThinkingMode::chat);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->tool_calls.at(0), (ToolCall{"f", "{\"a\": \"1\"}"}));
    r = dsv4::chat::parse_completion("ok" + kHdr + "<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                                     ThinkingMode::chat);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->tool_calls.at(0), (ToolCall{"f", "{}"}));
}

TEST(ChatParser, RejectsWhatTheOfficialParserRejects) {
    auto fails = [](const std::string& t, ThinkingMode m = ThinkingMode::chat) {
        return !dsv4::chat::parse_completion(t, m).ok();
    };
    EXPECT_TRUE(fails(kHdr + "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"a\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                      "</｜DSML｜tool_calls>" + kEos));                     // duplicate parameter
    EXPECT_TRUE(fails("a<think>b" + kEos));                                 // special token in content
    EXPECT_TRUE(fails("a" + kEos + "tail"));                                // text after EOS
    EXPECT_TRUE(fails("a\n<｜DSML｜tool_calls>" + kEos));                    // DSML not opened by "\n\n"
    EXPECT_TRUE(fails("r" + kHdr + "<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls></think>c" + kEos,
                      ThinkingMode::thinking));                             // tool calls inside the reasoning
    EXPECT_TRUE(fails("no end"));
    EXPECT_TRUE(fails("no think end" + kEos, ThinkingMode::thinking));
    EXPECT_TRUE(fails(kHdr + "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"maybe\">1"
                      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos));
}

TEST(ChatParser, RoundTripsTheEncodersAssistantTurns) {
    // Like the official test: render a conversation, cut out an assistant turn, parse it back.
    ojson msgs = ojson::array({
        {{"role", "system"}, {"content", "sys"}, {"tools", ojson::array({{{"type", "function"},
                                                                          {"function", {{"name", "f"}}}}})}},
        {{"role", "user"}, {"content", "hi"}},
        {{"role", "assistant"},
         {"content", "Let me check."},
         {"reasoning_content", "Need f."},
         {"tool_calls", ojson::array({{{"id", "1"}, {"type", "function"},
                                       {"function", {{"name", "f"}, {"arguments", R"({"q": "a \"b\"\n", "n": [1, {"k": null}], "ok": true})"}}}}})}},
        {{"role", "tool"}, {"tool_call_id", "1"}, {"content", "done"}},
    });
    dsv4::chat::ChatOptions opt;
    opt.thinking_mode = ThinkingMode::thinking;
    auto prompt = dsv4::chat::encode_messages(msgs, opt);
    ASSERT_TRUE(prompt.ok()) << prompt.error();
    const std::string marker = "<｜Assistant｜><think>";
    size_t begin = prompt->find(marker) + marker.size();
    size_t end = prompt->find("<｜User｜>", begin);
    ASSERT_NE(end, std::string::npos);
    std::string turn = prompt->substr(begin, end - begin);
    auto r = dsv4::chat::parse_completion(turn, ThinkingMode::thinking);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->reasoning_content, "Need f.");
    EXPECT_EQ(r->content, "Let me check.");
    ASSERT_EQ(r->tool_calls.size(), 1u);
    EXPECT_EQ(r->tool_calls[0].name, "f");
    EXPECT_EQ(ojson::parse(r->tool_calls[0].arguments),
              ojson::parse(R"({"q": "a \"b\"\n", "n": [1, {"k": null}], "ok": true})"));
    std::mt19937_64 rng(7);
    expect_stream_matches(turn, ThinkingMode::thinking, rng, 100, true);
}

TEST(ChatParser, StreamHoldsBackPossibleMarkup) {
    ChatStreamParser p(ThinkingMode::thinking);
    auto d = p.feed("Thinking hard</thi");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->reasoning, "Thinking hard");
    EXPECT_EQ(p.held_bytes(), 5u);
    d = p.feed("nk>Calling.\n");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->reasoning, "");
    EXPECT_EQ(d->content, "Calling.");  // the "\n" may open a tool-call block
    d = p.feed("\n<｜DS");
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(d->empty());
    d = p.feed("ML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n");
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->tool_calls.size(), 1u);
    EXPECT_EQ(d->tool_calls[0], (ToolCall{"f", "{}"}));
    EXPECT_TRUE(d->content.empty());
    d = p.feed("</｜DSML｜tool_calls>" + kEos);
    ASSERT_TRUE(d.ok());
    EXPECT_TRUE(p.saw_eos());
    ASSERT_TRUE(p.finish().ok());

    // A "\n" that turns out to be text is released as soon as that is certain.
    ChatStreamParser q(ThinkingMode::chat);
    d = q.feed("line\n");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->content, "line");
    d = q.feed("\nnext");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->content, "\n\nnext");
    // An incomplete UTF-8 character waits for its last byte.
    d = q.feed("\xE4\xBD");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->content, "");
    d = q.feed("\xA0");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->content, "\xE4\xBD\xA0");
    // Errors are sticky.
    EXPECT_FALSE(q.feed("<think>").ok());
    EXPECT_FALSE(q.feed("more").ok());
    EXPECT_FALSE(q.finish().ok());
}

// Random completions: valid ones built from the grammar, then corrupted by inserting, deleting and
// duplicating fragments, so that both accepted and rejected texts (and near-markers) are common.
std::string random_completion(std::mt19937_64& rng, bool thinking) {
    static const std::vector<std::string> words = {"a", "hello world", "x<y", "a>b", "\"q\"", "é", "😀", "\n", " ",
                                                   "</thi", "<｜DSML", "｜", "\u3000", "<", "/", "\n\n"};
    static const std::vector<std::string> frags = {
        "</think>", "<think>", kEos, "<｜begin▁of▁sentence｜>", "｜DSML｜", "\n\n<｜DSML｜tool_calls", ">\n",
        "<｜DSML｜invoke", " name=\"g\">\n", "<｜DSML｜parameter", " name=\"p\" string=\"true\">v<",
        " name=\"p\" string=\"false\">[1]<", "/｜DSML｜parameter", "</｜DSML｜invoke", "</｜DSML｜tool_calls>", "\n",
        "\n\n", "<", "\"", "name=\"", "string=\"true\">", "</think", "<｜end▁of▁sentence"};
    auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
    auto text = [&] {
        std::string s;
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) s += pick(words);
        return s;
    };
    std::vector<std::string> parts;
    if (thinking) {
        parts.push_back(text());
        parts.push_back("</think>");
    }
    parts.push_back(text());
    if (rng() % 2) {
        parts.push_back(kHdr);
        for (int c = 1 + static_cast<int>(rng() % 3); c > 0; --c) {
            parts.push_back("<｜DSML｜invoke name=\"f" + std::to_string(rng() % 3) + "\">\n");
            for (int a = static_cast<int>(rng() % 4); a > 0; --a) {
                bool str = rng() % 2;
                parts.push_back("<｜DSML｜parameter name=\"k" + std::to_string(rng() % 5) + "\" string=\"" +
                                (str ? "true" : "false") + "\">" + (str ? text() : std::to_string(rng() % 100)) +
                                "</｜DSML｜parameter>\n");
            }
            parts.push_back("</｜DSML｜invoke>\n");
        }
        parts.push_back("</｜DSML｜tool_calls>");
    }
    if (rng() % 8) parts.push_back(kEos);
    // Corrupt some of them.
    for (int m = static_cast<int>(rng() % 4) - 1; m > 0; --m) {
        size_t at = rng() % (parts.size() + 1);
        switch (rng() % 3) {
            case 0: parts.insert(parts.begin() + static_cast<long>(at), pick(frags)); break;
            case 1:
                if (at < parts.size()) parts.erase(parts.begin() + static_cast<long>(at));
                break;
            default:
                if (at < parts.size()) parts.insert(parts.begin() + static_cast<long>(at), parts[at]);
        }
    }
    std::string out;
    for (const auto& p : parts) out += p;
    return out;
}

TEST(ChatParser, StreamingMatchesOneShotOnRandomCompletions) {
    std::mt19937_64 rng(20260501);
    int n_ok = 0, n_err = 0, n_calls = 0;
    for (int i = 0; i < 4000; ++i) {
        bool thinking = rng() % 2;
        std::string text = random_completion(rng, thinking);
        ThinkingMode mode = thinking ? ThinkingMode::thinking : ThinkingMode::chat;
        auto r = dsv4::chat::parse_completion(text, mode);
        (r.ok() ? n_ok : n_err)++;
        if (r.ok()) n_calls += static_cast<int>(r->tool_calls.size());
        expect_stream_matches(text, mode, rng, 4, true);
        if (HasFatalFailure()) return;
    }
    // The generator must exercise both outcomes and real tool calls, or the comparison proves little.
    EXPECT_GT(n_ok, 800);
    EXPECT_GT(n_err, 800);
    EXPECT_GT(n_calls, 500);
}

}  // namespace
