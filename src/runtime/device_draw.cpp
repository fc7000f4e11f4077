#include "runtime/device_draw.h"

#include <cmath>
#include <map>
#include <string>

namespace dsv4 {

bool backend_draw_serves(const SamplingParams& p) { return p.top_logprobs <= kSampleMaxTop; }

Result<DrawRequest> make_draw_request(Sampler& sampler, std::span<const int32_t> history, int64_t n_vocab) {
    const SamplingParams& p = sampler.params();
    std::map<int32_t, SampleAdjust> adj;
    for (const auto& [token, bias] : p.logit_bias) {
        if (token < 0 || token >= n_vocab)
            return make_error("sampling: logit_bias token " + std::to_string(token) + " is outside the vocabulary (" +
                              std::to_string(n_vocab) + " tokens)");
        SampleAdjust& a = adj[token];
        a.token = token;
        a.bias = bias;
    }
    if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        std::map<int32_t, int32_t> counts;
        for (int32_t t : history) {
            if (t < 0 || t >= n_vocab)
                return make_error("sampling: history token " + std::to_string(t) + " is outside the vocabulary");
            ++counts[t];
        }
        for (const auto& [token, c] : counts) {
            SampleAdjust& a = adj[token];
            a.token = token;
            a.rep = p.repetition_penalty;
            a.sub = static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;  // as the host sampler
        }
    }
    DrawRequest r;
    r.args.temperature = p.temperature;
    r.args.top_k = p.top_k;
    r.args.top_p = p.top_p;
    r.args.min_p_fixed = p.min_p > 0.0f ? static_cast<uint64_t>(std::ceil(static_cast<double>(p.min_p) * kSampleFixedOne)) : 0;
    r.args.n_top = p.top_logprobs;
    r.args.u = p.temperature > 0.0f ? sampler.next_uniform() : 0.0;
    r.adjust.reserve(adj.size());
    for (const auto& [token, a] : adj) r.adjust.push_back(a);
    return r;
}

Result<SampleResult> draw_result(const SampleOut& o) {
    switch (o.status) {
        case kSampleOk: break;
        case kSampleBadLogit:
            return make_error("sampler: logit of token " + std::to_string(o.bad_token) + " is NaN or +inf");
        case kSampleBadAdjusted:
            return make_error("sampler: biased and penalised logit of token " + std::to_string(o.bad_token) +
                              " is NaN or +inf");
        case kSampleAllBanned: return make_error("sampler: every token is banned (all logits are -inf)");
        default: return make_error("sampler: the backend's draw failed (status " + std::to_string(o.status) + ")");
    }
    SampleResult r;
    r.token = o.token;
    r.logprob = o.logprob;
    r.top_logprobs.resize(static_cast<size_t>(o.n_top));
    for (int i = 0; i < o.n_top; ++i) r.top_logprobs[static_cast<size_t>(i)] = {o.top_ids[i], o.top_logprobs[i]};
    return r;
}

}  // namespace dsv4
