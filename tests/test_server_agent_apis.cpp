// The Anthropic Messages and OpenAI Responses layers without a server: request translation into the shared
// ChatRequest (blocks, items, tools, tool_choice, thinking, errors), content-block splitting, and both stream
// writers fed a canned DSML completion with reasoning and two tool calls (events in order, tool inputs whole,
// no markup anywhere, stop reasons), plus the non-streaming bodies for the same answer.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/anthropic_request.h"
#include "server/chat_blocks.h"
#include "server/responses_api.h"
#include "server/responses_request.h"
#include "tokenizer/chat_format.h"

namespace dsv4::server {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kShared = DSV4_SHARED_DIR;

ojson body(const char* text) { return ojson::parse(text); }

RequestLimits limits() {
    RequestLimits l;
    l.n_vocab = 1000;
    return l;
}

// The parse fixture with reasoning and two tool calls (thinking mode).
ojson tool_case() {
    std::ifstream in(kShared + "/fixtures/chat/parse_cases.json");
    const ojson cases = ojson::parse(in);
    for (const ojson& c : cases) {
        if (c["error"].is_null() && c["thinking_mode"] == "thinking" && c["message"].contains("tool_calls") &&
            c["message"]["tool_calls"].size() == 2)
            return c;
    }
    return {};
}

// A finished run of `text` (EOS text stripped, as the engine sends it), fed in pieces through `writer`.
struct Streamed {
    std::shared_ptr<ChatRun> run;
    std::string wire;
};

Streamed stream_text(ChatStreamWriter& writer, const std::string& text, chat::ThinkingMode mode, const char* id,
                     GenerationEnd end = GenerationEnd::stop, int32_t stop_index = -1) {
    auto job = std::make_shared<Job>();
    job->meta.id = id;
    job->meta.model = "m";
    Streamed s;
    s.run = std::make_shared<ChatRun>(ChatRun{job, ChatAccumulator(mode, "", "call_ab"), {"STOP", "END"}, 12});
    s.wire = writer.open(*s.run);
    for (size_t i = 0; i < text.size(); i += 7) s.wire += writer.delta(*s.run, s.run->acc.push(text.substr(i, 7)));
    job->finished = true;
    job->end = end;
    job->usage = {12, 30, 8};
    job->stop_index = stop_index;
    s.wire += writer.delta(*s.run, s.run->acc.finish());
    s.wire += writer.close(*s.run);
    return s;
}

struct Event {
    std::string name;
    ojson data;
};

std::vector<Event> parse_sse(const std::string& wire) {
    std::vector<Event> out;
    size_t pos = 0;
    while (pos < wire.size()) {
        size_t end = wire.find("\n\n", pos);
        if (end == std::string::npos) break;
        const std::string block = wire.substr(pos, end - pos);
        pos = end + 2;
        Event e;
        size_t nl = block.find('\n');
        EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
        e.name = block.substr(7, nl - 7);
        EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
        e.data = ojson::parse(block.substr(nl + 7));
        out.push_back(std::move(e));
    }
    return out;
}

std::string without_eos(std::string text) {
    const std::string eos(chat::kEos);
    if (text.size() >= eos.size() && text.compare(text.size() - eos.size(), eos.size(), eos) == 0)
        text.resize(text.size() - eos.size());
    return text;
}

TEST(AnthropicRequest, TranslatesBlocksToolsAndThinking) {
    auto r = parse_messages_request(body(R"({
        "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
        "thinking": {"type": "enabled", "budget_tokens": 16}, "stop_sequences": ["x"], "top_k": 5,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "any"},
        "messages": [
          {"role": "user", "content": "Weather?"},
          {"role": "assistant", "content": [{"type": "thinking", "thinking": "Use the tool.", "signature": "s"},
                                            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                       {"type": "text", "text": "Thanks."}]}]})"),
                                    limits(), false);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->chat.thinking_mode, chat::ThinkingMode::thinking);
    EXPECT_EQ(r->tool_choice, ToolChoice::required);
    EXPECT_EQ(r->n_tools, 1u);
    EXPECT_EQ(r->gen.max_tokens, 64);
    EXPECT_EQ(r->gen.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(r->gen.sampling.top_k, 5);
    const ojson& m = r->messages;
    ASSERT_EQ(m.size(), 5u);
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[2]["role"], "assistant");
    EXPECT_EQ(m[2]["reasoning_content"], "Use the tool.");
    EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
    EXPECT_EQ(m[3]["role"], "tool");
    EXPECT_EQ(m[3]["content"], "sunny");
    EXPECT_EQ(m[4]["content"], "Thanks.");
    EXPECT_TRUE(render_chat_prompt(*r).ok());

    auto named = parse_messages_request(body(R"({"max_tokens": 8, "tools": [{"name": "f", "input_schema": {}}],
        "tool_choice": {"type": "tool", "name": "f"}, "messages": [{"role": "user", "content": "x"}]})"), limits(), false);
    ASSERT_TRUE(named.ok()) << named.error().message;
    EXPECT_EQ(named->tool_choice, ToolChoice::named);
    EXPECT_EQ(named->chat.thinking_mode, chat::ThinkingMode::chat);
    // count_tokens takes no max_tokens.
    EXPECT_TRUE(parse_messages_request(body(R"({"messages": [{"role": "user", "content": "x"}]})"), limits(), true).ok());
}

