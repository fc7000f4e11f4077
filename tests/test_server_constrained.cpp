// Constrained decoding on the real DeepSeek vocabulary, where random weights are the hardest case for a
// grammar (every token is about as likely as any other): every completion ends with "stop" within its budget
// and parses as JSON and validates against its schema (checked by a small validator of the supported subset,
// written apart from the grammar), both through the engine on a synthetic tiny model (batches mixing schemas)
// and, at scale, through the sampler on random logits; forced tool calls always parse into a call whose
// arguments validate.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/synth.h"
#include "runtime/engine.h"
#include "util/sanitizer.h"
#include "util/schema_check.h"
#include "util/tiny_model.h"
#include "runtime/grammar_cache.h"
#include "runtime/json_schema.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"
#include "server/responses_request.h"
#include "tokenizer/chat_parser.h"

using namespace dsv4;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {


bool validate(const json& v, const json& s, const json& root, std::string& why) {
    return test::schema_validate(v, s, root, why);
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]}}, "required": ["ok", "n", "color"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"name": {"type": "string"}, "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3}},
        "required": ["name", "score", "tags"], "additionalProperties": false})",
    R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"],
        "additionalProperties": false}}})",
    R"({"type": "array", "items": {"type": ["integer", "null", "boolean"]}, "maxItems": 4})",
    R"({"type": "object", "properties": {"at": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"}, "day": {"type": ["string", "null"], "format": "date"}},
        "required": ["at", "id", "day"], "additionalProperties": false})",
    nullptr,  // json_object mode
};
constexpr int kNumSchemas = sizeof(kSchemas) / sizeof(kSchemas[0]);

json schema_of(int i) { return kSchemas[i] ? json::parse(kSchemas[i]) : json::parse(R"({"type": "object"})"); }

Grammar grammar_of(int i) {
    if (!kSchemas[i]) return json_object_grammar();
    auto g = compile_json_schema(ojson::parse(kSchemas[i]));
    EXPECT_TRUE(g.ok()) << g.error();
    return std::move(*g);
}

// Parses and validates `text` against schema i; a message on failure.
std::string check_value(const std::string& text, int i) {
    json v = json::parse(text, nullptr, false);
    if (v.is_discarded()) return "not JSON: " + text;
    const json s = schema_of(i);
    std::string why;
    if (!validate(v, s, s, why)) return "does not validate (" + why + "): " + text;
    return {};
}

class ConstrainedTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto t = test::make_tiny_model("constrained", 11);
        ASSERT_TRUE(t.ok()) << t.error();
        tiny_ = t->release();
        backend_ = tiny_->backend.get();
        model_ = tiny_->model.get();
        tok_ = tiny_->tokenizer.get();
        cache_ = new GrammarCache(*tok_);
    }
    static void TearDownTestSuite() {
        delete cache_;
        delete tiny_;
    }

    static std::shared_ptr<const TokenGrammar> bound(int i) {
        auto g = cache_->get("test schema " + std::to_string(i), [i]() -> Result<Grammar> { return grammar_of(i); });
        EXPECT_TRUE(g.ok()) << g.error();
        return *g;
    }

    struct Out {
        std::string text;
        GenerationEnd reason = GenerationEnd::none;
        std::string error;
    };

    static inline test::TinyModel* tiny_ = nullptr;
    static inline Backend* backend_ = nullptr;
    static inline Model* model_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
    static inline GrammarCache* cache_ = nullptr;
};

// Through the engine: 8 slots decode requests of every schema side by side, each with its own seed (20 per
// schema; a tenth under a sanitizer, tests/util/sanitizer.h).
TEST_F(ConstrainedTest, EngineCompletionsParseAndValidate) {
    EngineOptions o;
    o.n_slots = 8;
    o.n_ctx = 256;
    o.prefix_block = 16;
    Engine e(*model_, *tok_, o);
    const std::vector<int32_t> prompt = tok_->encode("<｜begin▁of▁sentence｜><｜User｜>Answer in JSON.<｜Assistant｜></think>", true);
    const int per_schema = test::repetitions(20);
    std::vector<Out> outs(static_cast<size_t>(per_schema * kNumSchemas));
    for (int k = 0; k < per_schema * kNumSchemas; ++k) {
        GenerationRequest r;
        r.prompt = prompt;
        r.max_tokens = 64;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 1000 + static_cast<uint64_t>(k);
        r.constraint = GrammarConstraint{bound(k % kNumSchemas)};
        Out& out = outs[static_cast<size_t>(k)];
        auto id = e.submit(std::move(r), [&out](const TokenEvent& ev) {
            out.text += ev.text;
            if (ev.finished) {
                out.reason = ev.reason;
                out.error = ev.error;
            }
        });
        ASSERT_TRUE(id.ok()) << id.error();
    }
    e.run_until_idle();
    int stopped = 0;
    for (size_t k = 0; k < outs.size(); ++k) {
        const Out& out = outs[k];
        // max_tokens is the budget the mask keeps: every value ends, with EOS, in time.
        ASSERT_EQ(out.reason, GenerationEnd::stop)
            << "completion " << k << ": " << generation_end_name(out.reason) << " " << out.error << ": " << out.text;
        ++stopped;
        EXPECT_EQ(check_value(out.text, static_cast<int>(k % kNumSchemas)), "") << "completion " << k;
    }
    std::printf("engine: %d of %zu completions ended with stop, all valid\n", stopped, outs.size());
    EXPECT_EQ(stopped, static_cast<int>(outs.size()));
}

