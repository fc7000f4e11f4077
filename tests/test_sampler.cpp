// Tests for the sampler and StopChecker on synthetic logits: greedy, top-k / top-p / min-p against their
// definitions (a brute-force nucleus for large vocabularies), penalty and bias arithmetic by the OpenAI /
// llama.cpp formulas, seeds, logprobs, a chi-square check of temperature sampling against the softmax, and
// stop strings across token boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/sampler.h"

namespace {

using dsv4::FinishReason;
using dsv4::Sampler;
using dsv4::SamplingParams;
using dsv4::StopChecker;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);  // only test inputs; the sampler never uses <random> dists
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
}

// Logits whose softmax is `probs`, placed at token ids given by `ids`.
std::vector<float> logits_for(const std::vector<double>& probs, const std::vector<int32_t>& ids, size_t n_vocab) {
    std::vector<float> v(n_vocab, kNegInf);
    for (size_t i = 0; i < probs.size(); ++i) v[static_cast<size_t>(ids[i])] = static_cast<float>(std::log(probs[i]));
    return v;
}

std::set<int32_t> kept_tokens(const std::vector<float>& logits, const SamplingParams& p) {
    auto d = dsv4::sampling_distribution(logits, p);
    EXPECT_TRUE(d.ok()) << d.error();
    std::set<int32_t> s;
    if (d.ok())
        for (const auto& tp : *d) s.insert(tp.token);
    return s;
}

int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Sampler, ValidatesParams) {
    auto bad = [](auto mutate) {
        SamplingParams p;
        mutate(p);
        return !dsv4::validate_sampling_params(p).ok();
    };
    EXPECT_FALSE(bad([](SamplingParams&) {}));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -0.1f; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0.0f; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5f; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = 2.0f; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -1; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }));
    EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias[3] = std::nanf(""); }));
    EXPECT_FALSE(bad([](SamplingParams& p) { p.logit_bias[3] = kNegInf; }));
}

TEST(Sampler, GreedyPicksArgmaxAndLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0.0f;
    for (uint64_t s = 0; s < 50; ++s) {
        auto logits = random_logits(1000, s);
        Sampler sampler(p);
        auto r = sampler.sample(logits, {});
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(r->token, argmax(logits));
    }
    std::vector<float> tie = {0.0f, 2.0f, 1.0f, 2.0f};
    Sampler sampler(p);
    EXPECT_EQ(sampler.sample(tie, {})->token, 1);
}

TEST(Sampler, TopK1IsGreedyAtAnyTemperature) {
    for (float t : {0.3f, 1.0f, 2.5f}) {
        SamplingParams p;
        p.temperature = t;
        p.top_k = 1;
        p.seed = 99;
        Sampler sampler(p);
        for (uint64_t s = 0; s < 50; ++s) {
            auto logits = random_logits(500, 1000 + s);
            auto r = sampler.sample(logits, {});
            ASSERT_TRUE(r.ok());
            EXPECT_EQ(r->token, argmax(logits));
        }
    }
}

TEST(Sampler, TopPKeepsTheSmallestSet) {
    // Probabilities 0.5, 0.2, 0.15, 0.1, 0.05 on shuffled ids, so that id order is not probability order.
    const std::vector<double> probs = {0.5, 0.2, 0.15, 0.1, 0.05};
    const std::vector<int32_t> ids = {7, 2, 9, 0, 4};
    auto logits = logits_for(probs, ids, 10);
    SamplingParams p;
    auto with_top_p = [&](float top_p) {
        p.top_p = top_p;
        return kept_tokens(logits, p);
    };
    EXPECT_EQ(with_top_p(0.45f), (std::set<int32_t>{7}));
    EXPECT_EQ(with_top_p(0.6f), (std::set<int32_t>{7, 2}));
    EXPECT_EQ(with_top_p(0.8f), (std::set<int32_t>{7, 2, 9}));
    EXPECT_EQ(with_top_p(0.9f), (std::set<int32_t>{7, 2, 9, 0}));
    EXPECT_EQ(with_top_p(1.0f), (std::set<int32_t>{7, 2, 9, 0, 4}));
    // Kept probabilities are renormalised.
    p.top_p = 0.6f;
    auto d = dsv4::sampling_distribution(logits, p);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->size(), 2u);
    EXPECT_EQ((*d)[0].token, 7);
    EXPECT_NEAR((*d)[0].prob, 0.5 / 0.7, 1e-6);
    EXPECT_NEAR((*d)[1].prob, 0.2 / 0.7, 1e-6);
}

