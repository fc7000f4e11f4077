// CPU mixture of experts: the sqrt-softplus router (score or hash routing) and the routed experts, run
// expert by expert in ascending id over the tokens that chose each one (only chosen experts' weights are read).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "ops/numerics.h"

namespace dsv4 {

void CpuBackend::moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                           const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k,
                           float scale, bool norm) {
    std::vector<float> s(n_experts), sel(n_experts);
    std::vector<int32_t> order(n_experts);
    for (int64_t i = 0; i < n; ++i) {
        for (int e = 0; e < n_experts; ++e) s[e] = std::sqrt(softplus(logits[i * n_experts + e]));
        int32_t* out_ids = ids + i * k;
        if (tid2eid) {
            for (int j = 0; j < k; ++j) out_ids[j] = tid2eid[(int64_t)tokens[i] * k + j];
        } else {
            for (int e = 0; e < n_experts; ++e) sel[e] = s[e] + (bias ? bias[e] : 0.0f);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
                return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
            });
            for (int j = 0; j < k; ++j) out_ids[j] = order[j];
        }
        float sum = 0;
        for (int j = 0; j < k; ++j) {
            DSV4_CHECK(out_ids[j] >= 0 && out_ids[j] < n_experts);
            sum += s[out_ids[j]];
        }
        for (int j = 0; j < k; ++j) weights[i * k + j] = (norm ? s[out_ids[j]] / sum : s[out_ids[j]]) * scale;
    }
}

void CpuBackend::moe_experts(const MoeArgs& a) {
    const int64_t D = a.gate.cols, F = a.gate.rows;
    DSV4_CHECK(a.down.cols == F && a.down.rows == D && a.up.rows == F && a.up.cols == D);
    if (a.pair_out)
        std::fill(a.pair_out, a.pair_out + a.n * a.k * D, 0.0f);
    else
        std::fill(a.out, a.out + a.n * D, 0.0f);
    const int64_t n_experts = a.gate.n_experts;
    // Bucket (token, slot) pairs by expert (by the held expert's index: ids are the model's, the stacks may
    // hold a range of them).
    std::vector<std::vector<std::pair<int64_t, int>>> by_expert(n_experts);
    for (int64_t i = 0; i < a.n; ++i)
        for (int j = 0; j < a.k; ++j) {
            const int64_t e = (int64_t)a.ids[i * a.k + j] - a.expert_base;
            DSV4_CHECK(a.ids[i * a.k + j] >= 0);
            if (e < 0 || e >= n_experts) {
                DSV4_CHECK_MSG(a.pair_out, "moe_experts: expert %d is not in the stacks", a.ids[i * a.k + j]);
                continue;  // another rank's expert
            }
            by_expert[e].push_back({i, j});
        }
    std::vector<float> xs, g, u, h, y;
    for (int64_t e = 0; e < n_experts; ++e) {
        const auto& list = by_expert[e];
        if (list.empty()) continue;
        const int64_t m = (int64_t)list.size();
        xs.resize(m * D);
        g.resize(m * F);
        u.resize(m * F);
        h.resize(m * F);
        y.resize(m * D);
        for (int64_t r = 0; r < m; ++r) std::copy_n(a.x + list[r].first * D, D, xs.data() + r * D);
        matmul(g.data(), F, xs.data(), D, a.gate.expert(e), m);
        matmul(u.data(), F, xs.data(), D, a.up.expert(e), m);
        swiglu(h.data(), g.data(), u.data(), m, F, F, a.clamp);
        for (int64_t r = 0; r < m; ++r) {
            const float wgt = a.weights[list[r].first * a.k + list[r].second];
            for (int64_t f = 0; f < F; ++f) h[r * F + f] *= wgt;  // routing weight applied before the down proj
        }
        matmul(y.data(), D, h.data(), F, a.down.expert(e), m);
        for (int64_t r = 0; r < m; ++r) {
            if (a.pair_out) {
                std::copy_n(y.data() + r * D, D, a.pair_out + (list[r].first * a.k + list[r].second) * D);
                continue;
            }
            float* o = a.out + list[r].first * D;
            for (int64_t d = 0; d < D; ++d) o[d] += y[r * D + d];
        }
    }
}

void CpuBackend::moe_sum_pairs(float* out, const float* rows, const int32_t* ids, int64_t n, int k, int64_t D) {
    std::vector<int> order((size_t)k);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t* e = ids + i * k;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return e[x] < e[y]; });
        float* o = out + i * D;
        std::fill(o, o + D, 0.0f);
        for (int j : order)
            for (int64_t d = 0; d < D; ++d) o[d] += rows[(i * k + j) * D + d];
    }
}

}  // namespace dsv4
