// The backend token draw (Backend::sample on the CPU oracle, runtime/device_draw.h, the engine's backend draw
// path): its distribution is the host Sampler's (checked exactly against sampling_distribution with a grid of
// uniforms, so the test is deterministic), its adjustments are the host's bias and penalties bit for bit, its
// logprobs the host's, its errors the host's; and an engine that draws on the backend generates what the host
// draw generates where both are determined (greedy) and is seeded-deterministic where they are not.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "kernels/cpu/cpu_backend.h"
#include "runtime/device_draw.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "util/tiny_model.h"

namespace dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t V, uint64_t seed, float scale, int distinct = 0) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.0f, scale);
    std::vector<float> l(V);
    for (float& x : l) {
        x = n(g);
        if (distinct > 0) x = std::round(x * (float)distinct / scale) * scale / (float)distinct;
    }
    return l;
}

// The backend's draw of one row with uniform u.
SampleOut draw(Backend& b, const std::vector<float>& logits, const DrawRequest& req, double u) {
    SampleArgs a = req.args;
    a.u = u;
    a.row = 0;
    a.adjust_begin = 0;
    a.adjust_count = (int32_t)req.adjust.size();
    SampleOut out;
    b.sample(&out, logits.data(), (int64_t)logits.size(), &a, 1, req.adjust.data());
    return out;
}

DrawRequest request_for(const SamplingParams& p, std::span<const int32_t> history, int64_t V) {
    Sampler s(p);
    auto r = make_draw_request(s, history, V);
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? *r : DrawRequest{};
}

class BackendDraw : public ::testing::Test {
protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
};

// A grid of N uniforms hits every token of probability p between floor(N p) and ceil(N p) times (the draw
// maps u to cumulative intervals), so the frequencies equal the exact distribution to 1/N plus the weights'
// float and 2^-40 rounding.
TEST_F(BackendDraw, DistributionIsTheSamplers) {
    struct P {
        float t, top_p, min_p;
        int32_t top_k;
    };
    const P params[] = {{1.0f, 1.0f, 0.0f, 0},  {0.6f, 0.95f, 0.0f, 0}, {0.8f, 1.0f, 0.0f, 40},
                        {1.0f, 0.9f, 0.0f, 50}, {0.7f, 1.0f, 0.05f, 0}, {1.3f, 0.5f, 0.02f, 7},
                        {2.0f, 0.99f, 0.0f, 0}};
    const int N = 2000;
    int idx = 0;
    for (const P& pp : params) {
        for (int distinct : {0, 3}) {
            SCOPED_TRACE("params " + std::to_string(idx) + " distinct " + std::to_string(distinct));
            const std::vector<float> l = random_logits(1000, 11 + idx, 2.0f, distinct);
            SamplingParams p;
            p.temperature = pp.t;
            p.top_p = pp.top_p;
            p.min_p = pp.min_p;
            p.top_k = pp.top_k;
            auto dist = sampling_distribution(l, p);
            ASSERT_TRUE(dist.ok()) << dist.error();
            std::map<int32_t, double> want;
            for (const TokenProb& tp : *dist) want[tp.token] = tp.prob;
            const DrawRequest req = request_for(p, {}, (int64_t)l.size());
            std::map<int32_t, int> hits;
            for (int j = 0; j < N; ++j) {
                const SampleOut o = draw(*cpu_, l, req, (j + 0.5) / N);
                ASSERT_EQ(o.status, kSampleOk);
                ASSERT_TRUE(want.count(o.token)) << "token " << o.token << " is outside the kept set";
                ++hits[o.token];
            }
            for (const auto& [tok, prob] : want)
                EXPECT_NEAR((double)hits[tok] / N, prob, 1.0 / N + 2e-6) << "token " << tok;
        }
        ++idx;
    }
}

TEST_F(BackendDraw, GreedyIsTheFirstMaximum) {
    std::vector<float> l = random_logits(500, 3, 1.0f);
    l[100] = l[300] = 50.0f;
    SamplingParams p;
    p.temperature = 0;
    const SampleOut o = draw(*cpu_, l, request_for(p, {}, 500), 0.7);
    EXPECT_EQ(o.token, 100);
}

// Bias and penalties as adjustments give the logits apply_bias_and_penalties gives: the same token for every
// uniform as a draw without adjustments from the host-adjusted row.
TEST_F(BackendDraw, AdjustmentsAreTheHostsBiasAndPenalties) {
    const std::vector<float> l = random_logits(2000, 5, 3.0f);
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = 0.9f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.logit_bias = {{7, 3.0f}, {19, -2.5f}, {1500, kNegInf}, {42, 1.0f}};
    const std::vector<int32_t> history = {42, 42, 5, 19, 1999, 5, 5, 0};
    std::vector<float> adjusted = l;
    ASSERT_TRUE(apply_bias_and_penalties(adjusted, history, p).ok());
    SamplingParams plain = p;
    plain.repetition_penalty = 1.0f;
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    plain.logit_bias.clear();
    const DrawRequest with = request_for(p, history, 2000), without = request_for(plain, {}, 2000);
    ASSERT_EQ(with.adjust.size(), 7u);  // distinct tokens of bias and history
    for (int j = 0; j < 500; ++j) {
        const double u = (j + 0.25) / 500;
        const SampleOut a = draw(*cpu_, l, with, u), b = draw(*cpu_, adjusted, without, u);
        ASSERT_EQ(a.token, b.token) << "u " << u;
        ASSERT_NE(a.token, 1500);
    }
}

