// The MoE sublayer (shared/spec/deepseek_v4.md §6): sqrt-softplus router (hash routing on the first
// hash_layer_count layers), routed experts with the clamped SwiGLU, plus the always-on shared expert.
#include "model/step_context.h"

namespace dsv4 {

void Model::ffn_forward(Ctx& c, int il, const LayerWeights& L, const float* x, float* routed, float* shared) {
    const ModelConfig& cfg = cfg_;
    const int64_t n = c.n, D = cfg.n_embd;
    const int E = cfg.n_expert, k = cfg.n_expert_used;

    // The router and the shared expert's gate and up projections read the same x: one batch.
    const int64_t F = L.gate_shexp.rows;
    float* logits = c.f32(n * E);                                          // [n, E]
    float* g = c.f32(n * F);
    float* u = c.f32(n * F);
    const MatmulJob in_proj[] = {{logits, E, x, D, &L.gate_inp}, {g, F, x, D, &L.gate_shexp}, {u, F, x, D, &L.up_shexp}};
    c.b.matmul_batch(in_proj, n);
    // The shared expert's down projection does not wait for the routed experts: a branch, joined before its
    // output is read.
    float* h = c.f32(n * F);
    c.b.branch();
    c.b.swiglu(h, g, u, n, F, F, L.clamp_shexp);
    c.b.matmul(shared, D, h, F, L.down_shexp, n);
    c.b.end_branch();

    int32_t* ids = c.i32_uninit(n * k);
    float* wts = c.f32(n * k);
    const bool hash = il < cfg.n_layer && cfg.is_hash(il);
    c.b.moe_route(ids, wts, logits, hash ? nullptr : L.expert_bias, hash ? L.tid2eid : nullptr, c.tokens, n, E,
                       k, cfg.expert_weights_scale, cfg.expert_weights_norm);

    MoeArgs m;
    m.out = routed;
    m.x = x;
    m.ids = ids;
    m.weights = wts;
    m.n = n;
    m.k = k;
    m.gate = L.gate_exps;
    m.up = L.up_exps;
    m.down = L.down_exps;
    m.clamp = L.clamp_exp;
    if (L.gate_exps.n_experts < E) {
        // This rank holds a share of the experts (ExpertShard): every rank's pairs as rows (zeros for the
        // experts held elsewhere), summed over the ranks (each row has one non-zero term, so the sum is exact),
        // then each token's rows added in ascending expert id, as moe_experts adds them: the logits of the split
        // model are the whole model's bit for bit.
        float* pairs = c.f32(n * k * D);
        m.expert_base = L.expert_base;
        m.pair_out = pairs;
        c.b.moe_experts(m);
        c.b.all_reduce_sum(pairs, n * k * D);
        c.b.moe_sum_pairs(routed, pairs, ids, n, k, D);
    } else {
        c.b.moe_experts(m);  // routed sum, ascending expert id
    }
    c.b.join();
    // The sublayer's output is routed + shared (the shared expert last), added by the hc_post that reads it.
}

}  // namespace dsv4
