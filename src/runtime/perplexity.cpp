// Sliding-window perplexity (see perplexity.h): plan the windows, run each as a chunked prefill on a reset
// cache, and sum the negative logprobs of the tokens it scores.
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/sampler.h"

namespace dsv4 {

double PerplexityResult::perplexity() const { return std::exp(mean_nll()); }

Result<std::vector<ScoreWindow>> perplexity_windows(int64_t n_tokens, int64_t ctx, int64_t stride) {
    if (n_tokens < 2)
        return make_error("perplexity needs at least 2 tokens (the first is only context), got " +
                          std::to_string(n_tokens));
    if (ctx < 2) return make_error("a window must hold at least 2 tokens, got " + std::to_string(ctx));
    if (stride < 1) return make_error("the stride must be at least 1, got " + std::to_string(stride));
    if (stride > ctx)
        return make_error("the stride (" + std::to_string(stride) + ") must not exceed the window (" +
                          std::to_string(ctx) + "): the tokens between windows would never be scored");
    std::vector<ScoreWindow> out;
    int64_t scored_end = 0;  // tokens before this are scored (or are the sequence's first token)
    for (int64_t begin = 0;; begin += stride) {
        ScoreWindow w;
        w.begin = begin;
        w.end = std::min(begin + ctx, n_tokens);
        w.first_scored = std::max(scored_end, begin + 1);
        out.push_back(w);
        scored_end = w.end;
        if (w.end == n_tokens) break;
    }
    return out;
}

Result<PerplexityResult> perplexity(StepRunner& runner, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                                    const std::function<void(const PerplexityProgress&)>& progress) {
    auto windows = perplexity_windows(static_cast<int64_t>(tokens.size()), opt.ctx, opt.stride);
    if (!windows.ok()) return std::move(windows).take_error();
    if (opt.chunk < 1) return make_error("the prefill chunk must be at least 1 token");
    Model& model = runner.model();
    const int64_t V = model.config().n_vocab;
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= V)
            return make_error("token " + std::to_string(i) + " (id " + std::to_string(tokens[i]) +
                              ") is outside the model's vocabulary of " + std::to_string(V));

    StepOptions step = opt.step;
    step.all_logits = true;
    const int64_t capacity = std::min<int64_t>(opt.ctx, static_cast<int64_t>(tokens.size()));
    auto cache = model.new_cache(capacity, false, kv_store_for(step.quant_sim));
    std::vector<float> logits;
    PerplexityResult res;
    res.n_windows = windows->size();
    for (size_t wi = 0; wi < windows->size(); ++wi) {
        const ScoreWindow& w = (*windows)[wi];
        cache->reset();
        for (int64_t b = w.begin; b < w.end; b += opt.chunk) {
            const int64_t e = std::min(w.end, b + opt.chunk);
            DSV4_TRY(runner.step(*cache, tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)), step,
                                 &logits));
            // Row r is the distribution of the token at b + r + 1.
            for (int64_t t = std::max(w.first_scored, b + 1); t <= std::min(e, w.end - 1); ++t) {
                std::span<const float> row(logits.data() + static_cast<size_t>(t - 1 - b) * static_cast<size_t>(V),
                                           static_cast<size_t>(V));
                auto s = score_token(row, tokens[static_cast<size_t>(t)], 0);
                if (!s.ok()) return make_error("token " + std::to_string(t) + ": " + s.error());
                res.nll_sum -= static_cast<double>(s->logprob);
                ++res.n_scored;
            }
        }
        if (progress) progress({wi + 1, windows->size(), res.n_scored, res.nll_sum});
    }
    return res;
}

}  // namespace dsv4