TEST(Sampler, TopPMatchesBruteForceNucleusOnLargeVocab) {
    // Flat logits so that the nucleus spans hundreds of tokens (past the probe of the 64 most likely).
    for (uint64_t s = 0; s < 6; ++s) {
        auto logits = random_logits(20000, 500 + s, 1.0f);
        SamplingParams p;
        p.temperature = 0.9f;
        p.top_p = 0.3f + 0.1f * static_cast<float>(s);
        std::vector<int32_t> order(logits.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        double total = 0.0;
        for (float l : logits) total += std::exp((l - logits[order[0]]) / 0.9);
        std::set<int32_t> want;
        double cum = 0.0;
        for (int32_t id : order) {
            want.insert(id);
            cum += std::exp((logits[id] - logits[order[0]]) / 0.9) / total;
            if (cum >= p.top_p) break;
        }
        EXPECT_GT(want.size(), 100u);
        EXPECT_EQ(kept_tokens(logits, p), want) << "top_p " << p.top_p;
    }
}

TEST(Sampler, TopPAppliesToTheTopKRenormalisedDistribution) {
    // After top_k=3 the probabilities are 4/9, 3/9, 2/9: top_p 0.75 needs two tokens (7/9). Applied to the
    // unrenormalised 0.4, 0.3 (= 0.7 < 0.75) it would take three.
    auto logits = logits_for({0.4, 0.3, 0.2, 0.1}, {0, 1, 2, 3}, 4);
    SamplingParams p;
    p.top_k = 3;
    p.top_p = 0.75f;
    EXPECT_EQ(kept_tokens(logits, p), (std::set<int32_t>{0, 1}));
    p.top_p = 1.0f;
    EXPECT_EQ(kept_tokens(logits, p), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheMax) {
    auto logits = logits_for({0.5, 0.2, 0.15, 0.1, 0.05}, {0, 1, 2, 3, 4}, 5);
    SamplingParams p;
    p.min_p = 0.25f;  // p >= 0.125
    EXPECT_EQ(kept_tokens(logits, p), (std::set<int32_t>{0, 1, 2}));
    p.min_p = 0.5f;  // p >= 0.25
    EXPECT_EQ(kept_tokens(logits, p), (std::set<int32_t>{0}));
    p.min_p = 0.0f;
    EXPECT_EQ(kept_tokens(logits, p).size(), 5u);
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
    std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
    for (float t : {0.5f, 1.0f, 2.0f}) {
        SamplingParams p;
        p.temperature = t;
        auto d = dsv4::sampling_distribution(logits, p);
        ASSERT_TRUE(d.ok());
        auto w = [&](float l) { return std::exp(static_cast<double>(l) / static_cast<double>(t)); };
        double z = 0.0;
        for (float l : logits) z += w(l);
        for (const auto& tp : *d) EXPECT_NEAR(tp.prob, w(logits[tp.token]) / z, 1e-9);
    }
}

TEST(Sampler, PenaltiesFollowTheOpenAIAndLlamaCppDefinitions) {
    std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    const std::vector<int32_t> history = {0, 0, 1, 3, 3, 3};
    SamplingParams p;
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    ASSERT_TRUE(dsv4::apply_bias_and_penalties(logits, history, p).ok());
    // repetition: positive logits divided, negative multiplied, once per token; then
    // logit -= count * frequency + presence.
    EXPECT_NEAR(logits[0], 2.0f / 1.5f - (2 * 0.2f + 0.3f), 1e-6);
    EXPECT_NEAR(logits[1], -1.0f * 1.5f - (1 * 0.2f + 0.3f), 1e-6);
    EXPECT_EQ(logits[2], 0.5f);
    EXPECT_NEAR(logits[3], 3.0f / 1.5f - (3 * 0.2f + 0.3f), 1e-6);
    EXPECT_EQ(logits[4], -2.0f);

    std::vector<float> v = {1.0f, 2.0f};
    SamplingParams bad;
    EXPECT_FALSE(dsv4::apply_bias_and_penalties(v, std::vector<int32_t>{5}, [] {
                     SamplingParams q;
                     q.presence_penalty = 1.0f;
                     return q;
                 }()).ok());
    bad.logit_bias[2] = 1.0f;
    EXPECT_FALSE(dsv4::apply_bias_and_penalties(v, {}, bad).ok());
}

TEST(Sampler, LogitBiasShiftsAndBans) {
    std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    SamplingParams p;
    p.logit_bias = {{2, 5.0f}, {3, kNegInf}};
    std::vector<float> v = logits;
    ASSERT_TRUE(dsv4::apply_bias_and_penalties(v, {}, p).ok());
    EXPECT_EQ(v[2], 5.5f);
    EXPECT_EQ(v[3], kNegInf);
    p.temperature = 0.0f;
    EXPECT_EQ(Sampler(p).sample(logits, {})->token, 2);
    // A banned token is never drawn, however likely it was.
    p.temperature = 1.0f;
    p.logit_bias = {{3, kNegInf}};
    p.seed = 3;
    Sampler s(p);
    for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(logits, {})->token, 3);
    // Banning everything is an error, not a silent pick.
    SamplingParams all;
    for (int32_t t = 0; t < 5; ++t) all.logit_bias[t] = kNegInf;
    EXPECT_FALSE(Sampler(all).sample(logits, {}).ok());
    all.temperature = 0.0f;
    EXPECT_FALSE(Sampler(all).sample(logits, {}).ok());
}

TEST(Sampler, RejectsBadLogits) {
    Sampler s(SamplingParams{});
    std::vector<float> nan = {0.0f, std::nanf("")};
    EXPECT_FALSE(s.sample(nan, {}).ok());
    EXPECT_FALSE(s.sample(std::vector<float>{}, {}).ok());
}

TEST(Sampler, SeedsAreReproducible) {
    auto logits = random_logits(300, 42, 1.0f);
    auto run = [&](uint64_t seed) {
        SamplingParams p;
        p.seed = seed;
        p.top_p = 0.95f;
        Sampler s(p);
        std::vector<int32_t> seq;
        for (int i = 0; i < 200; ++i) seq.push_back(s.sample(logits, {})->token);
        return seq;
    };
    EXPECT_EQ(run(1), run(1));
    EXPECT_NE(run(1), run(2));
    const std::vector<int32_t> seq = run(1);
    EXPECT_GT(std::set<int32_t>(seq.begin(), seq.end()).size(), 20u);  // it does sample, not just argmax
}

TEST(Sampler, LogprobsAreTheModelsLogSoftmax) {
    auto logits = random_logits(1000, 7);
    SamplingParams p;
    p.top_logprobs = 5;
    p.logit_bias = {{3, 10.0f}};  // bias changes the draw, not the reported logprobs
    p.seed = 11;
    Sampler s(p);
    auto r = s.sample(logits, {});
    ASSERT_TRUE(r.ok());
    double mx = *std::max_element(logits.begin(), logits.end()), z = 0.0;
    for (float l : logits) z += std::exp(l - mx);
    auto lp = [&](int32_t t) { return logits[t] - mx - std::log(z); };
    EXPECT_NEAR(r->logprob, lp(r->token), 1e-5);
    ASSERT_EQ(r->top_logprobs.size(), 5u);
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(r->top_logprobs[i].token, order[i]);
        EXPECT_NEAR(r->top_logprobs[i].logprob, lp(order[i]), 1e-5);
    }
}

