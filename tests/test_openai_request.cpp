// The server's OpenAI layer without HTTP: request validation (every malformed field is a 400 naming the field),
// prompt rendering (an OpenAI request renders exactly the official encoder's prompt from the fixtures),
// response building (canned completions with DSML tool calls become tool_calls and never leak markup into
// content, streamed in any split), context fitting, and the Prometheus text.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::server {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::ordered_json;
using plain_json = nlohmann::json;  // key order does not matter when comparing tool arguments

const std::string kShared = DSV4_SHARED_DIR;

RequestLimits limits(bool thinking_default = false) {
    RequestLimits l;
    l.thinking_default = thinking_default;
    l.n_vocab = 129280;
    return l;
}

ojson body(const char* text) { return ojson::parse(text); }

ojson user_chat() { return body(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})"); }

// Expects a 400 whose param names `param` (and whose body has OpenAI's four fields).
template <class T>
void expect_rejected(const ApiResult<T>& r, const std::string& param, int status = 400) {
    ASSERT_FALSE(r.ok()) << "accepted, expected an error on '" << param << "'";
    EXPECT_EQ(r.error().status, status);
    EXPECT_EQ(r.error().param, param) << r.error().message;
    EXPECT_FALSE(r.error().message.empty());
    const json e = error_json(r.error());
    ASSERT_TRUE(e.contains("error"));
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(e["error"].contains(k)) << k;
}

ApiResult<ChatRequest> chat_with(const char* key, ojson value, bool thinking_default = false) {
    ojson b = user_chat();
    b[key] = std::move(value);
    return parse_chat_request(b, limits(thinking_default));
}

// ---- bodies and errors -----------------------------------------------------------------------------------

TEST(OpenAIRequest, BodyMustBeAJsonObject) {
    for (const char* bad : {"", "{", "[1, 2]", "\"text\"", "{\"a\": }", "nul"}) {
        auto r = parse_json_body(bad);
        ASSERT_FALSE(r.ok()) << bad;
        EXPECT_EQ(r.error().status, 400);
    }
    // Invalid UTF-8 inside a JSON string is malformed JSON.
    EXPECT_FALSE(parse_json_body("{\"a\": \"\xff\xfe\"}").ok());
    EXPECT_TRUE(parse_json_body("{\"a\": 1}").ok());
}

TEST(OpenAIRequest, ErrorBodyHasOpenAIShape) {
    const json e = error_json(bad_request("bad thing", "temperature", "invalid_value"));
    EXPECT_EQ(e["error"]["message"], "bad thing");
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["param"], "temperature");
    EXPECT_EQ(e["error"]["code"], "invalid_value");
    const json n = error_json(bad_request("x"));
    EXPECT_TRUE(n["error"]["param"].is_null());
    EXPECT_TRUE(n["error"]["code"].is_null());
}

// ---- chat: messages --------------------------------------------------------------------------------------

TEST(OpenAIRequest, MinimalChatUsesDefaults) {
    auto r = parse_chat_request(user_chat(), limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->gen.model, "m");
    EXPECT_EQ(r->gen.max_tokens, -1);
    EXPECT_FALSE(r->gen.stream);
    EXPECT_FALSE(r->gen.seed_given);
    EXPECT_EQ(r->chat.thinking_mode, chat::ThinkingMode::chat);
    EXPECT_EQ(r->tool_choice, ToolChoice::automatic);
    EXPECT_TRUE(r->forced_prefix.empty());
    auto prompt = render_chat_prompt(*r);
    ASSERT_TRUE(prompt.ok());
    EXPECT_EQ(*prompt, std::string(chat::kBos) + std::string(chat::kUser) + "Hi" + std::string(chat::kAssistant) +
                           std::string(chat::kThinkEnd));
}

TEST(OpenAIRequest, MessagesAreValidated) {
    expect_rejected(parse_chat_request(body(R"({"model": "m"})"), limits()), "messages");
    expect_rejected(parse_chat_request(body(R"({"messages": {}})"), limits()), "messages");
    expect_rejected(parse_chat_request(body(R"({"messages": []})"), limits()), "messages");
    expect_rejected(parse_chat_request(body(R"({"messages": [3]})"), limits()), "messages[0]");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"content": "x"}]})"), limits()), "messages[0].role");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": 1, "content": "x"}]})"), limits()),
                    "messages[0].role");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "wizard", "content": "x"}]})"), limits()),
                    "messages[0].role");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "user"}]})"), limits()), "messages[0].content");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "user", "content": 5}]})"), limits()),
                    "messages[0].content");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "user", "content": "a"},
                                               {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})"),
                                       limits()),
                    "messages[1].content[0].type");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "tool", "content": "r"}]})"), limits()),
                    "messages[0].tool_call_id");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "developer", "content": ""}]})"), limits()),
                    "messages[0].content");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "assistant", "content": null,
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]})"),
                                       limits()),
                    "messages[0].tool_calls[0].function.arguments");
    expect_rejected(parse_chat_request(body(R"({"messages": [{"role": "assistant",
        "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})"),
                                       limits()),
                    "messages[0].tool_calls[0].function.name");
}

