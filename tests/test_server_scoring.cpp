// Prompt scoring through /v1/completions (echo + logprobs, max_tokens 0), driven through the route handler
// itself (no socket) with the engine stepping on its own thread, on a random-weight tiny model with the real
// DeepSeek vocabulary. The prompt's logprobs must equal the log-softmax, computed here in double, of the
// logits the `dsv4 logits` path gives for the same ids (StepRunner, every row, one prefill); the streamed
// echo must carry the same numbers; and the request rules for max_tokens 0 and echo are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exec/step_runner.h"
#include "format/gguf.h"
#include "model/synth.h"
#include "runtime/engine.h"
#include "util/served_engine.h"
#include "util/tiny_model.h"
#include "server/event_channel.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace dsv4::server {
namespace {

using ojson = nlohmann::ordered_json;


// How far a reported logprob may be from the log-softmax of the logits path, computed in double: the
// reported value is a float (|logprob| < 32 here, so half an ulp is < 2e-6), its log-sum-exp comes from
// the sampler's float exp polynomial (weights within ~1e-6 relative, runtime/sampler_select.h, so the
// log of their sum within ~1e-6). The engine cuts the prompt into other chunks than the logits path; on the
// CPU a row's logits do not depend on the chunk (measured here: max error 5e-7, the two roundings above).
constexpr double kLogprobTol = 1e-5;

// Log-softmax of one row in double.
std::vector<double> log_softmax(const float* row, size_t n) {
    double mx = -INFINITY;
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(row[i]));
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(row[i]) - lse;
    return out;
}

class ScoringTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto t = test::make_tiny_model("scoring", 11);
        ASSERT_TRUE(t.ok()) << t.error();
        tiny_ = t->release();
        backend_ = tiny_->backend.get();
        model_ = tiny_->model.get();
        tok_ = tiny_->tokenizer.get();
    }
    static void TearDownTestSuite() {
        delete tiny_;
    }

    // An engine with small prompt chunks (so the prompt spans several, cut at prefix-cache blocks) and a
    // thread stepping it, as the server runs it; the routes on top.
    void SetUp() override {
        EngineOptions eo;
        eo.n_slots = 2;
        eo.n_ctx = 256;
        eo.prefill_chunk = 40;
        eo.prefix_block = 32;
        served_ = std::make_unique<test::ServedEngine>(*model_, *tok_, eo);
    }
    void TearDown() override { served_.reset(); }

    // POST /v1/completions through the handler; the body of a non-streaming answer.
    ojson post(const ojson& body, int* status = nullptr) {
        httplib::Request req;
        req.body = body.dump();
        httplib::Response res;
        served_->routes().completions(req, res);
        if (status) *status = res.status;
        auto j = ojson::parse(res.body, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << res.body;
        return j;
    }

    // A streaming request: the data of each server-sent event, in order ([DONE] left out).
    std::vector<ojson> post_stream(const ojson& body) {
        httplib::Request req;
        req.body = body.dump();
        httplib::Response res;
        served_->routes().completions(req, res);
        EXPECT_TRUE(res.content_provider_) << res.body;
        std::string wire;
        bool done = false;
        httplib::DataSink sink;
        sink.write = [&](const char* d, size_t n) {
            wire.append(d, n);
            return true;
        };
        sink.done = [&] { done = true; };
        sink.is_writable = [] { return true; };
        while (!done && res.content_provider_) EXPECT_TRUE(res.content_provider_(0, 0, sink));
        std::vector<ojson> events;
        for (size_t at = 0; (at = wire.find("data: ", at)) != std::string::npos;) {
            const size_t end = wire.find("\n\n", at);
            const std::string data = wire.substr(at + 6, end - at - 6);
            at = end;
            if (data == "[DONE]") continue;
            events.push_back(ojson::parse(data));
        }
        return events;
    }

    // The logits path of `dsv4 logits` (exec/step_runner.h, every row) for `ids`, as [n, n_vocab].
    static std::vector<float> reference_logits(const std::vector<int32_t>& ids) {
        StepRunner runner(*model_);
        StepOptions opt;  // quant_sim on, like the engine's default
        opt.all_logits = true;
        auto cache = model_->new_cache(static_cast<int64_t>(ids.size()) + 1);
        std::vector<float> logits;
        Status s = runner.step(*cache, ids, opt, &logits);
        EXPECT_TRUE(s.ok()) << s.error();
        return logits;
    }

    static std::vector<int32_t> prompt_ids() {
        std::vector<int32_t> ids = tok_->encode(
            "Evaluation harnesses score a text by asking for the log-probability of every token given the ones "
            "before it. The quick brown fox jumps over the lazy dog, 1234567890 times, and then it rests in "
            "the shade of an old oak tree while the sun goes down over the hills. Later that night, under a "
            "sky full of stars, the fox counted them one by one: seventeen, eighteen, nineteen... until sleep "
            "came. In the morning the dog was still lazy, and the harness still wanted every token's score.",
            false);
        return ids;
    }

    static inline test::TinyModel* tiny_ = nullptr;
    static inline Backend* backend_ = nullptr;
    static inline Model* model_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
    std::unique_ptr<test::ServedEngine> served_;
};