// Pearson chi-square of `n` draws against the expected distribution.
// With `mask`, the draws are masked (runtime/token_mask.h's bit layout).
double chi_square(Sampler& s, const std::vector<float>& logits, const std::vector<double>& expected, int n,
                  std::span<const uint64_t> mask = {}) {
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits, {}, mask)->token)];
    double chi2 = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (expected[i] == 0.0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " should never be drawn";
            continue;
        }
        double e = expected[i] * n;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi2;
}

TEST(Sampler, TemperatureSamplingMatchesSoftmaxChiSquare) {
    // 6 tokens -> 5 degrees of freedom; the chi-square critical value at p = 1e-4 is 25.74. A sampler that
    // ignored the temperature here would score in the thousands.
    const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f};
    const int n = 200000;
    for (float t : {0.7f, 1.0f, 1.6f}) {
        SamplingParams p;
        p.temperature = t;
        p.seed = 1234;
        Sampler s(p);
        std::vector<double> expected(logits.size());
        double z = 0.0;
        for (size_t i = 0; i < logits.size(); ++i) z += expected[i] = std::exp(logits[i] / t);
        for (double& e : expected) e /= z;
        EXPECT_LT(chi_square(s, logits, expected, n), 25.74) << "temperature " << t;
    }
    // With top_k = 3 the draw follows the renormalised top three (2 degrees of freedom: critical 18.42).
    SamplingParams p;
    p.top_k = 3;
    p.seed = 77;
    Sampler s(p);
    std::vector<double> expected(logits.size(), 0.0);
    double z = std::exp(2.0) + std::exp(1.0) + std::exp(0.5);
    expected[4] = std::exp(2.0) / z;
    expected[0] = std::exp(1.0) / z;
    expected[1] = std::exp(0.5) / z;
    EXPECT_LT(chi_square(s, logits, expected, n), 18.42);
}