TEST(AnthropicRequest, RejectsMalformedBodies) {
    const char* bad[] = {
        R"({"messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 8})",
        R"({"max_tokens": 8, "messages": []})",
        R"({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]})",
        R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
        R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
        R"({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})",
        R"({"max_tokens": 8, "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 8, "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 8}, "messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 8, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})",
        R"({"max_tokens": 8, "metadata": 3, "messages": [{"role": "user", "content": "x"}]})",
    };
    for (const char* b : bad) {
        auto r = parse_messages_request(body(b), limits(), false);
        EXPECT_FALSE(r.ok()) << b;
        if (!r.ok()) {
            EXPECT_EQ(r.error().status, 400) << b;
        }
    }
    ApiError e;
    e.status = 401;
    e.message = "no";
    EXPECT_EQ(anthropic_error_json(e).dump(), R"({"type":"error","error":{"type":"authentication_error","message":"no"}})");
    e.status = 503;
    EXPECT_EQ(anthropic_error_json(e)["error"]["type"], "overloaded_error");
}

TEST(ResponsesRequest, TranslatesInputItems) {
    auto r = parse_responses_request(body(R"({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 32, "reasoning": {"effort": "high"},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "f"},
        "input": [
          {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
          {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Call f."}]},
          {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
          {"type": "function_call_output", "call_id": "c1", "output": "ok"},
          {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
          {"role": "user", "content": "More"}]})"),
                                     limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->chat.chat.thinking_mode, chat::ThinkingMode::thinking);
    EXPECT_EQ(r->chat.tool_choice, ToolChoice::named);
    EXPECT_EQ(r->chat.gen.max_tokens, 32);
    const ojson& m = r->chat.messages;
    ASSERT_EQ(m.size(), 6u);
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[2]["role"], "assistant");
    EXPECT_EQ(m[2]["reasoning_content"], "Call f.");
    EXPECT_EQ(m[2]["tool_calls"][0]["id"], "c1");
    EXPECT_EQ(m[3]["role"], "tool");
    EXPECT_EQ(m[4]["content"], "Done.");
    EXPECT_EQ(r->echo["instructions"], "Be brief.");
    EXPECT_EQ(r->echo["max_output_tokens"], 32);
    EXPECT_TRUE(render_chat_prompt(r->chat).ok());

    auto plain = parse_responses_request(body(R"({"input": "Hello"})"), limits());
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(plain->chat.messages.size(), 1u);

    const char* bad[] = {
        R"({})",
        R"({"input": 3})",
        R"({"input": []})",
        R"({"input": [{"type": "computer_call"}]})",
        R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
        R"({"input": [{"type": "function_call", "name": "f"}]})",
        R"({"input": "x", "previous_response_id": "resp_1"})",
        R"({"input": "x", "tools": [{"type": "web_search"}]})",
        R"({"input": "x", "max_output_tokens": 0})",
        R"({"input": "x", "reasoning": "high"})",
    };
    for (const char* b : bad) {
        auto e = parse_responses_request(body(b), limits());
        EXPECT_FALSE(e.ok()) << b;
    }
}

TEST(ChatBlocks, OpensEachKindOnceAndEveryCallAlone) {
    ChatBlocks blocks;
    ChatDelta a;
    a.reasoning = "r";
    std::vector<BlockEvent> ev = blocks.push(a);
    ChatDelta b;
    b.reasoning = "r2";
    b.content = "c";
    b.tool_calls.resize(2);
    for (const auto& e : blocks.push(b)) ev.push_back(e);
    for (const auto& e : blocks.finish()) ev.push_back(e);
    using T = BlockEvent::Type;
    std::string shape;
    for (const BlockEvent& e : ev) {
        shape += e.type == T::open ? "o" : e.type == T::append ? "a" : "c";
        shape += std::to_string(e.index);
    }
    EXPECT_EQ(shape, "o0a0a0c0o1a1c1o2a2c2o3a3c3");
    EXPECT_EQ(blocks.n_blocks(), 4u);
}

TEST(AnthropicStream, ToolCallsAndReasoningAsContentBlocks) {
    const ojson c = tool_case();
    ASSERT_FALSE(c.is_null()) << "missing chat fixture";
    auto writer = anthropic_stream_writer();
    Streamed s = stream_text(*writer, without_eos(c["text"]), chat::ThinkingMode::thinking, "msg_1");
    EXPECT_EQ(s.wire.find(chat::kDsml), std::string::npos) << s.wire;
    std::vector<Event> ev = parse_sse(s.wire);
    ASSERT_GE(ev.size(), 4u);
    EXPECT_EQ(ev.front().name, "message_start");
    EXPECT_EQ(ev.back().name, "message_stop");
    std::string thinking;
    std::vector<ojson> tools;
    std::string names;
    for (const Event& e : ev) {
        EXPECT_EQ(e.data["type"], e.name);
        if (e.name == "content_block_start") {
            names += std::string(e.data["content_block"]["type"]) + " ";
            if (e.data["content_block"]["type"] == "tool_use") tools.push_back(e.data["content_block"]);
        }
        if (e.name == "content_block_delta" && e.data["delta"]["type"] == "thinking_delta") thinking += e.data["delta"]["thinking"];
        if (e.name == "content_block_delta" && e.data["delta"]["type"] == "input_json_delta") {
            tools.back()["input"] = ojson::parse(std::string(e.data["delta"]["partial_json"]));
        }
        if (e.name == "message_delta") {
            EXPECT_EQ(e.data["delta"]["stop_reason"], "tool_use");
            EXPECT_EQ(e.data["usage"]["input_tokens"], 4);
            EXPECT_EQ(e.data["usage"]["cache_read_input_tokens"], 8);
            EXPECT_EQ(e.data["usage"]["output_tokens"], 30);
        }
    }
    EXPECT_EQ(names, "thinking tool_use tool_use ");
    EXPECT_EQ(thinking, c["message"]["reasoning_content"]);
    ASSERT_EQ(tools.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const ojson& want = c["message"]["tool_calls"][i]["function"];
        EXPECT_EQ(tools[i]["name"], want["name"]);
        EXPECT_EQ(tools[i]["input"], ojson::parse(std::string(want["arguments"])));
        EXPECT_EQ(std::string(tools[i]["id"]).rfind("toolu_", 0), 0u);
    }
    const ojson m = anthropic_message_json(*s.run);
    EXPECT_EQ(m["stop_reason"], "tool_use");
    ASSERT_EQ(m["content"].size(), 3u);
    EXPECT_EQ(m["content"][1]["input"], tools[0]["input"]);
    EXPECT_EQ(m["content"][1]["id"], tools[0]["id"]);
}

TEST(AnthropicStream, StopReasons) {
    auto w = anthropic_stream_writer();
    Streamed stop = stream_text(*w, "Hello", chat::ThinkingMode::chat, "msg_2", GenerationEnd::stop, 1);
    EXPECT_EQ(anthropic_message_json(*stop.run)["stop_reason"], "stop_sequence");
    EXPECT_EQ(anthropic_message_json(*stop.run)["stop_sequence"], "END");
    auto w2 = anthropic_stream_writer();
    Streamed len = stream_text(*w2, "Hello", chat::ThinkingMode::chat, "msg_3", GenerationEnd::length);
    EXPECT_EQ(anthropic_message_json(*len.run)["stop_reason"], "max_tokens");
    EXPECT_TRUE(anthropic_message_json(*len.run)["stop_sequence"].is_null());
    auto w3 = anthropic_stream_writer();
    Streamed end = stream_text(*w3, "Hello", chat::ThinkingMode::chat, "msg_4");
    EXPECT_EQ(anthropic_message_json(*end.run)["stop_reason"], "end_turn");
    EXPECT_EQ(anthropic_message_json(*end.run)["content"][0]["text"], "Hello");
}

TEST(ResponsesStream, FunctionCallsAndReasoningAsOutputItems) {
    const ojson c = tool_case();
    ASSERT_FALSE(c.is_null()) << "missing chat fixture";
    auto writer = responses_stream_writer(ojson{{"tools", ojson::array()}});
    Streamed s = stream_text(*writer, without_eos(c["text"]), chat::ThinkingMode::thinking, "resp_1");
    EXPECT_EQ(s.wire.find(chat::kDsml), std::string::npos) << s.wire;
    std::vector<Event> ev = parse_sse(s.wire);
    ASSERT_GE(ev.size(), 3u);
    EXPECT_EQ(ev.front().name, "response.created");
    EXPECT_EQ(ev.back().name, "response.completed");
    std::vector<std::string> args(3);
    std::string reasoning;
    for (size_t i = 0; i < ev.size(); ++i) {
        EXPECT_EQ(ev[i].data["type"], ev[i].name);
        EXPECT_EQ(ev[i].data["sequence_number"], i);
        if (ev[i].name == "response.function_call_arguments.delta") {
            args.at(ev[i].data["output_index"].get<size_t>()) += ev[i].data["delta"];
        }
        if (ev[i].name == "response.reasoning_text.delta") reasoning += ev[i].data["delta"];
    }
    EXPECT_EQ(reasoning, c["message"]["reasoning_content"]);
    const ojson& final = ev.back().data["response"];
    EXPECT_EQ(final["status"], "completed");
    ASSERT_EQ(final["output"].size(), 3u);
    EXPECT_EQ(final["output"][0]["type"], "reasoning");
    for (size_t i = 1; i < 3; ++i) {
        const ojson& item = final["output"][i];
        EXPECT_EQ(item["type"], "function_call");
        EXPECT_EQ(item["arguments"], args[i]);
        EXPECT_EQ(item["arguments"], c["message"]["tool_calls"][i - 1]["function"]["arguments"]);
        EXPECT_EQ(item["name"], c["message"]["tool_calls"][i - 1]["function"]["name"]);
    }
    EXPECT_EQ(final["usage"]["input_tokens_details"]["cached_tokens"], 8);
    EXPECT_EQ(responses_object(*s.run, ojson::object(), "completed")["output"], final["output"]);
}

}  // namespace
}  // namespace dsv4::server