// At scale through the sampler: 1,000 completions on random logits over the real vocabulary (100 under a
// sanitizer).
TEST_F(ConstrainedTest, ThousandSampledCompletionsParseAndValidate) {
    // A pool of random logit vectors, one picked per step (drawing 128k normals per step would dominate).
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<std::vector<float>> pool(32, std::vector<float>(static_cast<size_t>(tok_->n_vocab())));
    for (auto& v : pool)
        for (float& x : v) x = nd(rng);
    int stopped = 0, total = 0;
    for (int k = 0; k < test::repetitions(1000); ++k) {
        const int i = k % kNumSchemas;
        SamplingParams sp;
        sp.seed = static_cast<uint64_t>(k);
        sp.top_k = 64;  // after the mask: a random-weight model's top few among the allowed tokens
        Sampler sampler(sp);
        GrammarMatcher m(GrammarConstraint{bound(i)}, {tok_->eos()});
        std::string text;
        bool ended = false;
        constexpr int kBudget = 160;
        for (int step = 0; step < kBudget && !ended; ++step) {
            auto r = sampler.sample(pool[rng() % pool.size()], {}, m.mask(kBudget - step));
            ASSERT_TRUE(r.ok()) << r.error();
            ASSERT_TRUE(m.accept(r->token, tok_->token_text(r->token)).ok()) << "completion " << k;
            if (r->token == tok_->eos()) {
                ended = true;
            } else {
                text += tok_->token_text(r->token);
            }
        }
        ++total;
        if (!ended) continue;
        ++stopped;
        EXPECT_EQ(check_value(text, i), "") << "completion " << k;
    }
    std::printf("sampler: %d of %d completions ended, all valid\n", stopped, total);
    EXPECT_EQ(stopped, total);  // within the budget the mask was given
}

