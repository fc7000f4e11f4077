// Sampled speculative decoding keeps the model's distribution: 1,500 requests of three tokens at temperature 1
// and top-k 3 on the tiny synthetic model, with the second token's draft forced to the most likely one given
// the first (so about half the verify steps accept it and the third token comes from the verify step's second
// row, after the rollback machinery ran or not). For every (first, second) pair seen often enough, the third
// token's counts must follow the model's own probabilities for that context, computed from a plain step's
// logits (chi-square, 2 degrees of freedom; the seeds are fixed, so the outcome is deterministic).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "util/tiny_model.h"

using namespace dsv4;

namespace {

TEST(SpeculativeSampling, TokensFollowTheModelsDistribution) {
    auto t = test::make_tiny_model("speculative_slow", 21);
    ASSERT_TRUE(t.ok()) << t.error();
    Model& m = *(*t)->model;
    const Tokenizer& tok = *(*t)->tokenizer;
    const std::vector<int32_t> prompt = tok.encode("The keeper of the lighthouse", false);
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 3;

    // The model's distribution after `context`, as a sampled draw sees it.
    std::map<std::vector<int32_t>, std::vector<TokenProb>> dist_cache;
    auto dist = [&](const std::vector<int32_t>& context) -> const std::vector<TokenProb>& {
        auto it = dist_cache.find(context);
        if (it != dist_cache.end()) return it->second;
        auto cache = m.new_cache((int64_t)context.size() + 1);
        std::vector<float> logits;
        EXPECT_TRUE(m.step(*cache, context, StepOptions{}, &logits).ok());
        auto d = sampling_distribution(logits, sp);
        EXPECT_TRUE(d.ok()) << d.error();
        return dist_cache[context] = *d;
    };
    // The forced draft for the second token: the most likely one after each possible first token.
    std::map<int32_t, int32_t> likely_second;
    for (const TokenProb& first : dist(prompt)) {
        std::vector<int32_t> c = prompt;
        c.push_back(first.token);
        likely_second[first.token] = dist(c).front().token;
    }

    EngineOptions eo;
    eo.n_slots = 4;  // four sequences at mtp:1 still speculate (8 verify rows: the largest step that does)
    eo.n_ctx = 64;
    eo.prefix_cache = false;
    eo.speculative = 1;
    std::mutex mu;
    std::map<uint64_t, std::vector<int32_t>> out;
    const int64_t second_at = (int64_t)prompt.size() + 1;
    eo.draft_override = [&](uint64_t id, int64_t index, int32_t proposed) {
        std::lock_guard<std::mutex> lk(mu);
        const auto& o = out[id];
        if (index != second_at || o.empty()) return proposed;
        return likely_second.count(o[0]) ? likely_second[o[0]] : proposed;
    };
    Engine engine(m, tok, eo);
    const int N = 1500;
    for (int i = 0; i < N; ++i) {
        GenerationRequest r;
        r.prompt = prompt;
        r.max_tokens = 3;
        r.ignore_eos = true;
        r.sampling = sp;
        r.sampling.seed = 1000 + (uint64_t)i;
        auto id = engine.submit(std::move(r), [&](const TokenEvent& ev) {
            std::lock_guard<std::mutex> lk(mu);
            if (ev.token >= 0) out[ev.request_id].push_back(ev.token);
            EXPECT_NE(ev.reason, GenerationEnd::error) << ev.error;
        });
        ASSERT_TRUE(id.ok()) << id.error();
        if (i % 64 == 63) engine.run_until_idle();  // the queue holds at most 256
    }
    engine.run_until_idle();
    const EngineStats st = engine.stats();
    // The accept path ran often, the reject path too.
    EXPECT_GT(st.accepted_tokens, (uint64_t)N / 5);
    EXPECT_LT(st.accepted_tokens, st.draft_tokens);

    std::map<std::pair<int32_t, int32_t>, std::map<int32_t, int>> third;
    for (const auto& [id, toks] : out) {
        ASSERT_EQ(toks.size(), 3u);
        ++third[{toks[0], toks[1]}][toks[2]];
    }
    int groups = 0;
    for (const auto& [pair, counts] : third) {
        int total = 0;
        for (const auto& [tok3, c] : counts) total += c;
        if (total < 80) continue;
        std::vector<int32_t> c = prompt;
        c.push_back(pair.first);
        c.push_back(pair.second);
        const std::vector<TokenProb>& p = dist(c);
        double chi2 = 0;
        int seen = 0;
        for (const TokenProb& tp : p) {
            const auto it = counts.find(tp.token);
            const int k = it == counts.end() ? 0 : it->second;
            seen += k;
            const double e = total * tp.prob;
            chi2 += (k - e) * (k - e) / e;
        }
        EXPECT_EQ(seen, total) << "a third token outside the top 3";
        // 2 degrees of freedom: the 0.9999 quantile is 18.42.
        EXPECT_LT(chi2, 18.42) << "after " << pair.first << ", " << pair.second << " (" << total << " draws)";
        std::printf("after %d, %d: %d draws, chi-square %.2f\n", pair.first, pair.second, total, chi2);
        ++groups;
    }
    std::printf("%d groups; %llu of %llu drafts accepted\n", groups, (unsigned long long)st.accepted_tokens,
                (unsigned long long)st.draft_tokens);
    EXPECT_GE(groups, 3);
}

}  // namespace
