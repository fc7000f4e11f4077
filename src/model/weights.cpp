// Binds DeepSeek-V4 tensors by their llama.cpp `deepseek4` names (shared/spec/gguf_deepseek4.md §3.3) and
// checks each shape against the config.
#include "model/weights.h"

#include <cstring>
#include <vector>

#include "format/gguf.h"
#include "format/quant.h"

namespace dsv4 {

namespace {

std::string shape_of(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// The tensors' own bytes in the mapped file.
class FileTensors final : public TensorSource {
public:
    Result<const uint8_t*> bytes(const GgufTensor& t, bool) override {
        if (!t.data && t.n_bytes) return make_error("tensor '" + t.name + "' has no data (a header-only file)");
        return t.data;
    }
};

class Binder {
public:
    Binder(const GgufFile& f, Backend& b, TensorSource& src, ModelWeights& w, const LoadProgress& progress,
           bool touch, const ExpertShard& shard = {})
        : f_(f), b_(b), src_(src), w_(w), progress_(progress), touch_(touch), shard_(shard) {
        for (const GgufTensor& t : f.tensors()) total_ += t.n_bytes;
    }

    // After each tensor: the progress callback, and on a host backend that keeps the mapped bytes a read of
    // one byte per page, so the file is read now rather than by the first prompt.
    void bound(const uint8_t* bytes, size_t n) {
        if (touch_ && bytes) {
            volatile uint8_t sink = 0;
            for (size_t i = 0; i < n; i += 4096) sink = sink + bytes[i];
            (void)sink;
        }
        done_ += n;
        if (progress_) progress_(done_, total_);
    }

    bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }

    // A tensor with exactly the shape `ne` (GGUF order, ne[0] contiguous).
    Result<const GgufTensor*> find(const std::string& name, const std::vector<int64_t>& ne) {
        const GgufTensor* t = f_.tensor(name);
        if (!t) return make_error("missing tensor '" + name + "' (expected shape " + shape_of(ne) + ")");
        std::vector<int64_t> got(t->ne, t->ne + t->n_dims);
        // Trailing 1-dims are equivalent ([D] == [D, 1]).
        std::vector<int64_t> want = ne;
        while (got.size() > 1 && got.back() == 1) got.pop_back();
        while (want.size() > 1 && want.back() == 1) want.pop_back();
        if (got != want)
            return make_error("tensor '" + name + "' has shape " + t->shape_str() + ", expected " + shape_of(ne));
        return t;
    }

    // A matrix [rows, cols] (ne = [cols, rows]) or an expert stack [n_exp][rows, cols].
    Result<Weight> matrix(const std::string& name, int64_t rows, int64_t cols, int64_t n_exp = 1) {
        std::vector<int64_t> ne = {cols, rows};
        if (n_exp > 1) ne.push_back(n_exp);
        DSV4_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, ne));
        if (!ggml_traits(t->type).is_float_weight)
            return make_error("tensor '" + name + "' has type " + std::string(ggml_type_name(t->type)) +
                              ", which is not a weight format");
        Weight w;
        w.type = t->type;
        w.cols = cols;
        w.rows = rows;
        w.n_experts = n_exp;
        w.row_bytes = t->row_bytes();
        // A host backend computes on the bytes in place, so they must outlive the load; a device backend
        // copies them, and is synchronized so that transient bytes (a reused staging buffer) may change.
        const bool keep = b_.is_host();
        DSV4_ASSIGN_OR_RETURN(const uint8_t* bytes, src_.bytes(*t, keep));
        // An expert stack of a model split over ranks: only this rank's experts.
        size_t offset = 0, n_bytes = t->n_bytes;
        if (n_exp > 1 && shard_.count > 1) {
            const size_t per_expert = (size_t)rows * w.row_bytes;
            offset = (size_t)shard_.first(n_exp) * per_expert;
            w.n_experts = shard_.end(n_exp) - shard_.first(n_exp);
            n_bytes = (size_t)w.n_experts * per_expert;
        }
        w.data = b_.weight_data(bytes + offset, n_bytes);
        if (!keep) b_.synchronize();
        bound(keep ? bytes + offset : nullptr, t->n_bytes);
        w.name = t->name.c_str();
        w_.bytes_matrices += n_bytes;
        return w;
    }
    const ExpertShard& shard() const { return shard_; }

