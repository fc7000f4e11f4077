// Conformance cases of the MoE ops: moe_route (score and hash routing, bias, normalization) and moe_experts
// (every weight format for the expert stacks; decode-sized and prefill-sized token counts).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

double softplus_d(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

CaseGen route_case(int64_t n, int E, int k, bool bias, bool hash, bool norm, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "moe_route";
        char buf[128];
        std::snprintf(buf, sizeof buf, "n=%lld E=%d k=%d%s%s%s", (long long)n, E, k, bias ? " bias" : "",
                      hash ? " hash" : "", norm ? " norm" : "");
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        const float scale = 1.5f;
        auto logits = std::make_shared<std::vector<float>>(rng.vec(n * E, -4, 4));
        auto bvec = std::make_shared<std::vector<float>>(rng.vec(E, -0.5f, 0.5f));
        const int vocab = 50;
        auto tokens = std::make_shared<std::vector<int32_t>>((size_t)n);
        for (auto& t : *tokens) t = rng.uniform_int(0, vocab - 1);
        auto table = std::make_shared<std::vector<int32_t>>((size_t)vocab * k);
        for (int v = 0; v < vocab; ++v) {
            std::vector<int32_t> perm(E);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng.engine());
            std::copy_n(perm.begin(), k, table->begin() + (size_t)v * k);
        }
        // Selection keys in double: sqrt(softplus) + bias.
        auto sel = std::make_shared<std::vector<double>>((size_t)(n * E));
        for (int64_t i = 0; i < n * E; ++i)
            (*sel)[i] = std::sqrt(softplus_d((*logits)[i])) + (bias ? (*bvec)[i % E] : 0.0);
        c.bytes = 4.0 * n * (E + 2 * k);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const float* lg = d.f32(*logits);
            const float* bd = bias ? d.f32(*bvec) : nullptr;
            const int32_t* tk = d.i32(*tokens);
            const int32_t* tb = hash ? d.i32(*table) : nullptr;
            int32_t* ids = d.i32_out(n * k);
            float* w = d.f32_out(n * k);
            in.run = [&b, ids, w, lg, bd, tb, tk, n, E, k, scale, norm]() {
                b.moe_route(ids, w, lg, bd, tb, tk, n, E, k, scale, norm);
            };
            in.read = [&d, ids, w, n, k]() { return Arrays{d.get_i(ids, n * k), d.get(w, n * k)}; };
            return in;
        };
        c.reference = [=]() {
            Array ids, w;
            for (int64_t i = 0; i < n; ++i) {
                std::vector<int> order(E);
                std::iota(order.begin(), order.end(), 0);
                if (hash) {
                    for (int j = 0; j < k; ++j) order[j] = (*table)[(size_t)(*tokens)[i] * k + j];
                } else {
                    const double* s = sel->data() + i * E;
                    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
                }
                double sum = 0;
                for (int j = 0; j < k; ++j) sum += std::sqrt(softplus_d((*logits)[i * E + order[j]]));
                for (int j = 0; j < k; ++j) {
                    const double s = std::sqrt(softplus_d((*logits)[i * E + order[j]]));
                    ids.push_back(order[j]);
                    w.push_back((norm ? s / sum : s) * scale);
                }
            }
            return Arrays{ids, w};
        };
        // Ids must agree; where they differ the two choices must be a near-tie of the selection key (within
        // f32 noise of sqrt(softplus)), and then the weights are compared per expert, not per slot.
        c.compare = [=](const Arrays& got, const Arrays& want, bool) -> std::string {
            Array gw, ww;
            for (int64_t i = 0; i < n; ++i)
                for (int j = 0; j < k; ++j) {
                    const int64_t at = i * k + j;
                    const int a = (int)got[0][at], b = (int)want[0][at];
                    if (a < 0 || a >= E) return "expert id out of range at " + std::to_string(at);
                    if (a != b) {
                        const double sa = (*sel)[i * E + a], sb = (*sel)[i * E + b];
                        if (hash || std::fabs(sa - sb) > 1e-5 * (1 + std::fabs(sb)))
                            return "token " + std::to_string(i) + " slot " + std::to_string(j) + ": expert " +
                                   std::to_string(a) + " vs " + std::to_string(b);
                        continue;  // a near-tie swap: skip its weight
                    }
                    gw.push_back(got[1][at]);
                    ww.push_back(want[1][at]);
                }
            // softplus/sqrt per element, then a k-term sum and a division: transcendental-level error.
            const double e = nmse(gw, ww);
            if (!(e <= kTolTransc + tol_dot(k))) return "weights nmse " + std::to_string(e);
            return "";
        };
        return c;
    };
}

