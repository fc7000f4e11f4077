// The token draw on the CPU: the definition of ops/sample_args.h written out plainly (a full ordering of the
// row where a truncation needs one), the oracle the CUDA kernel is held to bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace dsv4 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The first NaN / +inf, or -1.
int64_t first_bad(const float* l, int64_t V) {
    for (int64_t i = 0; i < V; ++i)
        if (!(l[i] < kInf)) return i;
    return -1;
}

// Token ids of `l`, most likely first (higher logit, then lower id), -inf ones last by id.
std::vector<int32_t> likelihood_order(const float* l, int64_t V) {
    std::vector<int32_t> order((size_t)V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return sample_key(l[a]) > sample_key(l[b]); });
    return order;
}

int32_t draw_row(const float* l, int64_t V, const SampleArgs& a, float max, int64_t n_finite) {
    if (a.temperature <= 0.0f) return (int32_t)(std::find(l, l + V, max) - l);
    const float scale = sample_scale(a.temperature);
    std::vector<uint64_t> w((size_t)V);
    for (int64_t i = 0; i < V; ++i) w[(size_t)i] = l[i] > -kInf ? sample_weight(l[i], max, scale) : 0;
    // rank[i]: position in the likelihood order; the kept prefix is rank < keep.
    std::vector<int64_t> rank((size_t)V, 0);
    int64_t keep = n_finite;
    const bool top_k = a.top_k > 0 && a.top_k < n_finite;
    if (top_k || a.top_p < 1.0f) {
        const std::vector<int32_t> order = likelihood_order(l, V);
        for (int64_t r = 0; r < V; ++r) rank[(size_t)order[(size_t)r]] = r;
        if (top_k) keep = a.top_k;
        if (a.top_p < 1.0f) {
            uint64_t mass = 0;
            for (int64_t r = 0; r < keep; ++r) mass += w[(size_t)order[(size_t)r]];
            const auto need = std::max<uint64_t>(1, (uint64_t)std::ceil((double)a.top_p * (double)mass));
            uint64_t cum = 0;
            for (int64_t r = 0; r < keep; ++r) {
                cum += w[(size_t)order[(size_t)r]];
                if (cum >= need) {
                    keep = r + 1;
                    break;
                }
            }
        }
    } else {
        for (int64_t i = 0; i < V; ++i) rank[(size_t)i] = l[i] > -kInf ? 0 : V;
    }
    auto kept = [&](int64_t i) { return rank[(size_t)i] < keep && w[(size_t)i] >= a.min_p_fixed ? w[(size_t)i] : 0; };
    uint64_t K = 0;
    for (int64_t i = 0; i < V; ++i) K += kept(i);
    uint64_t t = (uint64_t)(a.u * (double)K);
    if (t >= K) t = K - 1;
    uint64_t cum = 0;
    int32_t last = -1;
    for (int64_t i = 0; i < V; ++i) {
        const uint64_t k = kept(i);
        if (k == 0) continue;
        last = (int32_t)i;
        cum += k;
        if (cum > t) return (int32_t)i;
    }
    return last;
}

void sample_row(SampleOut& o, const float* raw, int64_t V, const SampleArgs& a, const SampleAdjust* adjust) {
    o = SampleOut{};
    if (const int64_t bad = first_bad(raw, V); bad >= 0) {
        o.status = kSampleBadLogit;
        o.bad_token = (int32_t)bad;
        return;
    }
    const float* l = raw;
    std::vector<float> work;
    if (a.adjust_count > 0) {
        work.assign(raw, raw + V);
        for (int32_t j = 0; j < a.adjust_count; ++j) {
            const SampleAdjust& e = adjust[a.adjust_begin + j];
            work[e.token] = sample_adjust(work[e.token], e);
        }
        l = work.data();
        if (const int64_t bad = first_bad(l, V); bad >= 0) {
            o.status = kSampleBadAdjusted;
            o.bad_token = (int32_t)bad;
            return;
        }
    }
    const float max = *std::max_element(l, l + V);
    const int64_t n_finite = std::count_if(l, l + V, [](float x) { return x > -kInf; });
    if (n_finite == 0) {
        o.status = kSampleAllBanned;
        return;
    }
    o.token = draw_row(l, V, a, max, n_finite);

    // Logprobs of the raw row.
    const float raw_max = *std::max_element(raw, raw + V);
    const float scale1 = sample_scale(1.0f);
    uint64_t S = 0;
    for (int64_t i = 0; i < V; ++i) S += sample_weight(raw[i], raw_max, scale1);
    const double lse = (double)raw_max + std::log((double)S / kSampleFixedOne);
    o.logprob = (float)((double)raw[o.token] - lse);
    const int n_top = (int)std::min<int64_t>({a.n_top, V, kSampleMaxTop});
    if (n_top > 0) {
        const std::vector<int32_t> order = likelihood_order(raw, V);
        o.n_top = n_top;
        for (int i = 0; i < n_top; ++i) {
            o.top_ids[i] = order[(size_t)i];
            o.top_logprobs[i] = (float)((double)raw[order[(size_t)i]] - lse);
        }
    }
}

}  // namespace

void CpuBackend::sample(SampleOut* out, const float* logits, int64_t n_vocab, const SampleArgs* args, int64_t rows,
                        const SampleAdjust* adjust) {
    pool_.parallel_for(rows, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) sample_row(out[r], logits + args[r].row * n_vocab, n_vocab, args[r], adjust);
    });
}

}  // namespace dsv4
