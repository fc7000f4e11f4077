// Tests for the DeepSeek-V4 chat encoder: every case of the official-encoder fixture, plus hand-made cases
// whose expected text was produced by the official encoding_dsv4.py (merging, tool-result order, reasoning
// dropping, task tokens, DSML arguments, Python JSON layout) and the inputs it rejects.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/chat_format.h"

namespace {

using dsv4::chat::ChatOptions;
using dsv4::chat::ReasoningEffort;
using dsv4::chat::ThinkingMode;
using ojson = nlohmann::ordered_json;

ojson load_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ojson::parse(ss.str());
}

ojson encode_cases() { return load_json(std::string(DSV4_SHARED_DIR) + "/fixtures/chat/encode_cases.json"); }

std::string encode_or_die(const ojson& messages, ChatOptions opt = {}) {
    auto r = dsv4::chat::encode_messages(messages, opt);
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? r.value() : std::string();
}

ChatOptions thinking(bool drop = true) {
    ChatOptions o;
    o.thinking_mode = ThinkingMode::thinking;
    o.drop_thinking = drop;
    return o;
}

ojson tool_call(const char* id, const char* name, const char* arguments) {
    return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

TEST(ChatFormat, MatchesEveryFixtureCase) {
    ojson cases = encode_cases();
    ASSERT_TRUE(cases.is_array());
    ASSERT_GE(cases.size(), 50u);
    size_t n_ok = 0, n_err = 0;
    for (const ojson& c : cases) {
        SCOPED_TRACE(c["name"].get<std::string>() + " " + c["options"].dump());
        auto opt = dsv4::chat::chat_options_from_json(c["options"]);
        ASSERT_TRUE(opt.ok()) << opt.error();
        auto r = dsv4::chat::encode_messages(c["messages"], *opt);
        if (c["error"].is_null()) {
            ASSERT_TRUE(r.ok()) << r.error();
            EXPECT_EQ(r.value(), c["prompt"].get<std::string>());
            ++n_ok;
        } else {
            EXPECT_FALSE(r.ok()) << "the official encoder raises " << c["error"].dump();
            ++n_err;
        }
    }
    EXPECT_EQ(n_ok + n_err, cases.size());
}

TEST(ChatFormat, RequestToolsAttachLikeFixtureSystemTools) {
    // Moving the tools of a fixture's system message to the request level must render the same prompt.
    size_t checked = 0;
    for (const ojson& c : encode_cases()) {
        const ojson& msgs = c["messages"];
        if (!c["error"].is_null() || msgs.empty() || msgs[0]["role"] != "system" || !msgs[0].contains("tools")) continue;
        SCOPED_TRACE(c["name"].get<std::string>());
        ojson stripped = msgs;
        ojson tools = stripped[0]["tools"];
        stripped[0].erase("tools");
        auto attached = dsv4::chat::attach_request_tools(stripped, tools, nullptr);
        ASSERT_TRUE(attached.ok()) << attached.error();
        auto opt = dsv4::chat::chat_options_from_json(c["options"]);
        ASSERT_TRUE(opt.ok());
        EXPECT_EQ(encode_or_die(*attached, *opt), c["prompt"].get<std::string>());
        ++checked;
    }
    EXPECT_GE(checked, 3u);
}

TEST(ChatFormat, RequestToolsWithoutSystemMessageGetAnEmptyOne) {
    ojson tools = ojson::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
    auto attached = dsv4::chat::attach_request_tools(ojson::array({{{"role", "user"}, {"content", "hi"}}}), tools,
                                                     nullptr);
    ASSERT_TRUE(attached.ok());
    ASSERT_EQ(attached->size(), 2u);
    EXPECT_EQ((*attached)[0]["role"], "system");
    EXPECT_EQ((*attached)[0]["content"], "");
    EXPECT_EQ((*attached)[0]["tools"], tools);
    // Tools both on the request and on the system message are ambiguous.
    ojson with_sys = ojson::array({{{"role", "system"}, {"content", "s"}, {"tools", tools}}});
    EXPECT_FALSE(dsv4::chat::attach_request_tools(with_sys, tools, nullptr).ok());
    // Nothing to attach: unchanged.
    auto same = dsv4::chat::attach_request_tools(with_sys, nullptr, nullptr);
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(*same, with_sys);
}

TEST(ChatFormat, PythonJsonLayout) {
    // Expected strings are Python's json.dumps(..., ensure_ascii=False) output.
    ojson v = ojson::parse(R"([1.0, 1e16, 1e15, 1e-5, 0.0001, 0.1, 1.5e-7, -0.0, 123456789.125, 1e100,
        {"b": 1, "a": [true, null, "x\u001fy\n\"\\é😀"], "c": {}}])");
    EXPECT_EQ(dsv4::chat::to_python_json(v),
              "[1.0, 1e+16, 1000000000000000.0, 1e-05, 0.0001, 0.1, 1.5e-07, -0.0, 123456789.125, 1e+100, "
              "{\"b\": 1, \"a\": [true, null, \"x\\u001fy\\n\\\"\\\\é😀\"], \"c\": {}}]");
    EXPECT_EQ(dsv4::chat::to_python_json(ojson::array()), "[]");
    EXPECT_EQ(dsv4::chat::to_python_json_string("tab\tcr\rbs\b"), "\"tab\\tcr\\rbs\\b\"");
}

