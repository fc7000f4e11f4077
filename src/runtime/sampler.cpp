// Sampling and stopping: logit bias and penalties, temperature / top-k / top-p / min-p truncation, a seeded
// draw, logprobs of the model's distribution; and the text-level StopChecker. Probabilities are computed in
// double from (logit - max) so that nothing overflows and tiny temperatures stay exact.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Candidate {
    int32_t id;
    float logit;
};

// A strict total order: higher logit first, then lower id. Every sort and selection below uses it, so the
// candidate order (and with it the token a given random number picks) is the same on every platform.
bool more_likely(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

Status check_logits(std::span<const float> logits) {
    if (logits.empty()) return make_error("sampler: empty logits");
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
            return make_error("sampler: logit of token " + std::to_string(i) + " is " +
                              (std::isnan(logits[i]) ? "NaN" : "+inf"));
        }
    }
    return {};
}

// The tokens that survive top-k / top-p / min-p, with weights exp((logit - max) / T) (not normalised).
Status build_candidates(std::span<const float> logits, const SamplingParams& p, std::vector<Candidate>& cands,
                        std::vector<double>& weights) {
    cands.clear();
    float max_logit = kNegInf;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (logits[i] == kNegInf) continue;
        cands.push_back({static_cast<int32_t>(i), logits[i]});
        max_logit = std::max(max_logit, logits[i]);
    }
    if (cands.empty()) return make_error("sampler: every token is banned (all logits are -inf)");
    const double inv_t = 1.0 / static_cast<double>(p.temperature);
    auto weight = [&](float logit) { return std::exp((static_cast<double>(logit) - max_logit) * inv_t); };

    bool sorted = false;
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cands.size()) {
        std::nth_element(cands.begin(), cands.begin() + (p.top_k - 1), cands.end(), more_likely);
        cands.resize(static_cast<size_t>(p.top_k));
        std::sort(cands.begin(), cands.end(), more_likely);
        sorted = true;
    }
    if (p.top_p < 1.0f) {
        double total = 0.0;
        for (const Candidate& c : cands) total += weight(c.logit);
        const double target = static_cast<double>(p.top_p) * total;
        // Sort only as far as needed: the nucleus is usually a few dozen tokens out of the whole vocabulary.
        double cum = 0.0;
        size_t keep = cands.size(), done = 0, chunk = 64;
        while (done < cands.size() && keep == cands.size()) {
            size_t end = sorted ? cands.size() : std::min(cands.size(), done + chunk);
            if (!sorted) std::partial_sort(cands.begin() + done, cands.begin() + end, cands.end(), more_likely);
            for (size_t i = done; i < end; ++i) {
                cum += weight(cands[i].logit);
                if (cum >= target) {
                    keep = i + 1;
                    break;
                }
            }
            done = end;
            chunk *= 4;
        }
        cands.resize(keep);  // sorted now: the chunks above cover everything up to `keep`
    }
    if (p.min_p > 0.0f) {
        // p_i >= min_p * p_max  <=>  weight_i >= min_p, since the most likely token (weight 1) is always kept.
        const double floor = p.min_p;
        std::erase_if(cands, [&](const Candidate& c) { return weight(c.logit) < floor; });
    }
    weights.resize(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) weights[i] = weight(cands[i].logit);
    return {};
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
    DSV4_TRY(check_logits(logits));
    std::vector<Candidate> cands;
    std::vector<double> weights;
    DSV4_TRY(build_candidates(logits, params, cands, weights));
    double total = 0.0;
    for (double w : weights) total += w;
    std::vector<TokenProb> out(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) out[i] = {cands[i].id, weights[i] / total};
    return out;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    Status st = validate_sampling_params(params);
    DSV4_CHECK_MSG(st.ok(), "%s", st.error().c_str());
}

double Sampler::next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

Result<SampleResult> Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    DSV4_TRY(check_logits(logits));
    work_.assign(logits.begin(), logits.end());
    DSV4_TRY(apply_bias_and_penalties(work_, history, params_));

    SampleResult result;
    if (params_.temperature == 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < work_.size(); ++i)
            if (work_[i] > work_[best]) best = i;
        if (work_[best] == kNegInf) return make_error("sampler: every token is banned (all logits are -inf)");
        result.token = static_cast<int32_t>(best);
    } else {
        std::vector<Candidate> cands;
        std::vector<double> weights;
        DSV4_TRY(build_candidates(work_, params_, cands, weights));
        double total = 0.0;
        for (double w : weights) total += w;
        const double u = next_uniform() * total;
        double cum = 0.0;
        result.token = cands.back().id;  // if rounding leaves u past the last boundary
        for (size_t i = 0; i < cands.size(); ++i) {
            cum += weights[i];
            if (u < cum) {
                result.token = cands[i].id;
                break;
            }
        }
    }

    // Logprobs of the model's distribution (the logits as given).
    float raw_max = kNegInf;
    for (float l : logits) raw_max = std::max(raw_max, l);
    double sum = 0.0;
    if (raw_max != kNegInf)
        for (float l : logits) sum += std::exp(static_cast<double>(l) - raw_max);
    const double lse = raw_max == kNegInf ? static_cast<double>(kNegInf) : raw_max + std::log(sum);
    auto logprob = [&](size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - lse); };
    result.logprob = logprob(static_cast<size_t>(result.token));
    if (params_.top_logprobs > 0) {
        const size_t n = std::min(logits.size(), static_cast<size_t>(params_.top_logprobs));
        std::vector<Candidate> all(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) all[i] = {static_cast<int32_t>(i), logits[i]};
        std::partial_sort(all.begin(), all.begin() + static_cast<long>(n), all.end(), more_likely);
        result.top_logprobs.resize(n);
        for (size_t i = 0; i < n; ++i) result.top_logprobs[i] = {all[i].id, logprob(static_cast<size_t>(all[i].id))};
    }
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
