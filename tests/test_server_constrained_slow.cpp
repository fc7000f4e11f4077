// The issue's acceptance test at full size: 1,000 completions through the engine on a synthetic model with
// the real DeepSeek vocabulary (random weights: every token about as likely as any other, the hardest case for
// a grammar), at several temperatures, under schemas that use every supported keyword (patterns, lengths,
// number bounds, oneOf, allOf, formats, recursion), and forced tool calls. Every completion must end with
// "stop" within its max_tokens, and then the value parses and validates (tests/util/schema_check.h, apart from
// the grammar), each forced call parses into a call whose arguments validate: the mask allows EOS only after a
// whole value, and, with the draws left as the budget, only tokens after which a whole value and EOS still fit
// (runtime/grammar_distance.h), so random weights that wander inside a string or a number are steered to
// close it in time. Labelled "slow" (about a minute on two cores).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/grammar_cache.h"
#include "runtime/json_schema.h"
#include "server/openai_request.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_parser.h"
#include "util/schema_check.h"
#include "util/tiny_model.h"

using namespace dsv4;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}$"},
        "qty": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["code", "qty"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 6},
        "score": {"type": "number", "minimum": -1, "exclusiveMaximum": 1}}, "required": ["name", "score"],
        "additionalProperties": false})",
    R"({"type": "array", "items": {"oneOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"},
        {"type": "string", "format": "date"}]}, "maxItems": 3})",
    R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}}, "required": ["id"]}},
        "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"id": {"maximum": 500}, "ok": {"type": "boolean"}},
        "required": ["ok"], "additionalProperties": false}]})",
    R"({"type": "object", "properties": {"mail": {"type": "string", "format": "email"},
        "tag": {"enum": ["a", "b"]}}, "required": ["mail", "tag"], "additionalProperties": false})",
    R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer",
        "minimum": -9, "maximum": 9}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"], "additionalProperties": false}}})",
    R"({"type": "string", "pattern": "^(yes|no|maybe)$"})",
};
constexpr int kNumSchemas = sizeof(kSchemas) / sizeof(kSchemas[0]);

const char* kTools = R"([{"type": "function", "function": {"name": "book", "parameters": {"type": "object",
    "properties": {"room": {"type": "string", "pattern": "^R\\d{3}$"}, "nights": {"type": "integer", "minimum": 1,
    "maximum": 14}, "guest": {"type": "string", "maxLength": 8}}, "required": ["room", "nights"]}}},
    {"type": "function", "function": {"name": "cancel", "parameters": {"type": "object", "properties": {
    "id": {"type": "integer", "exclusiveMinimum": 0}}, "required": ["id"], "additionalProperties": false}}}])";

struct Sampling {
    float temperature, top_p;
    int32_t top_k;
};
const Sampling kSampling[] = {{1.0f, 1.0f, 0}, {0.7f, 1.0f, 0}, {1.3f, 0.95f, 0}, {1.0f, 1.0f, 40}, {0.0f, 1.0f, 0}};
constexpr int kNumSampling = sizeof(kSampling) / sizeof(kSampling[0]);

struct Completion {
    std::string text;
    int64_t n_tokens = 0;
    GenerationEnd reason = GenerationEnd::none;
    std::string error;
    int schema = -1;                 // -1: a forced tool call
    server::ChatRequest req;         // tool calls
    std::shared_ptr<const TokenGrammar> grammar;
    GrammarConstraint constraint;
    int64_t max_tokens = 0;
};