// The straightforward sampler the fast selection must agree with: sort everything (higher logit first, then
// lower id), weights exp((l - max) / T) in double, top-k, top-p on the top-k renormalised mass (the smallest
// prefix whose cumulative weight reaches top_p * total), min-p (weight >= min_p). Most likely first.
std::vector<dsv4::TokenProb> reference_distribution(const std::vector<float>& logits, const SamplingParams& p) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < logits.size(); ++i)
        if (logits[i] != kNegInf) order.push_back(static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const double mx = logits[static_cast<size_t>(order[0])];
    auto w = [&](int32_t id) { return std::exp((static_cast<double>(logits[id]) - mx) / p.temperature); };
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(static_cast<size_t>(p.top_k));
    if (p.top_p < 1.0f) {
        double total = 0.0;
        for (int32_t id : order) total += w(id);
        double cum = 0.0;
        for (size_t i = 0; i < order.size(); ++i) {
            cum += w(order[i]);
            if (cum >= static_cast<double>(p.top_p) * total) {
                order.resize(i + 1);
                break;
            }
        }
    }
    if (p.min_p > 0.0f) std::erase_if(order, [&](int32_t id) { return w(id) < p.min_p; });
    std::vector<dsv4::TokenProb> out;
    double total = 0.0;
    for (int32_t id : order) total += w(id);
    for (int32_t id : order) out.push_back({id, w(id) / total});
    return out;
}