TEST_F(BackendDraw, LogprobsAreTheHosts) {
    const std::vector<float> l = random_logits(4000, 9, 2.5f, 4);  // ties among the alternatives
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_logprobs = 20;
    const SampleOut o = draw(*cpu_, l, request_for(p, {}, 4000), 0.3);
    ASSERT_EQ(o.status, kSampleOk);
    auto want = score_token(l, o.token, 20);
    ASSERT_TRUE(want.ok());
    EXPECT_NEAR(o.logprob, want->logprob, 1e-5);
    ASSERT_EQ(o.n_top, 20);
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(o.top_ids[i], want->top_logprobs[(size_t)i].token) << i;
        EXPECT_NEAR(o.top_logprobs[i], want->top_logprobs[(size_t)i].logprob, 1e-5) << i;
    }
}

TEST_F(BackendDraw, ErrorsAreTheHosts) {
    std::vector<float> l = random_logits(100, 1, 1.0f);
    SamplingParams p;
    p.temperature = 1.0f;
    l[37] = std::nanf("");
    SampleOut o = draw(*cpu_, l, request_for(p, {}, 100), 0.5);
    EXPECT_EQ(o.status, kSampleBadLogit);
    EXPECT_EQ(o.bad_token, 37);
    auto r = draw_result(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("token 37"), std::string::npos) << r.error();

    l = random_logits(3, 1, 1.0f);
    p.logit_bias = {{0, kNegInf}, {1, kNegInf}, {2, kNegInf}};
    o = draw(*cpu_, l, request_for(p, {}, 3), 0.5);
    EXPECT_EQ(o.status, kSampleAllBanned);
    EXPECT_FALSE(draw_result(o).ok());

    p.logit_bias = {{3, 1.0f}};
    Sampler s(p);
    auto req = make_draw_request(s, {}, 3);
    ASSERT_FALSE(req.ok());
    EXPECT_NE(req.error().find("logit_bias token 3"), std::string::npos) << req.error();
}

// The engine's backend draw on the tiny model (CPU backend, DrawPlace::backend): greedy generation and its
// logprobs equal the host draw's; a seeded sampled generation repeats itself and differs across seeds.
class EngineBackendDraw : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto t = test::make_tiny_model("backend_draw_test", 3);
        ASSERT_TRUE(t.ok()) << t.error();
        tiny_ = t->release();
    }
    static void TearDownTestSuite() { delete tiny_; }

    struct Run {
        std::vector<int32_t> tokens;
        std::vector<float> logprobs;
        std::vector<std::vector<TokenLogprob>> top;
    };
    static Run generate(DrawPlace place, const SamplingParams& p, int n) {
        EngineOptions o;
        o.n_slots = 2;
        o.n_ctx = 256;
        o.draw = place;
        Engine e(*tiny_->model, *tiny_->tokenizer, o);
        GenerationRequest r;
        r.prompt = tiny_->tokenizer->encode("The quick brown fox", false);
        r.max_tokens = n;
        r.ignore_eos = true;
        r.sampling = p;
        r.logprobs = true;
        r.top_logprobs = p.top_logprobs;
        Run run;
        auto id = e.submit(r, [&](const TokenEvent& ev) {
            if (ev.token < 0) return;
            run.tokens.push_back(ev.token);
            run.logprobs.push_back(ev.logprob);
            run.top.push_back(ev.top);
        });
        EXPECT_TRUE(id.ok());
        e.run_until_idle();
        return run;
    }
    static test::TinyModel* tiny_;
};
test::TinyModel* EngineBackendDraw::tiny_ = nullptr;

TEST_F(EngineBackendDraw, GreedyEqualsTheHostDraw) {
    SamplingParams p;
    p.temperature = 0;
    p.top_logprobs = 3;
    const Run host = generate(DrawPlace::host, p, 12), dev = generate(DrawPlace::backend, p, 12);
    ASSERT_EQ(host.tokens.size(), 12u);
    EXPECT_EQ(dev.tokens, host.tokens);
    for (size_t i = 0; i < host.tokens.size(); ++i) {
        EXPECT_NEAR(dev.logprobs[i], host.logprobs[i], 1e-5) << i;
        ASSERT_EQ(dev.top[i].size(), 3u);
        for (size_t j = 0; j < 3; ++j) EXPECT_EQ(dev.top[i][j].token, host.top[i][j].token) << i << " " << j;
    }
}

TEST_F(EngineBackendDraw, SeededSamplingRepeats) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.repetition_penalty = 1.1f;
    p.seed = 1234;
    const Run a = generate(DrawPlace::backend, p, 10), b = generate(DrawPlace::backend, p, 10);
    ASSERT_EQ(a.tokens.size(), 10u);
    EXPECT_EQ(a.tokens, b.tokens);
    p.seed = 99;
    const Run c = generate(DrawPlace::backend, p, 10);
    EXPECT_NE(a.tokens, c.tokens);
}

}  // namespace
}  // namespace dsv4