    // A small tensor of n values converted to f32 in backend memory.
    Result<const float*> vec(const std::string& name, const std::vector<int64_t>& ne) {
        DSV4_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, ne));
        if (!ggml_traits(t->type).is_float_weight)
            return make_error("tensor '" + name + "' has type " + std::string(ggml_type_name(t->type)) +
                              ", expected a float type");
        DSV4_ASSIGN_OR_RETURN(const uint8_t* bytes, src_.bytes(*t, false));
        std::vector<float> host(t->n_elems());
        const int64_t row = t->ne[0];
        const size_t rb = t->row_bytes();
        for (int64_t r = 0; r < t->n_elems() / row; ++r) dequantize_row(t->type, bytes + r * rb, host.data() + r * row, row);
        bound(nullptr, t->n_bytes);
        return upload_f32(host);
    }

    // An I32 tensor whose every entry must lie in [0, limit) (e.g. expert ids).
    Result<const int32_t*> ivec(const std::string& name, const std::vector<int64_t>& ne, int64_t limit) {
        DSV4_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, ne));
        if (t->type != GgmlType::I32)
            return make_error("tensor '" + name + "' has type " + std::string(ggml_type_name(t->type)) +
                              ", expected I32");
        DSV4_ASSIGN_OR_RETURN(const uint8_t* bytes, src_.bytes(*t, false));
        for (int64_t i = 0; i < t->n_elems(); ++i) {
            int32_t v;
            std::memcpy(&v, bytes + i * 4, 4);
            if (v < 0 || v >= limit)
                return make_error("tensor '" + name + "' entry " + std::to_string(i) + " is " + std::to_string(v) +
                                  ", outside [0, " + std::to_string(limit) + ")");
        }
        void* p = b_.alloc(t->n_bytes);
        b_.upload(p, bytes, t->n_bytes);
        w_.owned.push_back(p);
        return static_cast<const int32_t*>(p);
    }

    const float* upload_f32(const std::vector<float>& host) {
        void* p = b_.alloc(host.size() * sizeof(float));
        b_.upload(p, host.data(), host.size() * sizeof(float));
        w_.owned.push_back(p);
        return static_cast<const float*>(p);
    }

private:
    const GgufFile& f_;
    Backend& b_;
    TensorSource& src_;
    ModelWeights& w_;
    const LoadProgress& progress_;
    bool touch_;
    ExpertShard shard_;
    uint64_t done_ = 0, total_ = 0;
};

Status load_compressor(Binder& b, const std::string& pre, const ModelConfig& c, int ratio, int d,
                       CompressorWeights& cw) {
    const int coff = ratio == 4 ? 2 : 1;
    DSV4_ASSIGN_OR_RETURN(cw.kv, b.matrix(pre + "_kv.weight", (int64_t)coff * d, c.n_embd));
    DSV4_ASSIGN_OR_RETURN(cw.gate, b.matrix(pre + "_gate.weight", (int64_t)coff * d, c.n_embd));
    DSV4_ASSIGN_OR_RETURN(cw.ape, b.vec(pre + "_ape.weight", {(int64_t)coff * d, ratio}));
    DSV4_ASSIGN_OR_RETURN(cw.norm, b.vec(pre + "_norm.weight", {d}));
    return {};
}

