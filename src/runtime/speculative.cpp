// Speculative decoding: option parsing and the model check.
#include "runtime/speculative.h"

#include <algorithm>
#include <charconv>

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
    const int64_t limit = kv_rollback_limit(model.config());
    if (k + 1 > limit)
        return make_error("--speculative mtp:" + std::to_string(k) + ": a verify step of " + std::to_string(k + 1) +
                          " tokens cannot be undone in this model (at most " + std::to_string(limit) +
                          " tokens: its sliding window and smallest compress ratio); use K <= " +
                          std::to_string(limit - 1));
    return {};
}

}  // namespace dsv4