// Checks one choice's legacy logprobs for prompt `ids` against the logits path: tokens, null first entry,
// logprobs, top-N alternatives (by text: tokens whose text is not valid UTF-8 share U+FFFD) and offsets.
void expect_prompt_scores(const ojson& lp, const std::vector<int32_t>& ids, const std::vector<float>& logits,
                          size_t top_n, const Tokenizer& tok) {
    const size_t n = ids.size();
    const size_t V = logits.size() / n;
    ASSERT_GE(lp["tokens"].size(), n);
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    int64_t offset = 0;
    double max_err = 0;
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(lp["tokens"][i].get<std::string>(), token_text_lossy(tok, ids[i])) << "token " << i;
        EXPECT_EQ(lp["text_offset"][i].get<int64_t>(), offset) << "token " << i;
        offset += static_cast<int64_t>(tok.token_text(ids[i]).size());
        if (i == 0) continue;
        // Token i is predicted by the row of token i - 1.
        const std::vector<double> ref = log_softmax(logits.data() + (i - 1) * V, V);
        const double got = lp["token_logprobs"][i].get<double>();
        max_err = std::max(max_err, std::abs(got - ref[static_cast<size_t>(ids[i])]));
        EXPECT_NEAR(got, ref[static_cast<size_t>(ids[i])], kLogprobTol) << "token " << i;
        // The reference's top-N by logit (ties by id), grouped by text.
        std::vector<int32_t> order(V);
        for (size_t v = 0; v < V; ++v) order[v] = static_cast<int32_t>(v);
        std::partial_sort(order.begin(), order.begin() + static_cast<long>(top_n), order.end(), [&](int32_t a, int32_t b) {
            return ref[static_cast<size_t>(a)] > ref[static_cast<size_t>(b)] ||
                   (ref[static_cast<size_t>(a)] == ref[static_cast<size_t>(b)] && a < b);
        });
        std::map<std::string, std::vector<double>> want;
        for (size_t k = 0; k < top_n; ++k) want[token_text_lossy(tok, order[k])].push_back(ref[static_cast<size_t>(order[k])]);
        const ojson& top = lp["top_logprobs"][i];
        ASSERT_TRUE(top.is_object()) << "token " << i;
        EXPECT_EQ(top.size(), want.size()) << "token " << i;
        for (const auto& [text, value] : top.items()) {
            auto it = want.find(text);
            ASSERT_NE(it, want.end()) << "token " << i << ": '" << text << "' is not among the top " << top_n;
            const double v = value.get<double>();
            const bool close = std::any_of(it->second.begin(), it->second.end(),
                                           [&](double r) { return std::abs(r - v) <= kLogprobTol; });
            EXPECT_TRUE(close) << "token " << i << ": top logprob of '" << text << "' is " << v;
        }
    }
    ::testing::Test::RecordProperty("max_logprob_error", ::testing::PrintToString(max_err));
}

TEST_F(ScoringTest, EchoedPromptLogprobsEqualTheLogitsPath) {
    const std::vector<int32_t> ids = prompt_ids();
    ASSERT_GT(ids.size(), 90u);  // several engine prompt chunks
    const std::vector<float> logits = reference_logits(ids);
    ojson prompt = ojson::array();
    for (int32_t t : ids) prompt.push_back(t);
    // Twice: the second request finds the prompt's blocks in the prefix cache and must still score them all.
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        int status = 0;
        ojson r = post({{"prompt", prompt}, {"echo", true}, {"logprobs", 5}, {"max_tokens", 0}}, &status);
        ASSERT_EQ(status, 200) << r.dump();
        const ojson& c = r["choices"][0];
        EXPECT_EQ(c["text"].get<std::string>(), tok_->decode(ids));
        EXPECT_EQ(c["finish_reason"], "length");
        EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), ids.size());
        EXPECT_EQ(r["usage"]["completion_tokens"], 0);
        ASSERT_EQ(c["logprobs"]["tokens"].size(), ids.size());
        expect_prompt_scores(c["logprobs"], ids, logits, 5, *tok_);
    }
}