TEST(ChatFormat, ConsecutiveUserMessagesMerge) {
    ojson m = ojson::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
    EXPECT_EQ(encode_or_die(m), "<｜begin▁of▁sentence｜><｜User｜>a\n\nb<｜Assistant｜></think>");
}

TEST(ChatFormat, ToolResultsFollowCallOrderAndArgumentsRender) {
    ojson m = ojson::array({
        {{"role", "user"}, {"content", "go"}},
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", ojson::array({tool_call("c1", "f", "{}"), tool_call("c2", "g", "not json"),
                                      tool_call("c3", "h", R"({"x": 1.50, "y": "z"})")})}},
        {{"role", "tool"}, {"tool_call_id", "c3"}, {"content", "r3"}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "r1"}},
        {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "r2"}},
        {{"role", "user"}, {"content", "and?"}},
    });
    EXPECT_EQ(encode_or_die(m),
              "<｜begin▁of▁sentence｜><｜User｜>go<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
              "<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n"
              "<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"arguments\" string=\"true\">not json"
              "</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
              "<｜DSML｜invoke name=\"h\">\n<｜DSML｜parameter name=\"x\" string=\"false\">1.5</｜DSML｜parameter>\n"
              "<｜DSML｜parameter name=\"y\" string=\"true\">z</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
              "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>r1</tool_result>\n\n"
              "<tool_result>r2</tool_result>\n\n<tool_result>r3</tool_result>\n\nand?<｜Assistant｜></think>");
}

TEST(ChatFormat, DropThinkingRemovesEarlierReasoningAndDeveloperTurns) {
    ojson m = ojson::array({
        {{"role", "system"}, {"content", "S"}},
        {{"role", "developer"}, {"content", "dev note"}},
        {{"role", "user"}, {"content", "u1"}},
        {{"role", "assistant"}, {"content", "a1"}, {"reasoning_content", "r1"}},
        {{"role", "user"}, {"content", "u2"}},
    });
    EXPECT_EQ(encode_or_die(m, thinking()),
              "<｜begin▁of▁sentence｜>S<｜User｜>u1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜User｜>u2"
              "<｜Assistant｜><think>");
    EXPECT_EQ(encode_or_die(m, thinking(/*drop=*/false)),
              "<｜begin▁of▁sentence｜>S<｜User｜>dev note<｜User｜>u1<｜Assistant｜><think>r1</think>a1"
              "<｜end▁of▁sentence｜><｜User｜>u2<｜Assistant｜><think>");
}