// Logit shapes that stress a threshold selection: flat noise, a dominant token, few distinct values (ties
// across the histogram's buckets), bans, one exact value everywhere, and a range so wide that one bucket
// holds nearly everything.
std::vector<std::pair<std::string, std::vector<float>>> adversarial_logits(size_t n, uint64_t seed) {
    std::vector<std::pair<std::string, std::vector<float>>> out;
    out.emplace_back("flat noise", random_logits(n, seed, 1.0f));
    out.emplace_back("peaked", random_logits(n, seed + 1, 2.0f));
    for (size_t i = 0; i < 5; ++i) out.back().second[(i * 7919) % n] += 14.0f - 2.0f * static_cast<float>(i);
    out.emplace_back("dominant", random_logits(n, seed + 2, 1.0f));
    out.back().second[n / 3] = 40.0f;
    auto q = random_logits(n, seed + 3, 1.0f);
    for (float& x : q) x = std::round(x * 2.0f) / 2.0f;
    out.emplace_back("ties", q);
    auto banned = random_logits(n, seed + 4, 1.5f);
    for (size_t i = 0; i < n; i += 3) banned[i] = kNegInf;
    out.emplace_back("bans", banned);
    out.emplace_back("all equal", std::vector<float>(n, 0.25f));
    auto wide = random_logits(n, seed + 5, 1.0f);
    wide[1] = -1e30f;
    wide[n - 2] = -3e38f;
    out.emplace_back("wide range", wide);
    return out;
}

void expect_same_distribution(const std::vector<float>& logits, const SamplingParams& p, const std::string& what) {
    auto got = dsv4::sampling_distribution(logits, p);
    ASSERT_TRUE(got.ok()) << got.error();
    const auto want = reference_distribution(logits, p);
    ASSERT_EQ(got->size(), want.size()) << what;
    std::set<int32_t> got_ids, want_ids;
    for (const auto& tp : *got) got_ids.insert(tp.token);
    for (const auto& tp : want) want_ids.insert(tp.token);
    ASSERT_EQ(got_ids, want_ids) << what;
    const auto n_finite =
        static_cast<size_t>(std::count_if(logits.begin(), logits.end(), [](float x) { return x != kNegInf; }));
    const bool truncated =
        (p.top_k > 0 && static_cast<size_t>(p.top_k) < n_finite) || p.top_p < 1.0f || p.min_p > 0.0f;
    std::vector<double> want_prob(logits.size(), 0.0);
    for (const auto& tp : want) want_prob[static_cast<size_t>(tp.token)] = tp.prob;
    for (size_t i = 0; i < got->size(); ++i) {
        const auto& tp = (*got)[i];
        EXPECT_NEAR(tp.prob, want_prob[static_cast<size_t>(tp.token)], 1e-12 + 1e-9 * tp.prob) << what;
        if (truncated) {
            EXPECT_EQ(tp.token, want[i].token) << what << ": most likely first, ties by id";
        }
    }
}

TEST(Sampler, SelectionMatchesASortedReference) {
    // Every truncation path of the selection: top-k as a short list and as a prefix (k > 4096), top-p found
    // among the few most likely and by the histogram, min-p, and their combinations.
    struct Case {
        float t;
        int32_t k;
        float top_p, min_p;
    };
    const std::vector<Case> cases = {
        {1.0f, 0, 1.0f, 0.0f},    {0.6f, 0, 0.95f, 0.0f}, {1.0f, 0, 0.5f, 0.0f},   {1.3f, 0, 0.1f, 0.0f},
        {1.0f, 40, 1.0f, 0.0f},   {0.8f, 40, 0.9f, 0.0f}, {1.0f, 1, 1.0f, 0.0f},   {1.0f, 6000, 1.0f, 0.0f},
        {0.7f, 6000, 0.8f, 0.0f}, {1.0f, 0, 1.0f, 0.05f}, {0.6f, 0, 0.95f, 0.05f}, {1.0f, 6000, 0.99f, 0.2f},
        {2.0f, 0, 0.999f, 0.0f},  {0.05f, 0, 0.9f, 0.0f},
    };
    for (size_t n : {size_t{20000}, size_t{129280}}) {
        for (const auto& [name, logits] : adversarial_logits(n, 31 + n)) {
            for (const Case& c : cases) {
                if (n > 20000 && (c.k == 6000 || c.t == 2.0f || c.t == 1.3f || c.t == 0.05f)) continue;  // quick
                SamplingParams p;
                p.temperature = c.t;
                p.top_k = c.k;
                p.top_p = c.top_p;
                p.min_p = c.min_p;
                expect_same_distribution(logits, p,
                                         name + " n=" + std::to_string(n) + " T=" + std::to_string(c.t) +
                                             " k=" + std::to_string(c.k) + " top_p=" + std::to_string(c.top_p) +
                                             " min_p=" + std::to_string(c.min_p));
            }
        }
    }
}