// Every tensor of block `il` (a main layer, or the MTP block when il == n_layer).
Status load_layer(Binder& b, const ModelConfig& c, int il, int ratio, bool hash, LayerWeights& L) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t D = c.n_embd, hcD = c.hc_dim();
    const int mix = c.hc_mix();
    DSV4_ASSIGN_OR_RETURN(L.hc_attn_fn, b.matrix(p + "hc_attn_fn.weight", mix, hcD));
    DSV4_ASSIGN_OR_RETURN(L.hc_ffn_fn, b.matrix(p + "hc_ffn_fn.weight", mix, hcD));
    DSV4_ASSIGN_OR_RETURN(L.hc_attn_base, b.vec(p + "hc_attn_base.weight", {mix}));
    DSV4_ASSIGN_OR_RETURN(L.hc_ffn_base, b.vec(p + "hc_ffn_base.weight", {mix}));
    DSV4_ASSIGN_OR_RETURN(L.hc_attn_scale, b.vec(p + "hc_attn_scale.weight", {3}));
    DSV4_ASSIGN_OR_RETURN(L.hc_ffn_scale, b.vec(p + "hc_ffn_scale.weight", {3}));
    DSV4_ASSIGN_OR_RETURN(L.attn_norm, b.vec(p + "attn_norm.weight", {D}));
    DSV4_ASSIGN_OR_RETURN(L.ffn_norm, b.vec(p + "ffn_norm.weight", {D}));

    const int64_t hd = c.head_dim;
    DSV4_ASSIGN_OR_RETURN(L.q_a, b.matrix(p + "attn_q_a.weight", c.q_lora_rank, D));
    DSV4_ASSIGN_OR_RETURN(L.q_a_norm, b.vec(p + "attn_q_a_norm.weight", {c.q_lora_rank}));
    DSV4_ASSIGN_OR_RETURN(L.q_b, b.matrix(p + "attn_q_b.weight", (int64_t)c.n_head * hd, c.q_lora_rank));
    DSV4_ASSIGN_OR_RETURN(L.kv, b.matrix(p + "attn_kv.weight", hd, D));
    DSV4_ASSIGN_OR_RETURN(L.kv_norm, b.vec(p + "attn_kv_a_norm.weight", {hd}));
    const int64_t group_in = (int64_t)(c.n_head / c.o_groups) * hd;
    DSV4_ASSIGN_OR_RETURN(L.out_a, b.matrix(p + "attn_output_a.weight", (int64_t)c.o_groups * c.o_lora_rank, group_in));
    DSV4_ASSIGN_OR_RETURN(L.out_b, b.matrix(p + "attn_output_b.weight", D, (int64_t)c.o_groups * c.o_lora_rank));
    DSV4_ASSIGN_OR_RETURN(L.sinks, b.vec(p + "attn_sinks.weight", {c.n_head}));

    L.ratio = ratio;
    if (ratio > 0) DSV4_TRY(load_compressor(b, p + "attn_compressor", c, ratio, c.head_dim, L.compressor));
    if (ratio == 4) {
        const int64_t iq = (int64_t)c.index_n_head * c.index_head_dim;
        DSV4_ASSIGN_OR_RETURN(L.index_q_b, b.matrix(p + "indexer.attn_q_b.weight", iq, c.q_lora_rank));
        DSV4_ASSIGN_OR_RETURN(L.index_proj, b.matrix(p + "indexer.proj.weight", c.index_n_head, D));
        DSV4_TRY(load_compressor(b, p + "indexer_compressor", c, 4, c.index_head_dim, L.index_compressor));
    }

    const int E = c.n_expert;
    DSV4_ASSIGN_OR_RETURN(L.gate_inp, b.matrix(p + "ffn_gate_inp.weight", E, D));
    if (hash) {
        DSV4_ASSIGN_OR_RETURN(L.tid2eid, b.ivec(p + "ffn_gate_tid2eid.weight", {c.n_expert_used, c.n_vocab}, E));
    } else {
        DSV4_ASSIGN_OR_RETURN(L.expert_bias, b.vec(p + "exp_probs_b.bias", {E}));
    }
    const int64_t F = c.n_ff_exp;
    DSV4_ASSIGN_OR_RETURN(L.gate_exps, b.matrix(p + "ffn_gate_exps.weight", F, D, E));
    DSV4_ASSIGN_OR_RETURN(L.up_exps, b.matrix(p + "ffn_up_exps.weight", F, D, E));
    DSV4_ASSIGN_OR_RETURN(L.down_exps, b.matrix(p + "ffn_down_exps.weight", D, F, E));
    L.expert_base = b.shard().count > 1 && E > 1 ? b.shard().first(E) : 0;
    // The shared expert's width comes from its tensor (n_expert_shared * expert_feed_forward_length).
    const int64_t Fs = F * c.n_expert_shared;
    DSV4_ASSIGN_OR_RETURN(L.gate_shexp, b.matrix(p + "ffn_gate_shexp.weight", Fs, D));
    DSV4_ASSIGN_OR_RETURN(L.up_shexp, b.matrix(p + "ffn_up_shexp.weight", Fs, D));
    DSV4_ASSIGN_OR_RETURN(L.down_shexp, b.matrix(p + "ffn_down_shexp.weight", D, Fs));
    if (il >= (int)c.swiglu_clamp_exp.size() || il >= (int)c.swiglu_clamp_shexp.size())
        return make_error("key 'deepseek4.swiglu_clamp_exp' has no entry for block " + std::to_string(il) +
                          " (key 'deepseek4.block_count' leaves it out)");
    L.clamp_exp = c.swiglu_clamp_exp[il];
    L.clamp_shexp = c.swiglu_clamp_shexp[il];
    return {};
}