TEST(OpenAIRequest, TextPartsAreJoinedAndEncoderFieldsDropped) {
    auto r = parse_chat_request(body(R"({"messages": [{"role": "user", "task": "action", "wo_eos": true,
        "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]})"),
                                limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->messages[0]["content"], "one\ntwo");
    // Encoder-internal fields cannot be reached through the API.
    EXPECT_FALSE(r->messages[0].contains("task"));
    EXPECT_FALSE(r->messages[0].contains("wo_eos"));
}

// ---- chat: sampling and limits ---------------------------------------------------------------------------

TEST(OpenAIRequest, SamplingFieldsAreRead) {
    auto r = parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 0.5,
        "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "repetition_penalty": 1.1, "seed": 42, "stop": ["a", "b"], "max_tokens": 7, "logit_bias": {"5": -100, "9": 2.5},
        "logprobs": true, "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
        "user": "u", "store": false, "metadata": {"x": 1}})"),
                                limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    const SamplingParams& s = r->gen.sampling;
    EXPECT_FLOAT_EQ(s.temperature, 0.5f);
    EXPECT_FLOAT_EQ(s.top_p, 0.9f);
    EXPECT_EQ(s.top_k, 40);
    EXPECT_FLOAT_EQ(s.min_p, 0.05f);
    EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
    EXPECT_EQ(s.seed, 42u);
    EXPECT_TRUE(r->gen.seed_given);
    EXPECT_EQ(r->gen.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(r->gen.max_tokens, 7);
    ASSERT_EQ(s.logit_bias.size(), 2u);
    EXPECT_FLOAT_EQ(s.logit_bias.at(5), -100.0f);
    EXPECT_FLOAT_EQ(s.logit_bias.at(9), 2.5f);
    EXPECT_TRUE(r->gen.logprobs);
    EXPECT_EQ(r->gen.top_logprobs, 3);
    EXPECT_EQ(s.top_logprobs, 3);
    EXPECT_TRUE(r->gen.stream);
    EXPECT_TRUE(r->gen.include_usage);
    EXPECT_TRUE(validate_sampling_params(s).ok());
}

