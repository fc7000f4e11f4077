// The generation engine on a synthetic tiny model with the real DeepSeek vocabulary: greedy output is the
// same with and without the prefix cache (also for multi-turn conversations that extend an earlier turn),
// requests batched together give the same output as alone, cancel and limits behave, and prompt scores are
// the same alone and batched.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "format/gguf.h"
#include "model/synth.h"
#include "runtime/engine.h"
#include "util/sanitizer.h"
#include "util/tiny_model.h"

using namespace dsv4;

namespace {


// One tiny model for the whole suite, written once into the temp folder.
class EngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto t = test::make_tiny_model("engine_test", 7);
        ASSERT_TRUE(t.ok()) << t.error();
        tiny_ = t->release();
        backend_ = tiny_->backend.get();
        model_ = tiny_->model.get();
        tok_ = tiny_->tokenizer.get();
    }
    static void TearDownTestSuite() {
        delete tiny_;
    }

    struct Out {
        std::vector<int32_t> tokens;
        std::string text;
        TokenEvent last;
    };
    static GenerationRequest greedy(std::vector<int32_t> prompt, int64_t n) {
        GenerationRequest r;
        r.prompt = std::move(prompt);
        r.max_tokens = n;
        r.sampling.temperature = 0;
        r.ignore_eos = true;
        return r;
    }
    static uint64_t submit(Engine& e, GenerationRequest r, Out& out) {
        auto id = e.submit(std::move(r), [&out](const TokenEvent& ev) {
            if (ev.token >= 0) out.tokens.push_back(ev.token);
            out.text += ev.text;
            if (ev.finished) out.last = ev;
        });
        EXPECT_TRUE(id.ok()) << id.error();
        return id.ok() ? *id : 0;
    }
    static Out generate(Engine& e, GenerationRequest r) {
        Out o;
        submit(e, std::move(r), o);
        e.run_until_idle();
        return o;
    }
    static EngineOptions options(bool prefix) {
        EngineOptions o;
        o.n_slots = 4;
        o.n_ctx = 512;
        o.prefill_chunk = 48;
        o.prefix_cache = prefix;
        o.prefix_block = 16;
        return o;
    }

    // Greedy runs of n tokens for every prompt: one at a time on an engine of options(false), then all submitted
    // at once to an engine of `together_options`, with that engine's finished count.
    struct Runs {
        std::vector<Out> solo, together;
        uint64_t finished = 0;
    };
    // Every prompt run alone (or every solo_stride-th: the others' solo runs are left empty), then all
    // together in one engine.
    static Runs solo_and_together(const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                                  const EngineOptions& together_options, size_t solo_stride = 1) {
        Runs r;
        {
            Engine e(*model_, *tok_, options(false));
            r.solo.resize(prompts.size());
            for (size_t i = 0; i < prompts.size(); i += solo_stride) r.solo[i] = generate(e, greedy(prompts[i], n));
        }
        Engine e(*model_, *tok_, together_options);
        r.together.resize(prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) submit(e, greedy(prompts[i], n), r.together[i]);
        e.run_until_idle();
        r.finished = e.stats().requests_finished;
        return r;
    }

    static inline test::TinyModel* tiny_ = nullptr;
    static inline Backend* backend_ = nullptr;
    static inline Model* model_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
};

TEST_F(EngineTest, PrefixCacheGivesIdenticalOutputAcrossTurns) {
    Engine plain(*model_, *tok_, options(false));
    Engine cached(*model_, *tok_, options(true));
    std::vector<int32_t> turn = tok_->encode("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Plan a trip to Paris in three steps, and explain each.<｜Assistant｜>", true);
    // Three turns: each prompt is the previous prompt + its answer + a new user message.
    for (int t = 0; t < 3; ++t) {
        Out a = generate(plain, greedy(turn, 12));
        Out b = generate(cached, greedy(turn, 12));
        ASSERT_EQ(a.tokens, b.tokens) << "turn " << t;
        EXPECT_EQ(a.text, b.text);
        EXPECT_EQ(a.last.reason, GenerationEnd::length);
        if (t > 0) {
            EXPECT_GT(b.last.cached_tokens, 0) << "turn " << t << " should reuse the earlier turn";
        }
        EXPECT_EQ(a.last.cached_tokens, 0);
        turn.insert(turn.end(), a.tokens.begin(), a.tokens.end());
        auto more = tok_->encode("<｜User｜>And then what about step " + std::to_string(t + 2) + "?<｜Assistant｜>", true);
        turn.insert(turn.end(), more.begin(), more.end());
    }
    EXPECT_GT(cached.stats().prefix_cache_hits, 0u);
}