Status load_mtp(Binder& b, const ModelConfig& c, MtpWeights& m) {
    const int il = c.n_layer;
    const std::string p = "blk." + std::to_string(il) + ".nextn.";
    const int64_t D = c.n_embd;
    DSV4_TRY(load_layer(b, c, il, 0, false, m.block));
    if (b.has(p + "e_proj.weight")) {
        DSV4_ASSIGN_OR_RETURN(m.e_proj, b.matrix(p + "e_proj.weight", D, D));
        DSV4_ASSIGN_OR_RETURN(m.h_proj, b.matrix(p + "h_proj.weight", D, D));
    } else {
        // Fused [D, 2D] projection of concat(enorm(e), hnorm(h)): split its input columns.
        DSV4_ASSIGN_OR_RETURN(Weight eh, b.matrix(p + "eh_proj.weight", D, 2 * D));
        m.e_proj = eh;
        m.e_proj.cols = D;
        m.h_proj = eh;
        m.h_proj.cols = D;
        m.h_proj.data = eh.data + ggml_row_bytes(ggml_traits(eh.type), D);
    }
    DSV4_ASSIGN_OR_RETURN(m.enorm, b.vec(p + "enorm.weight", {D}));
    DSV4_ASSIGN_OR_RETURN(m.hnorm, b.vec(p + "hnorm.weight", {D}));
    DSV4_ASSIGN_OR_RETURN(m.norm, b.vec(p + "shared_head_norm.weight", {D}));
    DSV4_ASSIGN_OR_RETURN(m.hc_head_fn, b.matrix(p + "hc_head_fn.weight", c.hc, c.hc_dim()));
    DSV4_ASSIGN_OR_RETURN(m.hc_head_base, b.vec(p + "hc_head_base.weight", {c.hc}));
    DSV4_ASSIGN_OR_RETURN(m.hc_head_scale, b.vec(p + "hc_head_scale.weight", {1}));
    return {};
}

}  // namespace

Result<ModelWeights> load_weights(const GgufFile& f, ModelConfig& c, Backend& backend, const LoadProgress& progress,
                                  const ExpertShard& shard) {
    FileTensors file_bytes;
    return load_weights(f, c, backend, file_bytes, progress, shard);
}

