#include "cli/bench_counts.h"

#include <algorithm>
#include <cmath>

#include "format/ggml_type.h"

namespace dsv4::cli {

namespace {

size_t weight_bytes(const Weight& w) { return w.valid() ? (size_t)w.rows * w.row_bytes * w.n_experts : 0; }
double weight_values(const Weight& w) { return w.valid() ? (double)w.rows * w.cols * w.n_experts : 0.0; }

// The dense matrices of a layer (every token multiplies each once).
template <class F>
void for_dense(const LayerWeights& L, F&& f) {
    for (const Weight* x : {&L.hc_attn_fn, &L.hc_ffn_fn, &L.q_a, &L.q_b, &L.kv, &L.out_a, &L.out_b, &L.index_q_b,
                            &L.index_proj, &L.compressor.kv, &L.compressor.gate, &L.index_compressor.kv,
                            &L.index_compressor.gate, &L.gate_inp, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
        f(*x);
}

}  // namespace

double decode_weight_bytes(const Model& m) { return decode_step_weight_bytes(m, 1); }

double decode_step_weight_bytes(const Model& m, int64_t n) {
    const auto& c = m.config();
    const auto& w = m.weights();
    double total = weight_bytes(w.output) + (double)c.n_embd * ggml_traits(w.token_embd.type).block_bytes /
                                                ggml_traits(w.token_embd.type).block_elems;
    total += weight_bytes(w.output_hc_fn);
    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights& L = w.layers[il];
        for_dense(L, [&](const Weight& x) { total += weight_bytes(x); });
        const double frac = 1.0 - std::pow(1.0 - (double)c.n_expert_used / c.n_expert, (double)n);
        total += frac * (weight_bytes(L.gate_exps) + weight_bytes(L.up_exps) + weight_bytes(L.down_exps));
    }
    return total;
}

double prefill_flops(const Model& m, int64_t n, int64_t chunk) {
    const auto& c = m.config();
    const auto& w = m.weights();
    double per_token = 0;  // matmul values every token multiplies
    for (int il = 0; il < c.n_layer; ++il) {
        const LayerWeights& L = w.layers[il];
        for_dense(L, [&](const Weight& x) { per_token += weight_values(x); });
        const double frac = (double)c.n_expert_used / c.n_expert;
        per_token += frac * (weight_values(L.gate_exps) + weight_values(L.up_exps) + weight_values(L.down_exps));
    }
    double total = 2.0 * per_token * (double)n;
    total += 2.0 * weight_values(w.output) * (double)((n + chunk - 1) / std::max<int64_t>(chunk, 1));
    for (int il = 0; il < c.n_layer; ++il) {
        const int ratio = c.ratio(il);
        for (int64_t t = 0; t < n; ++t) {
            const int64_t seen = t + 1;  // tokens a query at position t attends causally
            double entries = (double)std::min<int64_t>(c.window, seen);
            if (ratio == 4) {
                const int64_t keys = seen / 4;
                entries += (double)std::min<int64_t>(c.index_top_k, keys);
                total += 2.0 * c.index_n_head * c.index_head_dim * (double)keys;  // indexer scores
            } else if (ratio > 0) {
                entries += (double)(seen / ratio);
            }
            total += 4.0 * c.n_head * c.head_dim * entries;  // q.k and p.v per head and entry
        }
    }
    return total;
}

}  // namespace dsv4::cli