TEST(Sampler, TopPExactlyAtABoundary) {
    // Equal logits weigh exactly 1 each, so cumulative masses are exact integers: top_p = m / n must keep
    // exactly m tokens (the lowest ids), and one token more for anything above.
    for (size_t n : {size_t{8}, size_t{1000}, size_t{129280}}) {
        std::vector<float> logits(n, 1.5f);
        SamplingParams p;
        p.top_p = 0.5f;
        auto d = dsv4::sampling_distribution(logits, p);
        ASSERT_TRUE(d.ok());
        ASSERT_EQ(d->size(), n / 2);
        for (size_t i = 0; i < d->size(); ++i) EXPECT_EQ((*d)[i].token, static_cast<int32_t>(i));
        p.top_p = std::nextafter(0.5f, 1.0f);
        EXPECT_EQ(dsv4::sampling_distribution(logits, p)->size(), n / 2 + 1);
    }
    // Two levels: four tied tokens of weight 1 above the rest (weight e^-200, below double rounding of the
    // total): top_p 0.5 keeps two of the four, the lowest ids, though they are spread over the vocabulary.
    std::vector<float> logits(5000, -200.0f);
    for (int32_t id : {4000, 17, 2500, 999}) logits[static_cast<size_t>(id)] = 0.0f;
    SamplingParams p;
    p.top_p = 0.5f;
    auto d = dsv4::sampling_distribution(logits, p);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->size(), 2u);
    EXPECT_EQ((*d)[0].token, 17);
    EXPECT_EQ((*d)[1].token, 999);
}

TEST(Sampler, TopLogprobsArePartialSelectionWithTiesById) {
    auto logits = random_logits(129280, 5, 1.0f);
    for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;  // many ties
    for (size_t i = 0; i < logits.size(); i += 5) logits[i] = kNegInf;
    SamplingParams p;
    p.top_logprobs = 20;
    p.top_p = 0.95f;
    p.temperature = 0.6f;
    Sampler s(p);
    auto r = s.sample(logits, {});
    ASSERT_TRUE(r.ok()) << r.error();
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    double mx = logits[order[0]], z = 0.0;
    for (float l : logits) z += std::exp(static_cast<double>(l) - mx);
    ASSERT_EQ(r->top_logprobs.size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
        EXPECT_EQ(r->top_logprobs[i].token, order[i]);
        EXPECT_NEAR(r->top_logprobs[i].logprob, logits[order[i]] - mx - std::log(z), 1e-5);
    }
    EXPECT_NEAR(r->logprob, logits[r->token] - mx - std::log(z), 1e-5);
    EXPECT_NE(logits[r->token], kNegInf);
}

// Wilson-Hilferty: the chi-square value with `df` degrees of freedom exceeded with probability ~1e-7.
double chi_square_critical(double df) {
    const double z = 5.2;
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

TEST(Sampler, LargeKeptSetsSampleTheExactDistributionChiSquare) {
    // Kept sets too large for a sorted list (hundreds of tokens, the draw walks block sums in id order): the
    // counts of a fixed-seed run must fit the reference probabilities. A sampler that drew from the wrong
    // set, or with the wrong weights (e.g. ignoring the temperature or the renormalisation), scores far
    // above the critical value; the seed makes the test deterministic.
    const auto logits = random_logits(1500, 77, 0.7f);
    struct Case {
        float t;
        int32_t k;
        float top_p, min_p;
    };
    const int n = 100000;
    for (const Case& c : {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.6f, 0, 0.95f, 0.0f}, Case{1.0f, 0, 1.0f, 0.1f},
                          Case{0.9f, 0, 0.6f, 0.0f}}) {
        SamplingParams p;
        p.temperature = c.t;
        p.top_k = c.k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.seed = 2024;
        const auto ref = reference_distribution(logits, p);
        ASSERT_GT(ref.size(), 300u);
        std::vector<double> expected(logits.size(), 0.0);
        for (const auto& tp : ref) expected[static_cast<size_t>(tp.token)] = tp.prob;
        Sampler s(p);
        const double chi2 = chi_square(s, logits, expected, n);
        EXPECT_LT(chi2, chi_square_critical(static_cast<double>(ref.size() - 1)))
            << "T=" << c.t << " top_p=" << c.top_p << " min_p=" << c.min_p << " kept " << ref.size();
    }
}