Result<ModelWeights> load_weights(const GgufFile& f, ModelConfig& c, Backend& backend, TensorSource& source,
                                  const LoadProgress& progress, const ExpertShard& shard) {
    if (shard.count < 1 || shard.rank < 0 || shard.rank >= shard.count)
        return make_error("expert shard " + std::to_string(shard.rank) + " of " + std::to_string(shard.count) +
                          " is not a rank of the split");
    if (shard.count > 1 && shard.count > c.n_expert)
        return make_error("the model has " + std::to_string(c.n_expert) +
                          " routed experts (key 'expert_count'), too few to split over " + std::to_string(shard.count) + " ranks");
    ModelWeights w;
    Binder b(f, backend, source, w, progress, progress && backend.is_host(), shard);
    const GgufTensor* emb = f.tensor("token_embd.weight");
    if (!emb) return make_error("missing tensor 'token_embd.weight'");
    if (c.n_vocab == 0) c.n_vocab = emb->ne[1];
    const int64_t D = c.n_embd;
    auto fail = [&](Error e) -> Result<ModelWeights> {
        free_weights(w, backend);
        return e;
    };
#define DSV4_LOAD(lhs, expr)                           \
    do {                                               \
        auto r_ = (expr);                              \
        if (!r_.ok()) return fail(std::move(r_).take_error()); \
        lhs = std::move(r_).value();                   \
    } while (0)
    DSV4_LOAD(w.token_embd, b.matrix("token_embd.weight", c.n_vocab, D));
    DSV4_LOAD(w.output, b.matrix("output.weight", c.n_vocab, D));
    DSV4_LOAD(w.output_norm, b.vec("output_norm.weight", {D}));
    DSV4_LOAD(w.output_hc_fn, b.matrix("output_hc_fn.weight", c.hc, c.hc_dim()));
    DSV4_LOAD(w.output_hc_base, b.vec("output_hc_base.weight", {c.hc}));
    DSV4_LOAD(w.output_hc_scale, b.vec("output_hc_scale.weight", {1}));
#undef DSV4_LOAD
    w.layers.resize(c.n_layer);
    for (int il = 0; il < c.n_layer; ++il) {
        Status s = load_layer(b, c, il, c.ratio(il), c.is_hash(il), w.layers[il]);
        if (!s.ok()) return fail(std::move(s).take_error());
    }
    const std::string np = "blk." + std::to_string(c.n_layer) + ".nextn.";
    w.has_mtp = c.n_nextn > 0 && (b.has(np + "e_proj.weight") || b.has(np + "eh_proj.weight"));
    if (w.has_mtp) {
        Status s = load_mtp(b, c, w.mtp);
        if (!s.ok()) return fail(std::move(s).take_error());
    }
    return w;
}

Status load_mtp_weights(const GgufFile& side, const ModelConfig& side_cfg, Backend& backend, ModelWeights& w) {
    if (w.has_mtp) return make_error("the model already has an MTP block");
    FileTensors file_bytes;
    const LoadProgress no_progress;
    Binder b(side, backend, file_bytes, w, no_progress, false);
    const size_t owned_before = w.owned.size();
    const size_t bytes_before = w.bytes_matrices;
    const std::string np = "blk." + std::to_string(side_cfg.n_layer) + ".nextn.";
    Status s = b.has(np + "e_proj.weight") || b.has(np + "eh_proj.weight")
                   ? load_mtp(b, side_cfg, w.mtp)
                   : Status(make_error("missing tensor '" + np + "e_proj.weight' (or a fused '" + np +
                                       "eh_proj.weight')"));
    if (!s.ok()) {
        for (size_t i = owned_before; i < w.owned.size(); ++i) backend.free(w.owned[i]);
        w.owned.resize(owned_before);
        w.bytes_matrices = bytes_before;
        w.mtp = MtpWeights{};
        return s;
    }
    w.has_mtp = true;
    return {};
}

void free_weights(ModelWeights& w, Backend& backend) {
    for (void* p : w.owned) backend.free(p);
    w.owned.clear();
}

}  // namespace dsv4