TEST(OpenAIRequest, MaxCompletionTokensWinsAndStopMayBeAString) {
    ojson b = user_chat();
    b["max_tokens"] = 10;
    b["max_completion_tokens"] = 4;
    b["stop"] = "END";
    b["top_k"] = -1;
    b["max_tokens"] = 10.0;  // integral floats are integers
    auto r = parse_chat_request(b, limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->gen.max_tokens, 4);
    EXPECT_EQ(r->gen.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(r->gen.sampling.top_k, 0);
    // null means "not given".
    EXPECT_TRUE(chat_with("temperature", nullptr).ok());
    EXPECT_TRUE(chat_with("n", 1).ok());
}

TEST(OpenAIRequest, BadSamplingValuesNameTheirField) {
    expect_rejected(chat_with("temperature", "hot"), "temperature");
    expect_rejected(chat_with("temperature", -0.1), "temperature");
    expect_rejected(chat_with("temperature", 2.5), "temperature");
    expect_rejected(chat_with("top_p", 0), "top_p");
    expect_rejected(chat_with("top_p", 1.5), "top_p");
    expect_rejected(chat_with("top_k", -2), "top_k");
    expect_rejected(chat_with("top_k", 2.5), "top_k");
    expect_rejected(chat_with("min_p", 2), "min_p");
    expect_rejected(chat_with("presence_penalty", 3), "presence_penalty");
    expect_rejected(chat_with("frequency_penalty", "x"), "frequency_penalty");
    expect_rejected(chat_with("repetition_penalty", 0), "repetition_penalty");
    expect_rejected(chat_with("seed", "abc"), "seed");
    expect_rejected(chat_with("max_tokens", 0), "max_tokens");
    expect_rejected(chat_with("max_tokens", "10"), "max_tokens");
    expect_rejected(chat_with("max_completion_tokens", -5), "max_completion_tokens");
    expect_rejected(chat_with("n", 2), "n");
    expect_rejected(chat_with("n", "1"), "n");
    expect_rejected(chat_with("stop", 5), "stop");
    expect_rejected(chat_with("stop", ojson::array({"a", 1})), "stop[1]");
    expect_rejected(chat_with("stop", ojson(std::vector<std::string>(17, "s"))), "stop");
    expect_rejected(chat_with("logit_bias", ojson::array()), "logit_bias");
    expect_rejected(chat_with("logit_bias", ojson{{"abc", 1}}), "logit_bias");
    expect_rejected(chat_with("logit_bias", ojson{{"129280", 1}}), "logit_bias");
    expect_rejected(chat_with("logit_bias", ojson{{"-1", 1}}), "logit_bias");
    expect_rejected(chat_with("logit_bias", ojson{{"5", 101}}), "logit_bias.5");
    expect_rejected(chat_with("logit_bias", ojson{{"5", "x"}}), "logit_bias.5");
    expect_rejected(chat_with("logprobs", 1), "logprobs");
    expect_rejected(chat_with("top_logprobs", 2), "top_logprobs");  // without logprobs: true
    expect_rejected(chat_with("stream", "yes"), "stream");
    expect_rejected(chat_with("stream_options", ojson{{"include_usage", true}}), "stream_options");  // no stream
    expect_rejected(chat_with("model", 7), "model");
    ojson b = user_chat();
    b["logprobs"] = true;
    b["top_logprobs"] = 21;
    expect_rejected(parse_chat_request(b, limits()), "top_logprobs");
}

TEST(OpenAIRequest, ThinkingFollowsEffortKwargsAndDefault) {
    auto mode = [](const ApiResult<ChatRequest>& r) { return r->chat.thinking_mode; };
    EXPECT_EQ(mode(parse_chat_request(user_chat(), limits(false))), chat::ThinkingMode::chat);
    EXPECT_EQ(mode(parse_chat_request(user_chat(), limits(true))), chat::ThinkingMode::thinking);
    EXPECT_EQ(mode(chat_with("reasoning_effort", "high")), chat::ThinkingMode::thinking);
    auto max = chat_with("reasoning_effort", "max");
    EXPECT_EQ(mode(max), chat::ThinkingMode::thinking);
    EXPECT_EQ(max->chat.reasoning_effort, chat::ReasoningEffort::max);
    EXPECT_EQ(mode(chat_with("reasoning_effort", "low", /*thinking_default=*/true)), chat::ThinkingMode::chat);
    EXPECT_EQ(mode(chat_with("chat_template_kwargs", ojson{{"thinking", true}})), chat::ThinkingMode::thinking);
    EXPECT_EQ(mode(chat_with("chat_template_kwargs", ojson{{"thinking", false}}, true)), chat::ThinkingMode::chat);
    expect_rejected(chat_with("reasoning_effort", "extreme"), "reasoning_effort");
    expect_rejected(chat_with("chat_template_kwargs", ojson{{"thinking", "yes"}}), "chat_template_kwargs.thinking");
    // The rendered prompt opens the reasoning in thinking mode.
    auto p = render_chat_prompt(*chat_with("reasoning_effort", "high"));
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->ends_with(std::string(chat::kAssistant) + std::string(chat::kThinkStart)));
}

// ---- chat: tools and response_format ---------------------------------------------------------------------

ojson weather_tools() {
    return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

TEST(OpenAIRequest, ToolsAreValidated) {
    expect_rejected(chat_with("tools", ojson::object()), "tools");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "retrieval"}])")), "tools[0].type");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function"}])")), "tools[0].function");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": "bad name"}}])")),
                    "tools[0].function.name");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": ""}}])")),
                    "tools[0].function.name");
    expect_rejected(
        chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": "x"}}])")),
        "tools[0].function.parameters");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": []}}}])")),
                    "tools[0].function.parameters.properties");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "required": [1]}}}])")),
                    "tools[0].function.parameters.required");
    expect_rejected(chat_with("tools", ojson::parse(R"([{"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "f"}}])")),
                    "tools[1].function.name");
    expect_rejected(chat_with("tool_choice", "required"), "tool_choice");  // no tools
    expect_rejected(chat_with("tool_choice", "sometimes"), "tool_choice");
    ojson b = user_chat();
    b["tools"] = weather_tools();
    b["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "other"}})");
    expect_rejected(parse_chat_request(b, limits()), "tool_choice");
    b["tool_choice"] = 3;
    expect_rejected(parse_chat_request(b, limits()), "tool_choice");
}