TEST_F(EngineTest, BatchedRequestsMatchSoloRuns) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 6; ++i)
        prompts.push_back(tok_->encode("Request number " + std::to_string(i) + std::string(i * 7, 'x') + " says hello", false));
    const Runs r = solo_and_together(prompts, 10, options(false));
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(r.solo[i].tokens, r.together[i].tokens) << "request " << i;
        EXPECT_EQ(r.together[i].last.completion_tokens, 10);
        EXPECT_TRUE(r.together[i].last.finished);
    }
    EXPECT_EQ(r.finished, prompts.size());
}

TEST_F(EngineTest, SixtyFourConcurrentRequestsMatchSoloRuns) {
    // 64 slots decoding together (the decode group of the batched step: one attention call, compressor and
    // indexer update for all of them), prompts of different lengths so the sequences sit at different depths
    // and complete their compression blocks at different steps: every greedy output equals its solo run.
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 64; ++i)
        prompts.push_back(tok_->encode("Stream " + std::to_string(i) + std::string(i % 13 * 3, 'y') + " begins", false));
    EngineOptions o = options(false);
    o.n_slots = 64;
    o.step_token_budget = 64 + 48;
    // Under a sanitizer the 64 run together as always, and every fourth alone (tests/util/sanitizer.h).
    const size_t stride = test::every(4);
    const Runs r = solo_and_together(prompts, 12, o, stride);
    for (size_t i = 0; i < prompts.size(); ++i) {
        if (i % stride == 0) {
            EXPECT_EQ(r.solo[i].tokens, r.together[i].tokens) << "request " << i;
        }
        EXPECT_EQ(r.together[i].last.completion_tokens, 12);
    }
    EXPECT_EQ(r.finished, prompts.size());
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
    Engine e(*model_, *tok_, options(true));
    auto req = [&](uint64_t seed) {
        GenerationRequest r = greedy(tok_->encode("Once upon a time", false), 16);
        r.sampling.temperature = 1.0f;
        r.sampling.seed = seed;
        return r;
    };
    Out a = generate(e, req(123)), b = generate(e, req(123)), c = generate(e, req(124));
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_NE(a.tokens, c.tokens);
}

TEST_F(EngineTest, CancelAndLimits) {
    EngineOptions o = options(false);
    o.max_queue = 2;
    o.n_slots = 1;
    Engine e(*model_, *tok_, o);
    Out a, b;
    const uint64_t ida = submit(e, greedy(tok_->encode("first", false), 200), a);
    submit(e, greedy(tok_->encode("second", false), 5), b);
    // Queue holds 2: a third is rejected.
    auto r = e.submit(greedy(tok_->encode("third", false), 5), [](const TokenEvent&) {});
    EXPECT_FALSE(r.ok());
    for (int i = 0; i < 5; ++i) e.step();
    e.cancel(ida);
    e.run_until_idle();
    EXPECT_EQ(a.last.reason, GenerationEnd::cancelled);
    EXPECT_LT(a.tokens.size(), 200u);
    EXPECT_EQ(b.last.reason, GenerationEnd::length);
    EXPECT_EQ(b.tokens.size(), 5u);
    // Prompt + max_tokens beyond the context: rejected with a message naming the sizes.
    auto big = e.submit(greedy(std::vector<int32_t>(500, 100), 100), [](const TokenEvent&) {});
    ASSERT_FALSE(big.ok());
    EXPECT_NE(big.error().find("context"), std::string::npos);
    auto bad = e.submit(greedy(std::vector<int32_t>{-5}, 1), [](const TokenEvent&) {});
    EXPECT_FALSE(bad.ok());
}

TEST_F(EngineTest, StopStringsEndGeneration) {
    Engine e(*model_, *tok_, options(false));
    Out a = generate(e, greedy(tok_->encode("Count with me", false), 12));
    ASSERT_GE(a.text.size(), 4u);
    // Use a piece of the text the model produces greedily as a stop string: output must end before it.
    const std::string stop = a.text.substr(a.text.size() / 2, 3);
    GenerationRequest r = greedy(tok_->encode("Count with me", false), 12);
    r.stop = {stop};
    Out b = generate(e, std::move(r));
    EXPECT_EQ(b.last.reason, GenerationEnd::stop);
    EXPECT_EQ(b.text.find(stop), std::string::npos);
    EXPECT_EQ(a.text.substr(0, b.text.size()), b.text);
}