// Forced tool calls through the chat request path: the prompt opens the call, the grammar writes the rest,
// and the official parser's port reads a call whose arguments validate.
TEST_F(ConstrainedTest, ForcedToolCallsParseAndValidate) {
    const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]},
        "detail": {"type": "boolean"}}, "required": ["days", "unit"]}}},
        {"type": "function", "function": {"name": "set_flags", "parameters": {"type": "object", "properties": {
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}}, "required": ["flags"],
        "additionalProperties": false}}}])";
    const json tools = json::parse(kTools);
    EngineOptions o;
    o.n_slots = 8;
    o.n_ctx = 1024;
    o.prefix_block = 16;
    Engine e(*model_, *tok_, o);
    server::RequestLimits limits;
    limits.n_vocab = tok_->n_vocab();
    struct Run {
        server::ChatRequest req;
        Out out;
    };
    std::vector<std::unique_ptr<Run>> runs;
    // 24 in chat mode (the prompt opens the call), 8 in thinking mode (free reasoning until the budget leaves
    // just room for "</think>" and the shortest call). Under a sanitizer 12 of them: three of every eight, which
    // still cover both modes and all three tool choices (tests/util/sanitizer.h says why fewer).
    for (int k = 0; k < 32; ++k) {
        if (DSV4_SANITIZED && k % 8 >= 3) continue;
        ojson body = ojson::parse(R"({"messages": [{"role": "user", "content": "Call a tool."}]})");
        body["tools"] = ojson::parse(kTools);
        if (k >= 24) body["reasoning_effort"] = "high";
        if (k % 3 == 0) body["tool_choice"] = "required";
        else body["tool_choice"] = {{"type", "function"}, {"function", {{"name", k % 3 == 1 ? "get_weather" : "set_flags"}}}};
        auto req = server::parse_chat_request(body, limits);
        ASSERT_TRUE(req.ok()) << req.error().message;
        ASSERT_TRUE(req->output.grammar);
        ASSERT_EQ(req->output.trigger, k >= 24 ? std::string(chat::kThinkEnd) : std::string());
        auto run = std::make_unique<Run>();
        run->req = std::move(*req);
        auto text = server::render_chat_prompt(run->req);
        ASSERT_TRUE(text.ok());
        auto g = cache_->get(run->req.output.key, [&]() -> Result<Grammar> { return *run->req.output.grammar; });
        ASSERT_TRUE(g.ok()) << g.error();
        GenerationRequest r;
        r.prompt = tok_->encode(*text, true);
        r.max_tokens = 160;
        r.sampling.seed = 77 + static_cast<uint64_t>(k);
        r.constraint = GrammarConstraint{*g, run->req.output.trigger, run->req.output.trigger_required, run->req.output.prefix};
        Out* out = &run->out;
        ASSERT_TRUE(e.submit(std::move(r), [out](const TokenEvent& ev) {
                         out->text += ev.text;
                         if (ev.finished) out->reason = ev.reason;
                     }).ok());
        runs.push_back(std::move(run));
    }
    e.run_until_idle();
    int stopped = 0;
    for (size_t k = 0; k < runs.size(); ++k) {
        const Run& run = *runs[k];
        ASSERT_EQ(run.out.reason, GenerationEnd::stop) << run.out.text;
        ++stopped;
        const std::string completion = run.req.forced_prefix + run.out.text + std::string(chat::kEos);
        auto msg = chat::parse_completion(completion, run.req.chat.thinking_mode);
        ASSERT_TRUE(msg.ok()) << msg.error() << "\n" << completion;
        ASSERT_FALSE(msg->tool_calls.empty());
        EXPECT_EQ(msg->content, "");
        for (const chat::ToolCall& call : msg->tool_calls) {
            if (run.req.tool_choice == server::ToolChoice::named) {
                EXPECT_EQ(call.name, run.req.tool_name);
            }
            const json* schema = nullptr;
            for (const json& t : tools)
                if (t["function"]["name"] == call.name) schema = &t["function"]["parameters"];
            ASSERT_NE(schema, nullptr) << call.name;
            json args = json::parse(call.arguments, nullptr, false);
            ASSERT_FALSE(args.is_discarded()) << call.arguments;
            std::string why;
            EXPECT_TRUE(validate(args, *schema, *schema, why)) << why << ": " << call.arguments;
        }
    }
    std::printf("tool calls: %d of %zu forced calls ended with stop, all parsed and valid\n", stopped, runs.size());
    EXPECT_EQ(stopped, static_cast<int>(runs.size()));
}

// ---- which grammar a request gets, and the 400s ------------------------------------------------------------

server::RequestLimits request_limits() {
    server::RequestLimits l;
    l.n_vocab = 129280;
    return l;
}

ojson chat_body(const char* extra) {
    ojson b = ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})");
    const ojson more = ojson::parse(extra);
    for (const auto& [k, v] : more.items()) b[k] = v;
    return b;
}

const char* kWeather = R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";

