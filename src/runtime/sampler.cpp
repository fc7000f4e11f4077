// Sampling and stopping: logit bias and penalties, temperature / top-k / top-p / min-p truncation, a seeded
// draw, logprobs of the model's distribution; and the text-level StopChecker. The vocabulary is never sorted:
// runtime/sampler_select.h finds the kept set by thresholds (and documents the float numerics of the draw);
// sampling_distribution reports the kept set's probabilities exactly, in double.
#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "runtime/sampler_select.h"

namespace dsv4 {
namespace {

using sampling::kNegInf;
using sampling::Prefix;
using sampling::Ranked;

constexpr double kLog2e = 1.4426950408889634;
constexpr int64_t kListedTopK = 4096;  // top-k up to this is selected as a sorted list; beyond, as a prefix
constexpr size_t kNucleusProbe = 64;  // top-p first tries the 64 most likely: enough unless the tail is flat

Status check_scan(std::span<const float> logits, const sampling::Scan& s, const char* what) {
    if (logits.empty()) return make_error("sampler: empty logits");
    if (s.first_bad >= 0) {
        const float x = logits[static_cast<size_t>(s.first_bad)];
        return make_error(std::string("sampler: ") + what + " of token " + std::to_string(s.first_bad) + " is " +
                          (std::isnan(x) ? "NaN" : "+inf"));
    }
    return {};
}

bool modifies_logits(const SamplingParams& p) {
    return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
           p.frequency_penalty != 0.0f;
}

// The logprob of result.token and of the top_n most likely tokens under log-softmax of `logits` (max: their
// largest value). full_sum: sum of exp(l - max) over the row when the caller already has it, else < 0. Every
// logprob the engine reports comes from here (sampled tokens, scored prompt tokens, perplexity).
void fill_logprobs(std::span<const float> logits, float max, double full_sum, int32_t top_n, SampleResult& result) {
    double lse = static_cast<double>(kNegInf);
    if (max != kNegInf)
        lse = max + std::log(full_sum >= 0.0 ? full_sum : sampling::exp_sum(logits, max, static_cast<float>(kLog2e)));
    auto logprob = [&](size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - lse); };
    result.logprob = logprob(static_cast<size_t>(result.token));
    result.top_logprobs.clear();
    if (top_n > 0) {
        std::vector<Ranked> top;
        sampling::top_n(logits, static_cast<size_t>(top_n), top);
        result.top_logprobs.resize(top.size());
        for (size_t i = 0; i < top.size(); ++i)
            result.top_logprobs[i] = {top[i].id, logprob(static_cast<size_t>(top[i].id))};
    }
}

bool truncates(const SamplingParams& p, const sampling::Scan& s) {
    return (p.top_k > 0 && p.top_k < s.n_finite) || p.top_p < 1.0f || p.min_p > 0.0f;
}

// The tokens that survive top-k / top-p / min-p: either a short list, most likely first, with weights, or a
// prefix of the likelihood order with `w` holding the weights, zeroed outside it.
struct Selection {
    bool listed = false;
    std::vector<Ranked> list;
    std::vector<float> list_w;
    Prefix keep = sampling::kAllFinite;
    double total = 0.0;     // summed weight of the kept tokens
    double full_sum = -1.0; // summed weight of every token before truncation (prefix form only)
    // Prefix form with `w` left whole: draw from every token and draw again outside `keep`. Exact (the
    // accepted draws follow w restricted to keep) and cheaper than zeroing when keep holds >= half the mass.
    bool redraw = false;
};

// `l`: biased and penalised logits, `s` their scan (at least one finite). Weights are exp((l - max) / T).
void select(std::span<const float> l, const sampling::Scan& s, const SamplingParams& p, std::vector<float>& w,
            std::vector<double>& blocks, Selection& sel) {
    const float scale = static_cast<float>(kLog2e / static_cast<double>(p.temperature));
    const float minp_l = p.min_p > 0.0f ? sampling::min_p_logit(s.max, p.temperature, p.min_p) : kNegInf;
    const bool topk_on = p.top_k > 0 && p.top_k < s.n_finite;
    const auto weight = [&](float x) { return sampling::exp2_nonpos((x - s.max) * scale); };
    // Keeps list[0, keep) and then the min-p survivors among them (a prefix: the list is sorted).
    auto finish_list = [&](size_t keep) {
        while (keep > 1 && sel.list[keep - 1].logit < minp_l) --keep;
        sel.list.resize(keep);
        sel.list_w.resize(keep);
        for (float x : sel.list_w) sel.total += x;
        sel.listed = true;
    };

    if (topk_on && p.top_k <= kListedTopK) {
        sampling::top_n(l, static_cast<size_t>(p.top_k), sel.list);
        sel.list_w.resize(sel.list.size());
        double total = 0.0;
        for (size_t i = 0; i < sel.list.size(); ++i) total += sel.list_w[i] = weight(sel.list[i].logit);
        size_t keep = sel.list.size();
        if (p.top_p < 1.0f) {  // on the top-k renormalised distribution
            const double target = static_cast<double>(p.top_p) * total;
            double cum = 0.0;
            for (size_t i = 0; i < sel.list.size(); ++i) {
                cum += sel.list_w[i];
                if (cum >= target) {
                    keep = i + 1;
                    break;
                }
            }
        }
        finish_list(keep);
        return;
    }

    const size_t n = l.size();
    w.resize(n);
    // Min-p alone is a floor known before any weight: apply it in the same pass.
    const bool min_p_alone = !topk_on && p.top_p == 1.0f && p.min_p > 0.0f;
    sel.full_sum = sampling::exp_weights(l, s.max, scale, min_p_alone ? minp_l : kNegInf, w.data(), blocks);
    Prefix keep = sampling::kAllFinite;
    if (topk_on) keep = sampling::shortest_prefix(l, nullptr, keep, s.max, s.min_finite, p.top_k);
    if (p.top_p < 1.0f) {
        double within = sel.full_sum;
        if (topk_on) {
            within = 0.0;
            for (size_t i = 0; i < n; ++i)
                if (sampling::in_prefix(keep, l[i], static_cast<int64_t>(i))) within += w[i];
        }
        const double target = static_cast<double>(p.top_p) * within;
        // A peaked distribution's nucleus is a handful of tokens: find it among the most likely few, in order.
        // Each weighs at most 1, so when the target exceeds their number the probe cannot succeed.
        if (target <= static_cast<double>(kNucleusProbe)) sampling::top_n(l, std::min(n, kNucleusProbe), sel.list);
        double cum = 0.0;
        for (size_t i = 0; i < sel.list.size(); ++i) {
            cum += w[static_cast<size_t>(sel.list[i].id)];
            if (cum >= target) {
                sel.list_w.resize(i + 1);
                for (size_t j = 0; j <= i; ++j) sel.list_w[j] = w[static_cast<size_t>(sel.list[j].id)];
                finish_list(i + 1);
                return;
            }
        }
        sel.list.clear();
        keep = sampling::shortest_prefix(l, w.data(), keep, s.max, s.min_finite, target);
    }
    if (p.min_p > 0.0f) {
        const Prefix mp{minp_l, std::numeric_limits<int64_t>::max()};
        if (sampling::shorter(mp, keep)) keep = mp;
    }
    sel.keep = keep;
    if (keep.tau != kNegInf) {
        // Top-p alone keeps >= top_p of the mass: at top_p >= 0.5 a draw needs < 2 tries on average.
        const bool min_p_binds =
            p.min_p > 0.0f && keep.tau == minp_l && keep.last_id == std::numeric_limits<int64_t>::max();
        if (!topk_on && p.top_p >= 0.5f && p.top_p < 1.0f && !min_p_binds) {
            sel.redraw = true;
        } else if (!min_p_alone) {
            sampling::keep_prefix(l, keep, w.data(), blocks);  // zero the weights outside, sum the blocks again
        }
    }
    for (double b : blocks) sel.total += b;
}

// The token that `u` in [0, 1) picks: cumulative weights in list order (most likely first) or in id order.
int32_t draw(const Selection& sel, const std::vector<float>& w, const std::vector<double>& blocks, double u01) {
    const double u = u01 * sel.total;
    double cum = 0.0;
    if (sel.listed) {
        for (size_t i = 0; i < sel.list.size(); ++i) {
            cum += sel.list_w[i];
            if (u < cum) return sel.list[i].id;
        }
        return sel.list.back().id;  // if rounding leaves u past the last boundary
    }
    for (size_t b = 0; b < blocks.size(); ++b) {
        if (u >= cum + blocks[b]) {
            cum += blocks[b];
            continue;
        }
        int64_t last = -1;
        for (size_t i = b * sampling::kBlock; i < std::min(w.size(), (b + 1) * sampling::kBlock); ++i) {
            if (w[i] == 0.0f) continue;
            last = static_cast<int64_t>(i);
            cum += w[i];
            if (u < cum) return static_cast<int32_t>(i);
        }
        if (last >= 0) return static_cast<int32_t>(last);  // the block's sum rounded differently
        break;
    }
    for (size_t i = w.size(); i-- > 0;)
        if (w[i] > 0.0f) return static_cast<int32_t>(i);
    return 0;  // unreachable: the most likely token weighs 1 and is always kept
}

// Longest prefix of `buf[0, n)` that does not end inside a UTF-8 sequence (only trims when n is the end).
size_t utf8_safe_prefix(std::string_view buf, size_t n) {
    if (n != buf.size() || n == 0) return n;
    size_t i = n;
    int cont = 0;
    while (i > 0 && cont < 3 && (static_cast<unsigned char>(buf[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++cont;
    }
    if (i == 0) return n;
    unsigned char lead = static_cast<unsigned char>(buf[i - 1]);
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return (lead >= 0xC0 && n - (i - 1) < need) ? i - 1 : n;
}

}  // namespace

Status validate_sampling_params(const SamplingParams& p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
        return make_error("sampling: temperature must be >= 0, got " + std::to_string(p.temperature));
    }
    if (p.top_k < 0) return make_error("sampling: top_k must be >= 0 (0 = off), got " + std::to_string(p.top_k));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
        return make_error("sampling: top_p must be in (0, 1], got " + std::to_string(p.top_p));
    }
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
        return make_error("sampling: min_p must be in [0, 1], got " + std::to_string(p.min_p));
    }
    if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
        return make_error("sampling: repetition_penalty must be > 0, got " + std::to_string(p.repetition_penalty));
    }
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
        return make_error("sampling: presence_penalty and frequency_penalty must be finite");
    }
    for (const auto& [token, bias] : p.logit_bias) {
        if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity()) {
            return make_error("sampling: logit_bias for token " + std::to_string(token) + " must be a number or -inf");
        }
    }
    if (p.top_logprobs < 0) return make_error("sampling: top_logprobs must be >= 0");
    return {};
}