TEST(ChatFormat, TaskTokensAndLatestReminder) {
    auto user_task = [](const char* task) { return ojson::array({{{"role", "user"}, {"content", "q"}, {"task", task}}}); };
    EXPECT_EQ(encode_or_die(user_task("query")), "<｜begin▁of▁sentence｜><｜User｜>q<｜query｜>");
    EXPECT_EQ(encode_or_die(user_task("action"), thinking()), "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think><｜action｜>");
    EXPECT_EQ(encode_or_die(user_task("action")), "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think><｜action｜>");
    EXPECT_FALSE(dsv4::chat::encode_messages(user_task("bogus"), {}).ok());

    ojson m = ojson::array({{{"role", "system"}, {"content", "s"}},
                            {{"role", "latest_reminder"}, {"content", "r"}},
                            {{"role", "user"}, {"content", "u"}}});
    EXPECT_EQ(encode_or_die(m), "<｜begin▁of▁sentence｜>s<｜latest_reminder｜>r<｜User｜>u<｜Assistant｜></think>");
}

TEST(ChatFormat, ReasoningEffortMaxOnlyInThinkingMode) {
    ojson m = ojson::array({{{"role", "user"}, {"content", "u"}}});
    ChatOptions chat_max;
    chat_max.reasoning_effort = ReasoningEffort::max;
    EXPECT_EQ(encode_or_die(m, chat_max), "<｜begin▁of▁sentence｜><｜User｜>u<｜Assistant｜></think>");
    ChatOptions think_max = thinking();
    think_max.reasoning_effort = ReasoningEffort::max;
    std::string p = encode_or_die(m, think_max);
    EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum", 0), 0u) << p;
    ChatOptions no_bos;
    no_bos.add_bos = false;
    EXPECT_EQ(encode_or_die(m, no_bos), "<｜User｜>u<｜Assistant｜></think>");
}

TEST(ChatFormat, RejectsWhatTheOfficialEncoderRejects) {
    auto fails = [](const ojson& m) { return !dsv4::chat::encode_messages(m, {}).ok(); };
    ojson user = {{"role", "user"}, {"content", "u"}};
    EXPECT_TRUE(fails(ojson::array({{{"role", "developer"}, {"content", ""}}, user})));  // developer needs content
    EXPECT_TRUE(fails(ojson::array({{{"role", "narrator"}, {"content", "x"}}})));         // unknown role
    EXPECT_TRUE(fails(ojson::array({user, {{"role", "assistant"}, {"content", ""},           // arguments not an object
                                           {"tool_calls", ojson::array({tool_call("c", "f", "[1, 2]")})}}})));
    EXPECT_TRUE(fails(ojson::array({{{"role", "user"}, {"content", nullptr}}})));  // null user content
    EXPECT_TRUE(fails(ojson::array({{{"role", "system"}, {"content", "s"}, {"tools", "x"}}})));  // tools not a list
    EXPECT_TRUE(fails(ojson::array(
        {user, {{"role", "assistant"}, {"tool_calls", ojson::array({{{"function", {{"arguments", "{}"}}}}})}}})));
    EXPECT_TRUE(fails(ojson::array({"not an object"})));
    EXPECT_TRUE(fails(ojson::object()));
    // An empty list is just the BOS, as in the official encoder.
    EXPECT_EQ(encode_or_die(ojson::array()), "<｜begin▁of▁sentence｜>");
}

TEST(ChatFormat, OptionsFromJson) {
    auto o = dsv4::chat::chat_options_from_json(
        ojson{{"thinking_mode", "thinking"}, {"drop_thinking", false}, {"reasoning_effort", "max"}});
    ASSERT_TRUE(o.ok()) << o.error();
    EXPECT_EQ(o->thinking_mode, ThinkingMode::thinking);
    EXPECT_FALSE(o->drop_thinking);
    EXPECT_EQ(o->reasoning_effort, ReasoningEffort::max);
    EXPECT_FALSE(dsv4::chat::chat_options_from_json(ojson{{"thinking_mode", "deep"}}).ok());
    EXPECT_FALSE(dsv4::chat::chat_options_from_json(ojson{{"reasoning_effort", "low"}}).ok());
    EXPECT_FALSE(dsv4::chat::chat_options_from_json(ojson{{"context", ojson::array()}}).ok());
}

}  // namespace