TEST(Sampler, MaskedDrawsSampleTheUnmaskedDistributionRestrictedChiSquare) {
    // A masked draw works on the allowed tokens only (a sparse mask) or draws from the whole row and redraws
    // (a dense one, without truncation): either way the counts must fit the full sampler's distribution on
    // the row with the other tokens banned (-inf), truncation included.
    const auto logits = random_logits(1500, 91, 0.7f);
    struct Case {
        int stride;  // the mask allows tokens i % stride == 0 (sparse) or != 0 when negative (dense)
        float t;
        int32_t k;
        float top_p;
    };
    const int n = 100000;
    for (const Case& c : {Case{7, 1.0f, 0, 1.0f}, Case{-5, 1.0f, 0, 1.0f}, Case{-5, 0.7f, 0, 1.0f}, Case{3, 0.8f, 40, 1.0f},
                          Case{-4, 1.0f, 0, 0.9f}, Case{400, 1.0f, 0, 1.0f}}) {
        std::vector<uint64_t> mask((logits.size() + 63) / 64, 0);
        std::vector<float> banned = logits;
        for (size_t i = 0; i < logits.size(); ++i) {
            const bool ok = c.stride > 0 ? i % static_cast<size_t>(c.stride) == 0 : i % static_cast<size_t>(-c.stride) != 0;
            if (ok) mask[i / 64] |= uint64_t{1} << (i % 64);
            else banned[i] = -std::numeric_limits<float>::infinity();
        }
        SamplingParams p;
        p.temperature = c.t;
        p.top_k = c.k;
        p.top_p = c.top_p;
        p.seed = 99;
        auto ref = sampling_distribution(banned, p);
        ASSERT_TRUE(ref.ok()) << ref.error();
        std::vector<double> expected(logits.size(), 0.0);
        for (const auto& tp : *ref) expected[static_cast<size_t>(tp.token)] = tp.prob;
        Sampler s(p);
        const double chi2 = chi_square(s, logits, expected, n, mask);
        EXPECT_LT(chi2, chi_square_critical(static_cast<double>(ref->size() - 1)))
            << "stride " << c.stride << " T=" << c.t << " top_k=" << c.k << " top_p=" << c.top_p << " kept " << ref->size();
        // The reported logprob stays the model's own (the unmasked row's log-softmax).
        auto r = Sampler(p).sample(logits, {}, mask);
        ASSERT_TRUE(r.ok());
        auto scored = dsv4::score_token(logits, r->token, 0);
        ASSERT_TRUE(scored.ok());
        EXPECT_FLOAT_EQ(r->logprob, scored->logprob);
        EXPECT_TRUE((mask[static_cast<size_t>(r->token) / 64] >> (r->token % 64)) & 1);
    }
}

TEST(StopChecker, StopStringAcrossTokens) {
    StopChecker sc({"STOP"}, 0);
    auto u = sc.push("Hello ST");
    EXPECT_EQ(u.text, "Hello ");
    EXPECT_EQ(u.finish, FinishReason::none);
    EXPECT_EQ(sc.held_bytes(), 2u);
    u = sc.push("OP and more");
    EXPECT_EQ(u.text, "");
    EXPECT_EQ(u.finish, FinishReason::stop);
    EXPECT_EQ(u.stop_index, 0);
    EXPECT_TRUE(sc.finished());
}