Status apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> history,
                                const SamplingParams& p) {
    const auto n_vocab = static_cast<int64_t>(logits.size());
    for (const auto& [token, bias] : p.logit_bias) {
        if (token < 0 || token >= n_vocab) {
            return make_error("sampling: logit_bias token " + std::to_string(token) + " is outside the vocabulary (" +
                              std::to_string(n_vocab) + " tokens)");
        }
        logits[static_cast<size_t>(token)] += bias;
    }
    if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return {};
    std::vector<int32_t> counts(logits.size(), 0);
    for (int32_t t : history) {
        if (t < 0 || t >= n_vocab) {
            return make_error("sampling: history token " + std::to_string(t) + " is outside the vocabulary");
        }
        ++counts[static_cast<size_t>(t)];
    }
    // Each distinct token once: the repetition penalty does not compound with the count.
    for (int32_t t : history) {
        int32_t& c = counts[static_cast<size_t>(t)];
        if (c == 0) continue;
        float& l = logits[static_cast<size_t>(t)];
        if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
        l -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
        c = 0;
    }
    return {};
}

Result<std::vector<TokenProb>> sampling_distribution(std::span<const float> logits, const SamplingParams& params) {
    DSV4_TRY(validate_sampling_params(params));
    if (params.temperature <= 0.0f) return make_error("sampling_distribution needs temperature > 0");
    const sampling::Scan s = sampling::scan_logits(logits);
    DSV4_TRY(check_scan(logits, s, "logit"));
    if (s.n_finite == 0) return make_error("sampler: every token is banned (all logits are -inf)");
    std::vector<float> w;
    std::vector<double> blocks;
    Selection sel;
    select(logits, s, params, w, blocks, sel);
    std::vector<Ranked> kept = sel.list;
    if (!sel.listed) {
        for (size_t i = 0; i < logits.size(); ++i)
            if (sampling::in_prefix(sel.keep, logits[i], static_cast<int64_t>(i)))
                kept.push_back({static_cast<int32_t>(i), logits[i]});
        if (truncates(params, s)) std::sort(kept.begin(), kept.end(), sampling::more_likely);
    }
    // Exact probabilities of the kept set; the draw's float weights agree to ~1e-6 relative.
    const double inv_t = 1.0 / static_cast<double>(params.temperature);
    std::vector<TokenProb> out(kept.size());
    double total = 0.0;
    for (size_t i = 0; i < kept.size(); ++i) {
        out[i] = {kept[i].id, std::exp((static_cast<double>(kept[i].logit) - s.max) * inv_t)};
        total += out[i].prob;
    }
    for (TokenProb& tp : out) tp.prob /= total;
    return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    Status st = validate_sampling_params(params);
    DSV4_CHECK_MSG(st.ok(), "%s", st.error().c_str());
}