TEST_F(ScoringTest, EchoThenGeneratedTokensContinueTheLogprobs) {
    const std::vector<int32_t> ids = prompt_ids();
    std::string text;
    const std::vector<float> logits = reference_logits(ids);
    ojson prompt = ojson::array();
    for (int32_t t : ids) prompt.push_back(t);
    ojson r = post({{"prompt", prompt}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 3}, {"temperature", 0}});
    const ojson& c = r["choices"][0];
    const ojson& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ids.size() + 3) << r.dump();
    expect_prompt_scores(lp, ids, logits, 2, *tok_);
    // The first generated token is the greedy choice of the last prompt row, with its logprob.
    const size_t V = logits.size() / ids.size();
    const std::vector<double> last = log_softmax(logits.data() + (ids.size() - 1) * V, V);
    const size_t best = static_cast<size_t>(std::max_element(last.begin(), last.end()) - last.begin());
    EXPECT_EQ(lp["tokens"][ids.size()].get<std::string>(), token_text_lossy(*tok_, static_cast<int32_t>(best)));
    EXPECT_NEAR(lp["token_logprobs"][ids.size()].get<double>(), last[best], kLogprobTol);
    // Generated tokens' offsets count from the start of the echoed text.
    const std::string echo = tok_->decode(ids);
    EXPECT_EQ(lp["text_offset"][ids.size()].get<size_t>(), echo.size());
    EXPECT_EQ(c["text"].get<std::string>().substr(0, echo.size()), echo);
    EXPECT_EQ(r["usage"]["completion_tokens"], 3);
}