TEST(StopChecker, FalseAlarmIsReleased) {
    StopChecker sc({"STOP", "\n\n"}, 0);
    EXPECT_EQ(sc.push("x S").text, "x ");
    EXPECT_EQ(sc.push("ure\n").text, "Sure");
    EXPECT_EQ(sc.push("ok").text, "\nok");
    auto u = sc.flush();
    EXPECT_EQ(u.text, "");
    EXPECT_EQ(u.finish, FinishReason::none);
}

TEST(StopChecker, EarliestStartingStopWins) {
    StopChecker a({"abc", "b"}, 0);
    EXPECT_EQ(a.push("ab").text, "");  // "b" is complete, but "abc" may still start earlier
    auto u = a.push("c");
    EXPECT_EQ(u.finish, FinishReason::stop);
    EXPECT_EQ(u.stop_index, 0);
    EXPECT_EQ(u.text, "");

    StopChecker b({"abc", "b"}, 0);
    EXPECT_EQ(b.push("ab").text, "");
    u = b.push("x");
    EXPECT_EQ(u.finish, FinishReason::stop);
    EXPECT_EQ(u.stop_index, 1);
    EXPECT_EQ(u.text, "a");
}

TEST(StopChecker, MaxTokensReleasesEverything) {
    StopChecker sc({"xyz"}, 2);
    auto u = sc.push("a");
    EXPECT_EQ(u.text, "a");
    EXPECT_EQ(u.finish, FinishReason::none);
    u = sc.push("xy");
    EXPECT_EQ(u.text, "xy");
    EXPECT_EQ(u.finish, FinishReason::length);
    EXPECT_EQ(sc.n_tokens(), 2);
    // A stop string completed by the last allowed token is still a stop.
    StopChecker sc2({"xyz"}, 2);
    sc2.push("xy");
    u = sc2.push("z!");
    EXPECT_EQ(u.finish, FinishReason::stop);
    EXPECT_EQ(u.text, "");
}

TEST(StopChecker, HoldsIncompleteUtf8AndFlushes) {
    StopChecker sc({}, 0);
    EXPECT_EQ(sc.push("a\xE4\xBD").text, "a");
    EXPECT_EQ(sc.push("\xA0").text, "\xE4\xBD\xA0");
    StopChecker sc2({"END"}, 0);
    EXPECT_EQ(sc2.push("text E").text, "text ");
    auto u = sc2.flush();  // EOS arrived: the held "E" was text after all
    EXPECT_EQ(u.text, "E");
    EXPECT_EQ(u.finish, FinishReason::none);
}

TEST(StopChecker, RandomSplitsGiveTheWholeTextAnswer) {
    // Whatever the token boundaries, the emitted text is the text before the earliest stop string.
    const std::vector<std::string> stops = {"</s>", "###", "ab"};
    std::mt19937_64 rng(9);
    const std::string alphabet = "a b#</s>x";
    for (int iter = 0; iter < 3000; ++iter) {
        std::string text;
        for (int i = static_cast<int>(rng() % 30); i > 0; --i) text += alphabet[rng() % alphabet.size()];
        size_t first = std::string::npos;
        for (const auto& s : stops) first = std::min(first, text.find(s));
        StopChecker sc(stops, 0);
        std::string out;
        bool stopped = false;
        for (size_t pos = 0; pos < text.size() && !stopped;) {
            size_t len = 1 + rng() % 4;
            auto u = sc.push(std::string_view(text).substr(pos, len));
            pos += len;
            out += u.text;
            stopped = u.finish == FinishReason::stop;
        }
        if (!stopped) {
            auto u = sc.flush();
            out += u.text;
            stopped = u.finish == FinishReason::stop;
        }
        EXPECT_EQ(stopped, first != std::string::npos) << text;
        EXPECT_EQ(out, text.substr(0, first)) << text;
    }
}

}  // namespace