TEST_F(EngineTest, PromptScoresAreTheSameAloneAndBatched) {
    // A request that scores its prompt gets one event per prompt token after the first, in order, before its
    // generated tokens; the scores do not depend on the chunking, the prefix cache or the requests it is
    // batched with, and its generated tokens are those of the same request without scoring.
    const std::vector<int32_t> prompt =
        tok_->encode("Scoring a prompt takes the logits of every row of its prefill, chunk after chunk, and "
                     "reports each token's logprob from the row of the token before it. The first token has "
                     "no row before it, so it gets no score, and the last row predicts the first generated one.",
                     false);
    ASSERT_GT(prompt.size(), 40u);  // several chunks of 48 cut at blocks of 16
    struct Scored {
        std::vector<int32_t> prompt_tokens, generated;
        std::vector<float> logprobs;
        std::vector<std::vector<TokenLogprob>> top;
        bool generated_before_prompt_done = false;
        TokenEvent last;
    };
    auto request = [&](int64_t max_tokens) {
        GenerationRequest r = greedy(prompt, max_tokens);
        r.prompt_logprobs = true;
        r.sampling.top_logprobs = 3;
        return r;
    };
    auto submit_scored = [&](Engine& e, GenerationRequest r, Scored& out) {
        auto id = e.submit(std::move(r), [&out, n = prompt.size()](const TokenEvent& ev) {
            if (ev.prompt) {
                out.prompt_tokens.push_back(ev.token);
                out.logprobs.push_back(ev.logprob);
                out.top.push_back(ev.top);
            } else if (ev.token >= 0) {
                if (out.prompt_tokens.size() + 1 != n) out.generated_before_prompt_done = true;
                out.generated.push_back(ev.token);
            }
            if (ev.finished) out.last = ev;
        });
        ASSERT_TRUE(id.ok()) << id.error();
    };
    Scored alone;
    {
        Engine e(*model_, *tok_, options(false));
        submit_scored(e, request(4), alone);
        e.run_until_idle();
    }
    ASSERT_EQ(alone.prompt_tokens, std::vector<int32_t>(prompt.begin() + 1, prompt.end()));
    EXPECT_FALSE(alone.generated_before_prompt_done);
    EXPECT_EQ(alone.last.reason, GenerationEnd::length);
    for (size_t i = 0; i < alone.top.size(); ++i) {
        ASSERT_EQ(alone.top[i].size(), 3u);
        EXPECT_LE(alone.logprobs[i], alone.top[i][0].logprob) << i;  // the best alternative is at least as likely
        EXPECT_LE(alone.top[i][0].logprob, 0.0f);
    }
    Out plain;
    {
        Engine e(*model_, *tok_, options(false));
        plain = generate(e, greedy(prompt, 4));
    }
    EXPECT_EQ(alone.generated, plain.tokens);

    // Batched with two plain requests, with the prefix cache on and already holding the prompt's blocks.
    Engine e(*model_, *tok_, options(true));
    generate(e, greedy(prompt, 2));
    Scored batched, only;
    Out other1, other2;
    submit(e, greedy(tok_->encode("Another request decodes meanwhile", false), 8), other1);
    submit_scored(e, request(4), batched);
    submit(e, greedy(prompt, 3), other2);
    submit_scored(e, request(0), only);  // max_tokens 0: scores only
    e.run_until_idle();
    EXPECT_EQ(batched.prompt_tokens, alone.prompt_tokens);
    EXPECT_EQ(batched.generated, alone.generated);
    EXPECT_EQ(batched.last.cached_tokens, 0);  // scored prompts are computed, not restored
    EXPECT_GT(other2.last.cached_tokens, 0);
    EXPECT_EQ(only.prompt_tokens, alone.prompt_tokens);
    EXPECT_TRUE(only.generated.empty());
    EXPECT_EQ(only.last.reason, GenerationEnd::length);
    EXPECT_EQ(only.last.completion_tokens, 0);
    // The CPU computes each row the same whatever else is in the step; 1e-5 leaves room for the sampler's
    // float exp (runtime/sampler_select.h) and nothing more.
    for (size_t i = 0; i < alone.logprobs.size(); ++i) {
        EXPECT_NEAR(batched.logprobs[i], alone.logprobs[i], 1e-5) << i;
        EXPECT_NEAR(only.logprobs[i], alone.logprobs[i], 1e-5) << i;
        for (size_t k = 0; k < 3; ++k) EXPECT_EQ(batched.top[i][k].token, alone.top[i][k].token) << i;
    }
}

}  // namespace