TEST(OpenAIRequest, ToolChoiceShapesThePrompt) {
    ojson b = user_chat();
    b["tools"] = weather_tools();
    auto with_choice = [&](ojson choice, bool thinking) {
        ojson x = b;
        if (!choice.is_null()) x["tool_choice"] = std::move(choice);
        auto r = parse_chat_request(x, limits(thinking));
        EXPECT_TRUE(r.ok()) << r.error().message;
        return r;
    };
    auto automatic = with_choice(nullptr, false);
    EXPECT_EQ(automatic->n_tools, 1u);
    EXPECT_TRUE(automatic->forced_prefix.empty());
    auto p = render_chat_prompt(*automatic);
    ASSERT_TRUE(p.ok());
    EXPECT_NE(p->find("get_weather"), std::string::npos);

    auto none = with_choice("none", false);
    EXPECT_EQ(none->n_tools, 0u);
    EXPECT_EQ(render_chat_prompt(*none)->find("get_weather"), std::string::npos);

    const std::string opener = std::string(chat::kToolCallsStart) + ">\n" + std::string(chat::kInvokeStart) + " name=\"";
    auto required = with_choice("required", false);
    EXPECT_EQ(required->forced_prefix, opener);
    EXPECT_TRUE(render_chat_prompt(*required)->ends_with(opener));

    auto named = with_choice(ojson::parse(R"({"type": "function", "function": {"name": "get_weather"}})"), false);
    EXPECT_EQ(named->tool_choice, ToolChoice::named);
    EXPECT_EQ(named->forced_prefix, opener + "get_weather\">\n");

    // Thinking mode reasons first: nothing is forced.
    EXPECT_TRUE(with_choice("required", true)->forced_prefix.empty());
}

TEST(OpenAIRequest, ResponseFormatIsValidatedAndRendered) {
    expect_rejected(chat_with("response_format", "json"), "response_format");
    expect_rejected(chat_with("response_format", ojson{{"type", "xml"}}), "response_format.type");
    expect_rejected(chat_with("response_format", ojson{{"type", "json_schema"}}), "response_format.json_schema");
    expect_rejected(chat_with("response_format", ojson::parse(R"({"type": "json_schema", "json_schema": {}})")),
                    "response_format.json_schema.name");
    auto text = chat_with("response_format", ojson{{"type", "text"}});
    ASSERT_TRUE(text.ok());
    auto plain = parse_chat_request(user_chat(), limits());
    EXPECT_EQ(*render_chat_prompt(*text), *render_chat_prompt(*plain));
    auto obj = chat_with("response_format", ojson{{"type", "json_object"}});
    ASSERT_TRUE(obj.ok()) << obj.error().message;
    EXPECT_EQ(obj->messages[0]["role"], "system");
    EXPECT_EQ(obj->messages[0]["response_format"]["type"], "json_object");
    EXPECT_NE(render_chat_prompt(*obj)->find("json_object"), std::string::npos);
}

// Every fixture conversation the OpenAI API can express (tools / response_format on the leading system
// message become top-level fields; thinking options become reasoning_effort / chat_template_kwargs) renders
// byte for byte the official encoder's prompt.
TEST(OpenAIRequest, RendersTheOfficialPromptsOfTheFixtures) {
    std::ifstream in(kShared + "/fixtures/chat/encode_cases.json");
    ASSERT_TRUE(in) << "missing chat fixtures";
    const ojson cases = ojson::parse(in);
    int checked = 0;
    for (const ojson& c : cases) {
        if (!c["error"].is_null()) continue;
        const ojson& opt = c["options"];
        if (opt.contains("drop_thinking") || opt.contains("add_default_bos_token")) continue;
        ojson req = {{"model", "m"}, {"messages", ojson::array()}};
        bool expressible = true;
        for (size_t i = 0; i < c["messages"].size(); ++i) {
            ojson m = c["messages"][i];
            for (const char* key : {"tools", "response_format"}) {
                if (!m.contains(key)) continue;
                if (i != 0 || m["role"] != "system") expressible = false;
                req[key] = m[key];
                m.erase(key);
            }
            if (m.contains("wo_eos") || m.contains("task") || m.contains("content_blocks")) expressible = false;
            req["messages"].push_back(std::move(m));
        }
        if (!expressible) continue;
        if (opt.value("thinking_mode", "chat") == "thinking") {
            if (opt.contains("reasoning_effort") && !opt["reasoning_effort"].is_null()) {
                req["reasoning_effort"] = opt["reasoning_effort"];
            } else {
                req["chat_template_kwargs"] = {{"thinking", true}};
            }
        }
        auto r = parse_chat_request(req, limits());
        ASSERT_TRUE(r.ok()) << c["name"] << ": " << r.error().message;
        auto p = render_chat_prompt(*r);
        ASSERT_TRUE(p.ok()) << c["name"] << ": " << p.error().message;
        EXPECT_EQ(*p, c["prompt"].get<std::string>()) << c["name"] << " " << opt.dump();
        ++checked;
    }
    EXPECT_GE(checked, 30);  // most of the 55 cases are plain OpenAI conversations
}

// ---- context ---------------------------------------------------------------------------------------------