TEST_F(ScoringTest, StreamedEchoCarriesThePromptLogprobs) {
    const std::vector<int32_t> ids = prompt_ids();
    const std::vector<float> logits = reference_logits(ids);
    ojson prompt = ojson::array();
    for (int32_t t : ids) prompt.push_back(t);
    std::vector<ojson> events =
        post_stream({{"prompt", prompt}, {"echo", true}, {"logprobs", 3}, {"max_tokens", 2}, {"temperature", 0},
                     {"stream", true}});
    ASSERT_GE(events.size(), 2u);
    // The first event is the echo with every prompt token's entry; generated tokens follow in their own.
    const ojson& first = events[0]["choices"][0];
    EXPECT_EQ(first["text"].get<std::string>(), tok_->decode(ids));
    ASSERT_EQ(first["logprobs"]["tokens"].size(), ids.size());
    expect_prompt_scores(first["logprobs"], ids, logits, 3, *tok_);
    size_t generated = 0;
    for (size_t i = 1; i < events.size(); ++i) {
        const ojson& lp = events[i]["choices"][0]["logprobs"];
        if (lp.is_object()) generated += lp["tokens"].size();
    }
    EXPECT_EQ(generated, 2u);
    EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ScoringTest, TextPromptEchoHidesTheAddedBos) {
    ASSERT_TRUE(tok_->add_bos());
    const std::string text = "Once upon a time there was a model.";
    ojson r = post({{"prompt", text}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
    const ojson& c = r["choices"][0];
    EXPECT_EQ(c["text"], text);
    const ojson& lp = c["logprobs"];
    std::vector<int32_t> ids{tok_->bos()};
    tok_->encode(text, true, ids);
    ASSERT_EQ(lp["tokens"].size(), ids.size());
    EXPECT_EQ(lp["tokens"][0].get<std::string>(), token_text_lossy(*tok_, tok_->bos()));
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    // The BOS is not in the text: the first text token starts at offset 0, and each one where its text does.
    int64_t offset = 0;
    for (size_t i = 1; i < ids.size(); ++i) {
        EXPECT_EQ(lp["text_offset"][i].get<int64_t>(), offset) << i;
        offset += static_cast<int64_t>(tok_->token_text(ids[i]).size());
        EXPECT_TRUE(lp["token_logprobs"][i].is_number()) << i;
        EXPECT_TRUE(lp["top_logprobs"][i].is_object() && lp["top_logprobs"][i].empty()) << i;  // logprobs: 0
    }
    EXPECT_EQ(offset, static_cast<int64_t>(text.size()));
}

TEST_F(ScoringTest, MaxTokensZeroWithoutEchoIsEmpty) {
    int status = 0;
    ojson r = post({{"prompt", "Hello there"}, {"max_tokens", 0}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["text"], "");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
    EXPECT_EQ(r["usage"]["completion_tokens"], 0);
    EXPECT_GT(r["usage"]["prompt_tokens"].get<int64_t>(), 0);
    // Echo without logprobs: the prompt text and nothing else.
    r = post({{"prompt", "Hello there"}, {"max_tokens", 0}, {"echo", true}});
    EXPECT_EQ(r["choices"][0]["text"], "Hello there");
    EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
    // The same answer streamed.
    std::vector<ojson> events = post_stream({{"prompt", "Hello there"}, {"max_tokens", 0}, {"stream", true}});
    ASSERT_FALSE(events.empty());
    std::string streamed;
    for (const ojson& e : events) streamed += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(streamed, "");
    EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ScoringTest, ScoringAPromptThatFillsTheContext) {
    // max_tokens 0 may use the whole context (256 tokens here); one token more is refused.
    std::vector<int32_t> ids(256, tok_->encode("a", false)[0]);
    ojson prompt = ojson::array();
    for (int32_t t : ids) prompt.push_back(t);
    int status = 0;
    ojson r = post({{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), ids.size());
    r = post({{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}}, &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(r["error"]["code"], "context_length_exceeded");
    prompt.push_back(ids[0]);
    r = post({{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}}, &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(r["error"]["code"], "context_length_exceeded");
}

TEST_F(ScoringTest, EngineTakesMaxTokensZeroButNotNegative) {
    GenerationRequest g;
    g.prompt = prompt_ids();
    g.max_tokens = -1;
    auto bad = served_->engine().submit(g, [](const TokenEvent&) {});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().find("max_tokens"), std::string::npos) << bad.error();
    // max_tokens 0 without scoring ends at once: one final event, reason length, no tokens.
    g.max_tokens = 0;
    EventChannel ch;
    auto id = served_->engine().submit(g, [&ch](const TokenEvent& ev) { ch.push(ev); });
    ASSERT_TRUE(id.ok()) << id.error();
    std::vector<TokenEvent> events, got;
    while (got.empty() || !got.back().finished)
        if (ch.wait(events, std::chrono::milliseconds(200))) got.insert(got.end(), events.begin(), events.end());
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].reason, GenerationEnd::length);
    EXPECT_EQ(got[0].completion_tokens, 0);
    EXPECT_EQ(got[0].prompt_tokens, static_cast<int64_t>(g.prompt.size()));
}

// ---- request parsing ---------------------------------------------------------------------------------------

RequestLimits limits() {
    RequestLimits l;
    l.n_vocab = 129280;
    return l;
}

TEST(ScoringRequest, CompletionsAcceptMaxTokensZeroAndEcho) {
    auto r = parse_completion_request(ojson::parse(R"({"prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 5})"),
                                      limits());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->gen.max_tokens, 0);
    EXPECT_TRUE(r->echo);
    EXPECT_TRUE(r->gen.logprobs);
    EXPECT_EQ(r->gen.top_logprobs, 5);
    EXPECT_EQ(r->gen.sampling.top_logprobs, 5);
    r = parse_completion_request(ojson::parse(R"({"prompt": [1, 2], "echo": false})"), limits());
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->echo);
    EXPECT_EQ(r->gen.max_tokens, 16);
}

TEST(ScoringRequest, BadValuesNameTheirField) {
    struct Case {
        const char* body;
        const char* param;
    };
    const Case cases[] = {
        {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
        {R"({"prompt": "x", "echo": "yes"})", "echo"},
        {R"({"prompt": "x", "echo": 1})", "echo"},
        {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
        {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
        {R"({"prompt": "x", "logprobs": true})", "logprobs"},
    };
    for (const Case& c : cases) {
        auto r = parse_completion_request(ojson::parse(c.body), limits());
        ASSERT_FALSE(r.ok()) << c.body;
        EXPECT_EQ(r.error().status, 400) << c.body;
        EXPECT_EQ(r.error().param, c.param) << c.body;
    }
    // Chat completions still need at least one token.
    auto chat = parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})"),
                                   limits());
    ASSERT_FALSE(chat.ok());
    EXPECT_EQ(chat.error().param, "max_tokens");
}

TEST(ScoringRequest, ContextFitForScoredPrompts) {
    auto f = fit_context(100, 0, 100, "prompt");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(*f, 0);
    EXPECT_FALSE(fit_context(101, 0, 100, "prompt").ok());
    EXPECT_FALSE(fit_context(100, 1, 100, "prompt").ok());
    EXPECT_FALSE(fit_context(100, -1, 100, "prompt").ok());  // no room left to generate
    auto g = fit_context(99, -1, 100, "prompt");
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g, 1);
}

}  // namespace
}  // namespace dsv4::server
