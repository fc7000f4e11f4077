// Sliding-window perplexity of a token sequence: windows of `ctx` tokens that move by `stride`, each run on a
// fresh cache as one chunked prefill with logits for every row; each window scores only the tokens no earlier
// window scored (the first window all but its first token), so every token after the first is scored once,
// with at least ctx - stride tokens of context once past the first window. The logprobs are the sampler's
// (score_token in runtime/sampler.h), the same numbers an echoed prompt reports.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "exec/step_runner.h"

namespace dsv4 {

// One window: tokens [begin, end) are fed; tokens [first_scored, end) are scored, each from the row of the
// token before it (so first_scored > begin).
struct ScoreWindow {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t first_scored = 0;
};

// The windows over n_tokens tokens: begin = 0, stride, 2 stride, ... until a window reaches the end, each
// min(ctx, n_tokens - begin) tokens long. With stride == ctx the windows do not overlap and each one's first
// token has no context in it, so it is not scored. Errors: fewer than 2 tokens, ctx < 2, stride < 1,
// stride > ctx (tokens between windows would never be scored).
Result<std::vector<ScoreWindow>> perplexity_windows(int64_t n_tokens, int64_t ctx, int64_t stride);

struct PerplexityOptions {
    int64_t ctx = 0;        // tokens per window (at most the caches' capacity)
    int64_t stride = 0;     // tokens a window moves by
    int64_t chunk = 256;    // tokens per prefill step within a window
    StepOptions step;       // quant_sim etc.; all_logits is set here
};

struct PerplexityProgress {
    size_t window = 0, n_windows = 0;  // windows done / in all
    int64_t n_scored = 0;              // tokens scored so far
    double nll_sum = 0;                // their summed negative log-likelihood (nats)
};

struct PerplexityResult {
    double nll_sum = 0;    // summed -log p(token | context), nats
    int64_t n_scored = 0;  // tokens scored
    size_t n_windows = 0;
    double mean_nll() const { return n_scored > 0 ? nll_sum / static_cast<double>(n_scored) : 0.0; }
    double perplexity() const;  // exp(mean_nll)
};

// Scores `tokens` with the runner's model. `progress` (optional) is called after every window.
Result<PerplexityResult> perplexity(StepRunner& runner, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                                    const std::function<void(const PerplexityProgress&)>& progress = {});

}  // namespace dsv4