TEST(OpenAIRequest, FitContext) {
    EXPECT_EQ(*fit_context(100, -1, 4096, "messages"), 3996);
    EXPECT_EQ(*fit_context(100, 50, 4096, "messages"), 50);
    EXPECT_EQ(*fit_context(100, 3996, 4096, "messages"), 3996);
    auto over = fit_context(100, 3997, 4096, "messages");
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.error().status, 400);
    EXPECT_EQ(over.error().code, "context_length_exceeded");
    EXPECT_NE(over.error().message.find("4096"), std::string::npos);
    auto full = fit_context(4096, -1, 4096, "prompt");
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error().param, "prompt");
    // The default cap applies only when the request gave no max_tokens, and never beyond the room left.
    EXPECT_EQ(*fit_context(100, -1, 4096, "messages", 2048), 2048);
    EXPECT_EQ(*fit_context(3000, -1, 4096, "messages", 2048), 1096);
    EXPECT_EQ(*fit_context(100, 3000, 4096, "messages", 2048), 3000);
    EXPECT_EQ(*fit_context(100, -1, 4096, "messages", 0), 3996);
}

TEST(OpenAIRequest, ModelNotFound) {
    const ApiError e = model_not_found("gpt-4o", {"tiny", "tiny-alias"});
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_EQ(e.param, "model");
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_NE(e.message.find("'gpt-4o'"), std::string::npos);
    EXPECT_NE(e.message.find("'tiny', 'tiny-alias'"), std::string::npos);
    const json list = models_json(std::vector<std::string>{"a", "b"}, 5, 4096);
    ASSERT_EQ(list["data"].size(), 2u);
    EXPECT_EQ(list["data"][1]["id"], "b");
}

// ---- text completions ------------------------------------------------------------------------------------

TEST(OpenAIRequest, CompletionPrompts) {
    auto s = parse_completion_request(body(R"({"model": "m", "prompt": "Once"})"), limits());
    ASSERT_TRUE(s.ok());
    EXPECT_FALSE(s->prompt_is_tokens);
    EXPECT_EQ(s->prompt_text, "Once");
    EXPECT_EQ(s->gen.max_tokens, 16);  // OpenAI's default for completions
    auto t = parse_completion_request(body(R"({"prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 2, "echo": true})"),
                                      limits());
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_TRUE(t->prompt_is_tokens);
    EXPECT_EQ(t->prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_TRUE(t->gen.logprobs);
    EXPECT_EQ(t->gen.top_logprobs, 2);
    EXPECT_TRUE(t->echo);
    EXPECT_TRUE(parse_completion_request(body(R"({"prompt": ["one"]})"), limits()).ok());
    EXPECT_TRUE(parse_completion_request(body(R"({"prompt": [[5, 6]]})"), limits()).ok());

    expect_rejected(parse_completion_request(body(R"({"model": "m"})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": 5})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": []})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": ["a", "b"]})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": [1, 129280]})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": [1, -1]})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": [1, "a"]})"), limits()), "prompt");
    expect_rejected(parse_completion_request(body(R"({"prompt": "x", "suffix": "y"})"), limits()), "suffix");
    expect_rejected(parse_completion_request(body(R"({"prompt": "x", "best_of": 2})"), limits()), "best_of");
    expect_rejected(parse_completion_request(body(R"({"prompt": "x", "n": 3})"), limits()), "n");
    expect_rejected(parse_completion_request(body(R"({"prompt": "x", "logprobs": true})"), limits()), "logprobs");
    expect_rejected(parse_completion_request(body(R"({"prompt": "x", "echo": "yes"})"), limits()), "echo");
}

// ---- responses: DSML -> tool_calls -----------------------------------------------------------------------

struct Collected {
    ChatDelta all;
    chat::ParsedMessage message;
    std::string error;
};

// Feeds `text` in pieces cut at `cuts` random places, then finishes; collects every delta.
Collected run_accumulator(chat::ThinkingMode mode, const std::string& prefix, const std::string& text,
                          std::mt19937& rng, int cuts) {
    ChatAccumulator acc(mode, prefix, "call_x");
    Collected c;
    auto add = [&](ChatDelta d) {
        c.all.reasoning += d.reasoning;
        c.all.content += d.content;
        for (auto& t : d.tool_calls) c.all.tool_calls.push_back(std::move(t));
    };
    std::vector<size_t> at;
    for (int i = 0; i < cuts && !text.empty(); ++i) at.push_back(rng() % text.size());
    at.push_back(0);
    at.push_back(text.size());
    std::sort(at.begin(), at.end());
    for (size_t i = 0; i + 1 < at.size(); ++i) add(acc.push(std::string_view(text).substr(at[i], at[i + 1] - at[i])));
    add(acc.finish());
    c.message = acc.message();
    c.error = acc.error();
    return c;
}

void expect_no_markup(const std::string& s) {
    for (std::string_view m : {chat::kDsml, chat::kEos, chat::kBos, chat::kThinkEnd}) {
        EXPECT_EQ(s.find(m), std::string::npos) << "markup '" << m << "' leaked into: " << s;
    }
}