CaseGen experts_case(GgmlType t, int64_t n, int E, int k, int64_t D, int64_t F, float clamp, bool perf_only,
                     uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "moe_experts";
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s n=%lld E=%d k=%d D=%lld F=%lld clamp=%g", std::string(ggml_type_name(t)).c_str(),
                      (long long)n, E, k, (long long)D, (long long)F, clamp);
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto wg = std::make_shared<std::vector<uint8_t>>(random_weight(t, (int64_t)E * F, D, rng));
        auto wu = std::make_shared<std::vector<uint8_t>>(random_weight(t, (int64_t)E * F, D, rng));
        auto wd = std::make_shared<std::vector<uint8_t>>(random_weight(t, (int64_t)E * D, F, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * D));
        auto ids = std::make_shared<std::vector<int32_t>>();
        for (int64_t i = 0; i < n; ++i) {
            std::vector<int32_t> perm(E);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng.engine());
            ids->insert(ids->end(), perm.begin(), perm.begin() + k);
        }
        auto wts = std::make_shared<std::vector<float>>(rng.vec(n * k, 0.05f, 1.0f));
        // gate and up are D-term dots, SwiGLU adds transcendental error, down is an F-term dot, and each
        // token sums k expert outputs.
        c.tol = 2 * tol_dot((double)D) + tol_dot((double)F) + kTolTransc + k * kTolElem;
        c.ref_tol = c.tol;
        const double per_expert = (double)(wg->size() + wu->size() + wd->size()) / E;
        c.bytes = std::min<double>(E, (double)n * k) * per_expert + 8.0 * n * D;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            MoeArgs a;
            a.gate = make_weight(b, t, *wg, F, D, E);
            a.up = make_weight(b, t, *wu, F, D, E);
            a.down = make_weight(b, t, *wd, D, F, E);
            a.x = d.f32(*x);
            a.ids = d.i32(*ids);
            a.weights = d.f32(*wts);
            a.out = d.f32_out(n * D);
            a.n = n;
            a.k = k;
            a.clamp = clamp;
            in.run = [&b, a]() { b.moe_experts(a); };
            in.read = [&d, a, n, D]() { return Arrays{d.get(a.out, n * D)}; };
            return in;
        };
        c.reference = [=]() {
            return Arrays{moe_experts_reference(t, t, *wg, *wu, *wd, *x, *ids, *wts, n, E, k, D, F, clamp)};
        };
        return c;
    };
}

}  // namespace

void add_moe_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    for (int64_t n : {1, 7, 83})
        for (auto [E, k] : {std::pair{8, 1}, std::pair{16, 6}, std::pair{256, 6}})
            for (int variant = 0; variant < 4; ++variant) {
                const bool bias = variant & 1, hash = variant == 2, norm = variant != 3;
                out.push_back(route_case(n, E, k, bias, hash, norm, o.seed));
            }
    // More experts than the routing block has threads (several per thread), up to the kernel's limits.
    out.push_back(route_case(7, 700, 8, true, false, true, o.seed));
    out.push_back(route_case(3, 2048, 32, true, false, false, o.seed));
    // Pruned files: fewer routed experts, any number of them used (all of them, or one of one).
    for (auto [E, k] : {std::pair{24, 4}, std::pair{7, 7}, std::pair{1, 1}, std::pair{256, 4}})
        for (bool hash : {false, true}) out.push_back(route_case(5, E, k, !hash, hash, true, o.seed));
    for (GgmlType t : weight_types()) {
        // D and F differ (a transposed stack would be caught) and are whole blocks.
        const int64_t D = cols_for(t, 1, 83), F = cols_for(t, 2, 7);
        out.push_back(experts_case(t, 1, 8, 3, D, F, 0.0f, false, o.seed));
        out.push_back(experts_case(t, 7, 16, 6, D, F, 1.5f, false, o.seed));
        out.push_back(experts_case(t, 83, 8, 3, D, F, 1.5f, false, o.seed));  // > 64 rows: the tiled path
    }
    if (o.perf) {
        // Expert formats of the files people run, V4-Flash-like widths: one decode token and a prefill chunk.
        for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                           GgmlType::Q6_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ4_XS})
            for (int64_t n : {1, 64}) out.push_back(experts_case(t, n, 16, 6, 4096, 2048, 10.0f, true, o.seed));
    }
}

}  // namespace dsv4::backend_ops