TEST(ConstrainedThousand, EveryCompletionEndsValid) {
    auto tiny = test::make_tiny_model("constrained_slow", 23);
    ASSERT_TRUE(tiny.ok()) << tiny.error();
    Model& model = *(*tiny)->model;
    Tokenizer& tok = *(*tiny)->tokenizer;
    GrammarCache cache(tok);
    EngineOptions o;
    o.n_slots = 16;
    o.n_ctx = 1024;
    o.prefix_block = 16;
    o.max_queue = 1000;  // every request is submitted up front
    Engine e(model, tok, o);
    const std::vector<int32_t> prompt = tok.encode("<｜begin▁of▁sentence｜><｜User｜>Answer in JSON.<｜Assistant｜></think>", true);
    server::RequestLimits limits;
    limits.n_vocab = tok.n_vocab();
    const json tools = json::parse(kTools);

    constexpr int kTotal = 1000, kToolCalls = 100;
    std::vector<std::unique_ptr<Completion>> runs;
    for (int k = 0; k < kTotal; ++k) {
        auto run = std::make_unique<Completion>();
        const Sampling& sm = kSampling[k % kNumSampling];
        GenerationRequest r;
        r.sampling.temperature = sm.temperature;
        r.sampling.top_p = sm.top_p;
        r.sampling.top_k = sm.top_k;
        r.sampling.seed = 5000 + static_cast<uint64_t>(k);
        if (k % (kTotal / kToolCalls) == 0) {
            ojson body = ojson::parse(R"({"messages": [{"role": "user", "content": "Call a tool."}]})");
            body["tools"] = ojson::parse(kTools);
            body["tool_choice"] = k % 3 == 0 ? ojson("required") : ojson{{"type", "function"}, {"function", {{"name", "book"}}}};
            auto req = server::parse_chat_request(body, limits);
            ASSERT_TRUE(req.ok()) << req.error().message;
            run->req = std::move(*req);
            auto text = server::render_chat_prompt(run->req);
            ASSERT_TRUE(text.ok());
            auto g = cache.get(run->req.output.key, [&]() -> Result<Grammar> { return *run->req.output.grammar; });
            ASSERT_TRUE(g.ok()) << g.error();
            run->grammar = *g;
            run->constraint = GrammarConstraint{*g, run->req.output.trigger, run->req.output.trigger_required, run->req.output.prefix};
            r.prompt = tok.encode(*text, true);
            r.max_tokens = 96;
        } else {
            run->schema = k % kNumSchemas;
            const int i = run->schema;
            auto g = cache.get("thousand " + std::to_string(i), [i]() { return compile_json_schema(ojson::parse(kSchemas[i])); });
            ASSERT_TRUE(g.ok()) << g.error();
            run->grammar = *g;
            run->constraint = GrammarConstraint{*g};
            r.prompt = prompt;
            r.max_tokens = 48;
        }
        run->max_tokens = r.max_tokens;
        r.constraint = run->constraint;
        Completion* out = run.get();
        ASSERT_TRUE(e.submit(std::move(r), [out](const TokenEvent& ev) {
                         out->text += ev.text;
                         if (ev.token >= 0 && !ev.prompt) ++out->n_tokens;
                         if (ev.finished) {
                             out->reason = ev.reason;
                             out->error = ev.error;
                         }
                     }).ok());
        runs.push_back(std::move(run));
    }
    e.run_until_idle();

    int stopped = 0, cut = 0, calls = 0;
    for (size_t k = 0; k < runs.size(); ++k) {
        const Completion& run = *runs[k];
        EXPECT_LE(run.n_tokens, run.max_tokens) << "completion " << k;
        if (run.reason != GenerationEnd::stop) {
            ++cut;
            ADD_FAILURE() << "completion " << k << " ended with " << generation_end_name(run.reason) << " " << run.error
                          << " after " << run.n_tokens << " tokens: " << run.text;
            continue;
        }
        ++stopped;
        if (run.schema >= 0) {
            const json v = json::parse(run.text, nullptr, false);
            ASSERT_FALSE(v.is_discarded()) << "completion " << k << " is not JSON: " << run.text;
            const json s = json::parse(kSchemas[run.schema]);
            std::string why;
            EXPECT_TRUE(test::schema_validate(v, s, s, why)) << "completion " << k << ": " << why << ": " << run.text;
            continue;
        }
        ++calls;
        const std::string completion = run.req.forced_prefix + run.text + std::string(chat::kEos);
        auto msg = chat::parse_completion(completion, chat::ThinkingMode::chat);
        ASSERT_TRUE(msg.ok()) << msg.error() << "\n" << completion;
        ASSERT_FALSE(msg->tool_calls.empty()) << completion;
        for (const chat::ToolCall& call : msg->tool_calls) {
            const json* schema = nullptr;
            for (const json& t : tools)
                if (t["function"]["name"] == call.name) schema = &t["function"]["parameters"];
            ASSERT_NE(schema, nullptr) << call.name;
            const json args = json::parse(call.arguments, nullptr, false);
            ASSERT_FALSE(args.is_discarded()) << call.arguments;
            std::string why;
            EXPECT_TRUE(test::schema_validate(args, *schema, *schema, why)) << why << ": " << call.arguments;
        }
    }
    std::printf("1000 completions: %d ended with stop (all valid; %d forced tool calls parsed and valid), %d did not\n",
                stopped, calls, cut);
    EXPECT_EQ(stopped, kTotal);
    EXPECT_EQ(calls, kToolCalls);
    EXPECT_EQ(cut, 0);
}

}  // namespace