// The official parser's fixture cases through the streaming accumulator, whole and in random pieces, with and
// without the trailing EOS text (the engine stops on the EOS token without emitting its text).
TEST(OpenAIResponse, ParseFixturesThroughTheAccumulator) {
    std::ifstream in(kShared + "/fixtures/chat/parse_cases.json");
    ASSERT_TRUE(in) << "missing chat fixtures";
    const ojson cases = ojson::parse(in);
    std::mt19937 rng(7);
    int with_tools = 0;
    for (const ojson& c : cases) {
        if (!c["error"].is_null()) continue;
        const auto mode = c["thinking_mode"] == "thinking" ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
        const std::string text = c["text"];
        const std::string eos(chat::kEos);
        ASSERT_TRUE(text.ends_with(eos));
        for (const std::string& t : {text, text.substr(0, text.size() - eos.size())}) {
            for (int cuts : {0, 3, 40}) {
                Collected got = run_accumulator(mode, "", t, rng, cuts);
                EXPECT_TRUE(got.error.empty()) << got.error;
                const ojson& want = c["message"];
                EXPECT_EQ(got.message.content, want["content"].get<std::string>());
                EXPECT_EQ(got.message.reasoning_content, want["reasoning_content"].get<std::string>());
                ASSERT_EQ(got.message.tool_calls.size(), want["tool_calls"].size());
                for (size_t i = 0; i < want["tool_calls"].size(); ++i) {
                    EXPECT_EQ(got.message.tool_calls[i].name, want["tool_calls"][i]["function"]["name"]);
                    EXPECT_EQ(plain_json::parse(got.message.tool_calls[i].arguments),
                              plain_json::parse(want["tool_calls"][i]["function"]["arguments"].get<std::string>()));
                    EXPECT_EQ(got.all.tool_calls[i].id, "call_x_" + std::to_string(i));
                    EXPECT_EQ(got.all.tool_calls[i].index, i);
                }
                // The deltas add up to the message, and none carries markup.
                EXPECT_EQ(got.all.content, got.message.content);
                EXPECT_EQ(got.all.reasoning, got.message.reasoning_content);
                expect_no_markup(got.all.content);
                expect_no_markup(got.all.reasoning);
            }
        }
        if (!c["message"]["tool_calls"].empty()) ++with_tools;
    }
    EXPECT_GE(with_tools, 2);
}

TEST(OpenAIResponse, ToolCallsBecomeOpenAIToolCalls) {
    const std::string d(chat::kDsml);
    const std::string text = "Let me check.\n\n<" + d + "tool_calls>\n<" + d + "invoke name=\"get_weather\">\n<" + d +
                             "parameter name=\"city\" string=\"true\">Paris</" + d + "parameter>\n<" + d +
                             "parameter name=\"days\" string=\"false\">3</" + d + "parameter>\n</" + d +
                             "invoke>\n</" + d + "tool_calls>";
    std::mt19937 rng(1);
    Collected got = run_accumulator(chat::ThinkingMode::chat, "", text, rng, 25);
    ASSERT_TRUE(got.error.empty()) << got.error;
    EXPECT_EQ(got.message.content, "Let me check.");
    ASSERT_EQ(got.message.tool_calls.size(), 1u);
    EXPECT_EQ(got.message.tool_calls[0].name, "get_weather");
    EXPECT_EQ(plain_json::parse(got.message.tool_calls[0].arguments), plain_json::parse(R"({"city": "Paris", "days": 3})"));

    ResponseMeta meta{"chatcmpl-1", "m", 123};
    const json full = chat_completion_json(meta, got.message, {"call_x_0"}, finish_reason_name(false, true),
                                           Usage{10, 5, 4}, nullptr);
    EXPECT_EQ(full["object"], "chat.completion");
    const json& choice = full["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(choice["message"]["content"], "Let me check.");
    EXPECT_FALSE(choice["message"].contains("reasoning_content"));
    const json& call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["id"], "call_x_0");
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_TRUE(call["function"]["arguments"].is_string());
    EXPECT_EQ(full["usage"]["total_tokens"], 15);
    EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 4);

    // Streamed: content and the call arrive in their own chunks, the call with index, id, type and function.
    std::vector<json> chunks = chat_delta_chunks(meta, got.all, /*include_usage=*/true);
    ASSERT_EQ(chunks.size(), 2u);
    EXPECT_EQ(chunks[0]["choices"][0]["delta"]["content"], "Let me check.");
    EXPECT_TRUE(chunks[0]["usage"].is_null());
    const json& dcall = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(dcall["index"], 0);
    EXPECT_EQ(dcall["id"], "call_x_0");
    EXPECT_EQ(dcall["function"]["name"], "get_weather");
    EXPECT_EQ(chunks[1]["object"], "chat.completion.chunk");
    EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
}