TEST(OutputGrammar, ResponseFormatModes) {
    auto text = server::parse_chat_request(chat_body(R"({"response_format": {"type": "text"}})"), request_limits());
    ASSERT_TRUE(text.ok());
    EXPECT_FALSE(text->output.grammar);

    auto obj = server::parse_chat_request(chat_body(R"({"response_format": {"type": "json_object"}})"), request_limits());
    ASSERT_TRUE(obj.ok());
    ASSERT_TRUE(obj->output.grammar);
    EXPECT_EQ(obj->output.trigger, "");
    EXPECT_TRUE(GrammarRunner(*obj->output.grammar).matches(R"({"any": [1, {"x": null}]})"));
    EXPECT_FALSE(GrammarRunner(*obj->output.grammar).matches("[1]"));

    auto sch = server::parse_chat_request(
        chat_body(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
            "additionalProperties": false}}}})"),
        request_limits());
    ASSERT_TRUE(sch.ok());
    ASSERT_TRUE(sch->output.grammar);
    EXPECT_TRUE(GrammarRunner(*sch->output.grammar).matches(R"({"a": 1})"));
    EXPECT_FALSE(GrammarRunner(*sch->output.grammar).matches(R"({"a": "1"})"));

    // Thinking mode: the value comes after the reasoning.
    auto think = server::parse_chat_request(
        chat_body(R"({"reasoning_effort": "high", "response_format": {"type": "json_object"}})"), request_limits());
    ASSERT_TRUE(think.ok());
    EXPECT_EQ(think->output.trigger, "</think>");
    EXPECT_TRUE(think->output.trigger_required);

    // Tools under auto with a response format: the value or a tool-call block.
    auto both = server::parse_chat_request(
        chat_body((std::string(R"({"response_format": {"type": "json_object"}, "tools": [)") + kWeather + "]}").c_str()),
        request_limits());
    ASSERT_TRUE(both.ok());
    GrammarRunner run(*both->output.grammar);
    EXPECT_TRUE(run.matches(R"({"a": 1})"));
    EXPECT_TRUE(run.matches("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter "
                            "name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
}

TEST(OutputGrammar, ForcedAndStrictToolCalls) {
    const std::string tools = std::string(R"("tools": [)") + kWeather + "]";
    auto req = server::parse_chat_request(chat_body(("{" + tools + R"(, "tool_choice": "required"})").c_str()), request_limits());
    ASSERT_TRUE(req.ok());
    ASSERT_TRUE(req->output.grammar);
    EXPECT_EQ(req->output.prefix, req->forced_prefix);  // the prompt already opened the block
    GrammarRunner run(*req->output.grammar);
    GrammarState s = run.initial();
    ASSERT_TRUE(run.advance(s, req->output.prefix));
    EXPECT_TRUE(run.advance(s, "get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n"
                               "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
    EXPECT_TRUE(run.accepting(s));

    auto think = server::parse_chat_request(
        chat_body(("{" + tools + R"(, "tool_choice": "required", "reasoning_effort": "high"})").c_str()), request_limits());
    ASSERT_TRUE(think.ok());
    EXPECT_EQ(think->output.trigger, "</think>");
    EXPECT_EQ(think->output.prefix, "");

    // Not forced and not strict: unconstrained. Strict under auto: constrained once a block opens.
    auto plain = server::parse_chat_request(chat_body(("{" + tools + "}").c_str()), request_limits());
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(plain->output.grammar);
    ojson strict = chat_body(("{" + tools + "}").c_str());
    strict["tools"][0]["function"]["strict"] = true;
    auto st = server::parse_chat_request(strict, request_limits());
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(st->output.grammar);
    EXPECT_EQ(st->output.trigger, std::string(chat::kToolCallsStart));
    EXPECT_FALSE(st->output.trigger_required);

    // Anthropic tool_choice any / tool, and the Responses API's text.format, take the same path.
    auto anth = server::parse_messages_request(
        ojson::parse(R"({"max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], "tool_choice": {"type": "tool",
            "name": "get_weather"}, "tools": [{"name": "get_weather", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}]})"),
        request_limits(), false);
    ASSERT_TRUE(anth.ok()) << anth.error().message;
    ASSERT_TRUE(anth->output.grammar);
    EXPECT_EQ(anth->output.prefix, anth->forced_prefix);
    auto resp = server::parse_responses_request(
        ojson::parse(R"({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object",
            "properties": {"b": {"type": "boolean"}}, "required": ["b"], "additionalProperties": false}}}})"),
        request_limits());
    ASSERT_TRUE(resp.ok()) << resp.error().message;
    ASSERT_TRUE(resp->chat.output.grammar);
    EXPECT_TRUE(GrammarRunner(*resp->chat.output.grammar).matches(R"({"b": true})"));
}

TEST(OutputGrammar, UnsupportedSchemasAre400sNamingTheField) {
    auto bad = server::parse_chat_request(
        chat_body(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object",
            "properties": {"d": {"type": "string", "format": "hostname"}}}}}})"),
        request_limits());
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().status, 400);
    EXPECT_EQ(bad.error().param, "response_format.json_schema.schema");
    EXPECT_EQ(bad.error().code, "unsupported_schema");
    EXPECT_NE(bad.error().message.find("#/properties/d/format: format 'hostname' is not supported"), std::string::npos)
        << bad.error().message;

    ojson forced = chat_body(R"({"tool_choice": "required"})");
    forced["tools"] = ojson::array({ojson::parse(kWeather)});
    forced["tools"][0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^(?=A)";
    auto f = server::parse_chat_request(forced, request_limits());
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().param, "tools[0].function.parameters");
    EXPECT_NE(f.error().message.find("#/properties/city/pattern: a lookaround"), std::string::npos) << f.error().message;

    // The same tool under auto and not strict is simply not constrained.
    forced["tool_choice"] = "auto";
    EXPECT_TRUE(server::parse_chat_request(forced, request_limits()).ok());
}

}  // namespace