double Sampler::next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

Result<SampleResult> Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                                     std::span<const uint64_t> allowed) {
    const sampling::Scan raw = sampling::scan_logits(logits);
    DSV4_TRY(check_scan(logits, raw, "logit"));
    std::span<const float> l = logits;
    const bool modified = modifies_logits(params_) || !allowed.empty();
    if (modifies_logits(params_)) {
        work_.assign(logits.begin(), logits.end());
        DSV4_TRY(apply_bias_and_penalties(work_, history, params_));
        l = work_;
    }
    // With a mask, everything below runs on the allowed tokens alone, gathered in id order: the selection
    // orders ties by position, which is then the id order, so the kept set and its weights are those of the
    // full row with the other tokens banned, at a cost that scales with the allowed set.
    std::span<const int32_t> ids;
    if (!allowed.empty()) {
        if (auto r = dense_mask_draw(logits, raw, allowed)) return std::move(*r);
        if (allowed_ids_.size() < l.size()) {
            allowed_ids_.resize(l.size());
            allowed_logits_.resize(l.size());
        }
        const size_t k = sampling::gather_allowed(l, allowed, allowed_ids_.data(), allowed_logits_.data());
        ids = std::span<const int32_t>(allowed_ids_.data(), k);
        l = std::span<const float>(allowed_logits_.data(), k);
    }
    sampling::Scan s = raw;
    if (modified) {
        s = sampling::scan_logits(l);
        if (!l.empty()) DSV4_TRY(check_scan(l, s, "biased and penalised logit"));
    }
    if (s.n_finite == 0)
        return make_error(allowed.empty() ? "sampler: every token is banned (all logits are -inf)"
                                          : "sampler: every token the grammar allows is banned");

    SampleResult result;
    double full_sum = -1.0;
    if (params_.temperature == 0.0f) {
        result.token = static_cast<int32_t>(sampling::first_index_of(l, s.max));
    } else {
        Selection sel;
        select(l, s, params_, weights_, blocks_, sel);
        full_sum = sel.full_sum;
        result.token = draw(sel, weights_, blocks_, next_uniform());
        auto outside = [&](int32_t t) { return !sampling::in_prefix(sel.keep, l[static_cast<size_t>(t)], t); };
        for (int tries = 1; sel.redraw && outside(result.token); ++tries) {
            if (tries == 64) {  // ~never (each try succeeds with probability >= 1/2): draw from the kept set itself
                sampling::keep_prefix(l, sel.keep, weights_.data(), blocks_);
                sel.redraw = false;
                sel.total = 0.0;
                for (double b : blocks_) sel.total += b;
            }
            result.token = draw(sel, weights_, blocks_, next_uniform());
        }
    }
    if (!ids.empty()) result.token = ids[static_cast<size_t>(result.token)];

    // Logprobs of the model's distribution (the logits as given). At temperature 1 without bias or penalties
    // the draw's weights are exactly the log-sum-exp's terms, so their sum is reused.
    const bool reuse = !modified && params_.temperature == 1.0f && full_sum >= 0.0;
    fill_logprobs(logits, raw.max, reuse ? full_sum : -1.0, params_.top_logprobs, result);
    return result;
}