TEST(OpenAIResponse, ForcedPrefixIsReadBeforeTheGeneration) {
    const std::string d(chat::kDsml);
    const std::string opener = std::string(chat::kToolCallsStart) + ">\n" + std::string(chat::kInvokeStart) + " name=\"";
    const std::string rest = "<" + d + "parameter name=\"q\" string=\"true\">x</" + d + "parameter>\n</" + d +
                             "invoke>\n</" + d + "tool_calls>";
    std::mt19937 rng(3);
    Collected named = run_accumulator(chat::ThinkingMode::chat, opener + "search\">\n", rest, rng, 10);
    ASSERT_TRUE(named.error.empty()) << named.error;
    EXPECT_TRUE(named.message.content.empty());
    ASSERT_EQ(named.message.tool_calls.size(), 1u);
    EXPECT_EQ(named.message.tool_calls[0].name, "search");
    Collected required = run_accumulator(chat::ThinkingMode::chat, opener, "lookup\">\n" + rest, rng, 10);
    ASSERT_EQ(required.message.tool_calls.size(), 1u);
    EXPECT_EQ(required.message.tool_calls[0].name, "lookup");
}

TEST(OpenAIResponse, MalformedMarkupNeverLeaks) {
    const std::string d(chat::kDsml);
    std::mt19937 rng(5);
    for (int cuts : {0, 5, 50}) {
        Collected got = run_accumulator(chat::ThinkingMode::chat, "",
                                        "Answer\n\n<" + d + "tool_calls>\n<" + d + "invoke nam=\"x\">junk junk", rng,
                                        cuts);
        EXPECT_FALSE(got.error.empty());
        EXPECT_EQ(got.all.content, "Answer");
        expect_no_markup(got.all.content);
        EXPECT_TRUE(got.message.tool_calls.empty());
    }
}

TEST(OpenAIResponse, CutOffReasoningClosesCleanly) {
    std::mt19937 rng(9);
    // max_tokens reached while still thinking: the reasoning so far, no content, no error.
    Collected got = run_accumulator(chat::ThinkingMode::thinking, "", "step one, step two", rng, 4);
    EXPECT_TRUE(got.error.empty()) << got.error;
    EXPECT_EQ(got.message.reasoning_content, "step one, step two");
    EXPECT_TRUE(got.message.content.empty());
    // Reasoning then an answer cut off.
    Collected both = run_accumulator(chat::ThinkingMode::thinking, "", "hmm</think>The ans", rng, 6);
    EXPECT_EQ(both.message.reasoning_content, "hmm");
    EXPECT_EQ(both.message.content, "The ans");
    ResponseMeta meta{"id", "m", 1};
    const json j = chat_completion_json(meta, both.message, {}, finish_reason_name(true, false), Usage{}, nullptr);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "hmm");
}

TEST(OpenAIResponse, FinishReasons) {
    EXPECT_STREQ(finish_reason_name(false, false), "stop");
    EXPECT_STREQ(finish_reason_name(false, true), "tool_calls");
    EXPECT_STREQ(finish_reason_name(true, true), "length");
}

TEST(OpenAIResponse, ChunksUsageAndWireFormat) {
    ResponseMeta meta{"chatcmpl-9", "tiny", 42};
    const json u = chat_usage_chunk(meta, Usage{7, 3, 0});
    EXPECT_TRUE(u["choices"].empty());
    EXPECT_EQ(u["usage"]["prompt_tokens"], 7);
    EXPECT_EQ(u["usage"]["completion_tokens"], 3);
    EXPECT_EQ(u["usage"]["total_tokens"], 10);
    const json c = chat_chunk(meta, {{"content", "x"}}, "stop", nullptr, false);
    EXPECT_FALSE(c.contains("usage"));
    EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(c["created"], 42);
    const std::string sse = sse_data(c);
    EXPECT_TRUE(sse.starts_with("data: {"));
    EXPECT_TRUE(sse.ends_with("}\n\n"));
    EXPECT_EQ(json::parse(sse.substr(6)), c);
    // Invalid UTF-8 never throws on the wire: it becomes U+FFFD.
    const std::string dumped = dump_json(json{{"t", std::string("a\xff" "b")}});
    EXPECT_TRUE(utf8_is_valid(dumped));
    EXPECT_NE(dumped.find("\xEF\xBF\xBD"), std::string::npos);

    const json tc = completion_json(meta, "hello", "length", Usage{1, 2, 0}, nullptr);
    EXPECT_EQ(tc["object"], "text_completion");
    EXPECT_EQ(tc["choices"][0]["text"], "hello");
    EXPECT_EQ(tc["choices"][0]["finish_reason"], "length");
    const json m = models_json("tiny", 5, 4096);
    EXPECT_EQ(m["object"], "list");
    EXPECT_EQ(m["data"][0]["id"], "tiny");
    EXPECT_EQ(m["data"][0]["object"], "model");
}

