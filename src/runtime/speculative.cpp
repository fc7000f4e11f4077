// Speculative decoding: option parsing, the model check and the speculative sampling rule.
#include "runtime/speculative.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "model/deepseek4.h"

namespace dsv4 {

Result<int> parse_speculative(const std::string& spec) {
    if (spec.empty() || spec == "off") return 0;
    if (spec == "mtp") return 1;
    const std::string prefix = "mtp:";
    if (spec.rfind(prefix, 0) == 0) {
        int k = 0;
        const char* b = spec.data() + prefix.size();
        const char* e = spec.data() + spec.size();
        auto [ptr, ec] = std::from_chars(b, e, k);
        if (ec == std::errc() && ptr == e && k >= 1 && k <= 16) return k;
    }
    return make_error("--speculative '" + spec + "': expected mtp or mtp:K with K drafts per step (1 to 16)");
}

Status check_speculative(const Model& model, int k) {
    if (k <= 0) return {};
    if (!model.has_mtp())
        return make_error("--speculative mtp: '" + model.file().path() +
                          "' has no MTP block (blk." + std::to_string(model.config().n_layer) +
                          ".nextn.*) and no MTP sidecar was attached (--mtp FILE names one)");
    const ModelConfig& c = model.config();
    int64_t limit = c.window;
    for (int il = 0; il < c.n_layer; ++il)
        if (c.ratio(il) > 0) limit = std::min<int64_t>(limit, c.ratio(il));
    if (k + 1 > limit)
        return make_error("--speculative mtp:" + std::to_string(k) + ": a verify step of " + std::to_string(k + 1) +
                          " tokens cannot be undone in this model (at most " + std::to_string(limit) +
                          " tokens: its sliding window and smallest compress ratio); use K <= " +
                          std::to_string(limit - 1));
    return {};
}

int32_t draw_from(std::span<const TokenProb> dist, double u) {
    double acc = 0;
    for (const TokenProb& t : dist) {
        acc += t.prob;
        if (u < acc) return t.token;
    }
    return dist.empty() ? -1 : dist.back().token;
}

SpeculativeVerdict speculative_accept(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                                      double u_accept, double u_residual) {
    std::unordered_map<int32_t, double> qm;
    qm.reserve(q.size() * 2);
    for (const TokenProb& t : q) qm[t.token] = t.prob;
    double pd = 0;
    for (const TokenProb& t : p)
        if (t.token == d) pd = t.prob;
    const auto qd_it = qm.find(d);
    const double qd = qd_it == qm.end() ? 0.0 : qd_it->second;
    if (qd > 0 && u_accept * qd < pd) return {true, d};
    // The residual max(0, p - q), in p's order.
    std::vector<TokenProb> r;
    r.reserve(p.size());
    double sum = 0;
    for (const TokenProb& t : p) {
        const auto it = qm.find(t.token);
        const double v = t.prob - (it == qm.end() ? 0.0 : it->second);
        if (v > 0) {
            r.push_back({t.token, v});
            sum += v;
        }
    }
    if (r.empty() || !(sum > 0)) return {false, draw_from(p, u_residual)};
    for (TokenProb& t : r) t.prob /= sum;
    return {false, draw_from(r, u_residual)};
}

}  // namespace dsv4