// A mask that allows at least half the tokens, with no truncation, bias or penalty: draw from the whole row and
// draw again while the token is not allowed. The accepted draw follows the row restricted to the allowed set
// exactly, and the row's weights are the log-sum-exp's terms, so this costs what an unmasked draw costs. After
// kMaskRedraws refusals (the allowed tokens hold little of the mass) the caller draws from the gathered set,
// which keeps the distribution exact: a capped rejection followed by an exact draw is still exact.
std::optional<SampleResult> Sampler::dense_mask_draw(std::span<const float> logits, const sampling::Scan& raw,
                                                     std::span<const uint64_t> allowed) {
    constexpr int kMaskRedraws = 8;
    const SamplingParams& p = params_;
    if (modifies_logits(p) || p.temperature == 0.0f || p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f || raw.n_finite == 0)
        return std::nullopt;
    if (sampling::count_allowed(allowed, logits.size()) * 2 < logits.size()) return std::nullopt;
    Selection sel;
    select(logits, raw, p, weights_, blocks_, sel);
    for (int tries = 0; tries < kMaskRedraws; ++tries) {
        const int32_t t = draw(sel, weights_, blocks_, next_uniform());
        if (static_cast<size_t>(t) >> 6 >= allowed.size() || !((allowed[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1)) continue;
        SampleResult result;
        result.token = t;
        fill_logprobs(logits, raw.max, p.temperature == 1.0f ? sel.full_sum : -1.0, p.top_logprobs, result);
        return result;
    }
    return std::nullopt;
}

Result<SampleResult> score_token(std::span<const float> logits, int32_t token, int32_t top_n) {
    const sampling::Scan raw = sampling::scan_logits(logits);
    DSV4_TRY(check_scan(logits, raw, "logit"));
    if (token < 0 || static_cast<size_t>(token) >= logits.size())
        return make_error("scoring: token " + std::to_string(token) + " is outside the vocabulary of " +
                          std::to_string(logits.size()));
    if (top_n < 0) return make_error("scoring: top_logprobs must be >= 0");
    SampleResult result;
    result.token = token;
    fill_logprobs(logits, raw.max, -1.0, top_n, result);
    return result;
}

StopChecker::StopChecker(std::vector<std::string> stop_strings, int64_t max_tokens) : max_tokens_(max_tokens) {
    for (std::string& s : stop_strings)
        if (!s.empty()) stops_.push_back(std::move(s));
}

StopUpdate StopChecker::push(std::string_view token_text) {
    DSV4_CHECK_MSG(!finished_, "StopChecker::push after the generation finished");
    ++n_tokens_;
    held_.append(token_text);
    const bool last = max_tokens_ > 0 && n_tokens_ >= max_tokens_;

    // The earliest complete stop string; it only counts if no stop string can still complete earlier (or at
    // the same place, listed first), unless no more text will come.
    size_t best = std::string::npos, max_len = 0;
    int32_t which = -1;
    for (size_t i = 0; i < stops_.size(); ++i) {
        size_t p = held_.find(stops_[i]);
        if (p < best) {
            best = p;
            which = static_cast<int32_t>(i);
        }
        max_len = std::max(max_len, stops_[i].size());
    }
    size_t pending = std::string::npos;  // start of the earliest partial stop string running to the end
    if (!last) {
        for (size_t q = held_.size() >= max_len ? held_.size() - max_len + 1 : 0;
             q < held_.size() && pending == std::string::npos; ++q) {
            std::string_view tail = std::string_view(held_).substr(q);
            for (size_t i = 0; i < stops_.size(); ++i) {
                if (tail.size() < stops_[i].size() && std::string_view(stops_[i]).substr(0, tail.size()) == tail &&
                    (q < best || (q == best && static_cast<int32_t>(i) < which))) {
                    pending = q;
                    break;
                }
            }
        }
    }

    StopUpdate up;
    if (best != std::string::npos && pending == std::string::npos) {
        up.text = held_.substr(0, best);
        up.finish = FinishReason::stop;
        up.stop_index = which;
        held_.clear();
        finished_ = true;
        return up;
    }
    if (last) {
        up.text = std::move(held_);
        held_.clear();
        up.finish = FinishReason::length;
        finished_ = true;
        return up;
    }
    size_t safe = utf8_safe_prefix(held_, pending == std::string::npos ? held_.size() : pending);
    up.text = held_.substr(0, safe);
    held_.erase(0, safe);
    return up;
}

StopUpdate StopChecker::flush() {
    StopUpdate up;
    finished_ = true;
    // A complete stop string still held was waiting on a longer one that can no longer complete.
    size_t best = std::string::npos;
    for (size_t i = 0; i < stops_.size(); ++i) {
        size_t p = held_.find(stops_[i]);
        if (p < best) {
            best = p;
            up.stop_index = static_cast<int32_t>(i);
        }
    }
    if (best != std::string::npos) {
        up.text = held_.substr(0, best);
        up.finish = FinishReason::stop;
    } else {
        up.text = std::move(held_);
    }
    held_.clear();
    return up;
}

}  // namespace dsv4