const Tokenizer& vocab() {
    static const std::unique_ptr<Tokenizer> tok = [] {
        auto file = GgufFile::open(kShared + "/fixtures/tokenizer/deepseek_v3/vocab.gguf");
        if (!file.ok()) {
            ADD_FAILURE() << file.error();
            std::abort();
        }
        auto t = Tokenizer::from_gguf(**file);
        if (!t.ok()) {
            ADD_FAILURE() << t.error();
            std::abort();
        }
        return std::move(*t);
    }();
    return *tok;
}

TEST(OpenAIResponse, LogprobEntriesCarryTokenBytes) {
#ifndef DSV4_HAVE_PCRE2
    GTEST_SKIP() << "the tokenizer needs PCRE2, which this build (DSV4_MINIMAL) leaves out";
#endif
    const Tokenizer& tok = vocab();
    const std::vector<int32_t> ids = tok.encode("héllo wörld ✓", false);
    ASSERT_GE(ids.size(), 3u);
    CompletionLogprobs legacy;
    int64_t offset = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        TokenLogprobs lp{ids[i], -0.5f * (float)i, {{ids[i], -0.1f}, {ids[0], -2.0f}}};
        const json e = chat_logprob_entry(tok, lp);
        std::string bytes;
        for (const json& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
        EXPECT_EQ(bytes, std::string(tok.token_text(ids[i])));
        EXPECT_TRUE(utf8_is_valid(e["token"].get<std::string>()));
        EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -0.5f * (float)i);
        EXPECT_EQ(e["top_logprobs"].size(), 2u);
        legacy.add(tok, lp, offset);
        offset += (int64_t)tok.token_text(ids[i]).size();
    }
    const json l = legacy.to_json();
    EXPECT_EQ(l["tokens"].size(), ids.size());
    EXPECT_EQ(l["token_logprobs"].size(), ids.size());
    EXPECT_EQ(l["text_offset"].back(), offset - (int64_t)tok.token_text(ids.back()).size());
    EXPECT_TRUE(utf8_is_valid(dump_json(l)));
}

// ---- metrics ---------------------------------------------------------------------------------------------

TEST(ServerMetrics, PrometheusText) {
    EngineStats e;
    e.requests_total = 12;
    e.requests_cancelled = 2;
    e.generated_tokens = 300;
    e.busy_seconds = 1.5;
    e.queue_depth = 3;
    e.kv_tokens_used = 1024;
    e.kv_tokens_capacity = 4096;
    HttpCounters http;
    http.count_request("/v1/chat/completions", 200);
    http.count_request("/v1/chat/completions", 200);
    http.count_request("/v1/completions", 400);
    http.count_disconnect();
    ProcessStats proc;
    proc.uptime_seconds = 10.0;
    proc.heap_allocated_bytes = 123456;
    const std::string text = render_metrics(e, http.snapshot(), proc);

    // Every line is a comment or "name{labels} value"; every sampled family was declared.
    // Metric and label names as the exposition format defines them.
    const std::regex sample(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (-?[0-9.e+-]+|NaN)$)");
    std::istringstream lines(text);
    std::string line;
    std::set<std::string> declared;
    int samples = 0;
    while (std::getline(lines, line)) {
        if (line.rfind("# TYPE ", 0) == 0) {
            declared.insert(line.substr(7, line.find(' ', 7) - 7));
            continue;
        }
        if (line.rfind("# HELP ", 0) == 0) continue;
        std::smatch m;
        ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
        EXPECT_TRUE(declared.count(m[1])) << line;
        ++samples;
    }
    EXPECT_GT(samples, 15);
    auto has = [&](const std::string& l) { return text.find("\n" + l + "\n") != std::string::npos; };
    EXPECT_TRUE(has("dsv4_requests_total 12"));
    EXPECT_TRUE(has("dsv4_requests_cancelled_total 2"));
    EXPECT_TRUE(has("dsv4_queue_depth 3"));
    EXPECT_TRUE(has("dsv4_generation_tokens_per_second 200"));
    EXPECT_TRUE(has("dsv4_kv_usage_ratio 0.25"));
    EXPECT_TRUE(has("dsv4_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2"));
    EXPECT_TRUE(has("dsv4_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1"));
    EXPECT_TRUE(has("dsv4_client_disconnects_total 1"));
    EXPECT_TRUE(has("dsv4_uptime_seconds 10"));
    EXPECT_TRUE(has("dsv4_heap_allocated_bytes 123456"));

    // Where the C library cannot say, the family is left out rather than reported as zero.
    proc.heap_allocated_bytes.reset();
    EXPECT_EQ(render_metrics(e, http.snapshot(), proc).find("dsv4_heap_allocated_bytes"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
