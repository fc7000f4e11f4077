// DeepSeek-V4 forward pass, top level (shared/spec/deepseek_v4.md §2): embedding into hc streams, the
// blocks (mHC around attention and MoE), hc_head, final norm, LM head; and the MTP block (§7).
// The sublayers are in attention.cpp and ffn.cpp.
#include "model/deepseek4.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "format/gguf.h"
#include "model/mtp_sidecar.h"
#include "model/step_context.h"

namespace dsv4 {

std::vector<float> rope_freqs(const ModelConfig& cfg, bool compressed) {
    // Mirrors the reference's precompute_freqs_cis in f32: freq_i = 1 / base^(2i/dim); with YaRN the
    // frequencies between the correction bounds blend towards freq/factor.
    const int dim = cfg.rope_dim;
    const float base = compressed ? cfg.compress_rope_freq_base : cfg.rope_freq_base;
    std::vector<float> f(dim / 2);
    for (int i = 0; i < dim / 2; ++i) f[i] = 1.0f / std::pow(base, (float)(2 * i) / (float)dim);
    if (compressed && cfg.yarn) {
        auto corr_dim = [&](double n_rot) {
            return dim * std::log((double)cfg.rope_orig_ctx / (n_rot * 2 * M_PI)) / (2 * std::log((double)base));
        };
        double low = std::max(std::floor(corr_dim(cfg.yarn_beta_fast)), 0.0);
        double high = std::min(std::ceil(corr_dim(cfg.yarn_beta_slow)), (double)(dim - 1));
        if (low == high) high += 0.001;
        for (int i = 0; i < dim / 2; ++i) {
            float ramp = (float)(((float)i - (float)low) / (float)(high - low));
            ramp = std::min(std::max(ramp, 0.0f), 1.0f);
            const float smooth = 1.0f - ramp;
            f[i] = f[i] / cfg.rope_scaling_factor * (1.0f - smooth) + f[i] * smooth;
        }
    }
    return f;
}

// A file with more routed experts, or more of them per token, than the backend's MoE ops take is refused at
// load, with the key that says so, rather than failing inside the first step.
Status check_moe_limits(const ModelConfig& c, const Backend::MoeLimits& lim, const std::string& backend) {
    if (c.n_expert > lim.max_experts)
        return make_error("key 'deepseek4.expert_count' is " + std::to_string(c.n_expert) + "; the " + backend +
                          " backend's MoE kernels take at most " + std::to_string(lim.max_experts) + " routed experts");
    if (c.n_expert_used > lim.max_used)
        return make_error("key 'deepseek4.expert_used_count' is " + std::to_string(c.n_expert_used) + "; the " +
                          backend + " backend's MoE kernels take at most " + std::to_string(lim.max_used) +
                          " experts per token");
    return {};
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, Backend& backend, const ModelLoadOptions& o) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(path));
    if (std::string r = dflash_refusal(*f); !r.empty()) return make_error(r);
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, load(std::move(f), nullptr, backend, o.progress, o.shard));
    auto note = [&](const std::string& line) {
        if (o.note) o.note(line);
    };
    if (!o.mtp_path.empty()) {
        if (m->has_mtp())
            return make_error("--mtp " + o.mtp_path + ": '" + path + "' already holds an MTP block (blk." +
                              std::to_string(m->cfg_.n_layer) + ".nextn.*)");
        DSV4_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> side, GgufFile::open(o.mtp_path));
        DSV4_TRY(m->attach_mtp(std::move(side)));
        note("MTP block from '" + o.mtp_path + "'");
    } else if (o.find_mtp && !m->has_mtp()) {
        const std::vector<std::string> found = mtp_sidecar_candidates(path);
        if (found.size() > 1) {
            std::string list;
            for (const std::string& p : found) list += (list.empty() ? "" : ", ") + p;
            note("several MTP sidecars beside '" + path + "' (" + list + "); none attached, choose one with --mtp FILE");
        } else if (found.size() == 1) {
            auto side = GgufFile::open(found[0]);
            Status s = side.ok() ? m->attach_mtp(std::move(*side)) : Status(make_error(side.error()));
            if (s.ok())
                note("MTP block from '" + found[0] + "' (found beside the model; --mtp FILE picks another)");
            else
                note("not attaching '" + found[0] + "' found beside the model: " + s.error());
        }
    }
    return m;
}

Status Model::attach_mtp(std::unique_ptr<GgufFile> side) {
    DSV4_ASSIGN_OR_RETURN(const ModelConfig side_cfg, mtp_sidecar_config(*side, cfg_));
    Status s = load_mtp_weights(*side, side_cfg, backend_, w_);
    if (!s.ok()) return make_error("MTP file '" + side->path() + "': " + s.error());
    mtp_file_ = std::move(side);
    return {};
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<GgufFile> f, std::unique_ptr<TensorSource> source,
                                           Backend& backend, const LoadProgress& progress, const ExpertShard& shard) {
    std::unique_ptr<Model> m(new Model(backend));
    DSV4_ASSIGN_OR_RETURN(m->cfg_, ModelConfig::from_gguf(*f));
    DSV4_TRY(check_moe_limits(m->cfg_, backend.moe_limits(), backend.name()));
    if (source) {
        DSV4_ASSIGN_OR_RETURN(m->w_, load_weights(*f, m->cfg_, backend, *source, progress, shard));
        source->finish();
    } else {
        DSV4_ASSIGN_OR_RETURN(m->w_, load_weights(*f, m->cfg_, backend, progress, shard));
    }
    m->file_ = std::move(f);
    m->source_ = std::move(source);
    auto upload = [&](const std::vector<float>& v) {
        void* p = backend.alloc(v.size() * sizeof(float));
        backend.upload(p, v.data(), v.size() * sizeof(float));
        m->owned_.push_back(p);
        return static_cast<const float*>(p);
    };
    m->rope_freqs_window_ = upload(rope_freqs(m->cfg_, false));
    m->rope_freqs_compressed_ = upload(rope_freqs(m->cfg_, true));
    return m;
}

Model::~Model() {
    free_weights(w_, backend_);
    for (void* p : owned_) backend_.free(p);
}

std::unique_ptr<KvCache> Model::new_cache(int64_t capacity, bool with_mtp, KvStore store) {
    return std::make_unique<KvCache>(cfg_, backend_, capacity, with_mtp && w_.has_mtp, store);
}

namespace {

HcParams hc_params(const ModelConfig& cfg) {
    return HcParams{cfg.hc, cfg.n_embd, cfg.hc_sinkhorn_iters, cfg.hc_eps, cfg.norm_eps};
}

// The rows of an item that get logits: all of them, or those its draws need, or the last.
int64_t logit_row_count(const Model::BatchItem& it) {
    if (it.all_logits) return (int64_t)it.tokens.size();
    return it.draw ? it.n_draws : 1;
}

}  // namespace

// What a block's last hc_post reads besides the streams: the MoE's two output parts and the FFN hc_pre's post
// and comb. That hc_post runs fused into the next block's first hc_pre (block_forward), after the block's
// scratch is released, so these buffers are allocated once per step, before the blocks. Each block rewrites
// them only after its first op has run the previous block's hc_post.
struct Model::BlockCarry {
    float* routed;  // [n, D]
    float* shared;  // [n, D]
    float* post;    // [n, hc]
    float* comb;    // [n, hc, hc]

    // From the step's scratch, for its c.n tokens.
    static BlockCarry alloc(Ctx& c) {
        const int64_t n = c.n, D = c.cfg.n_embd;
        const int hc = c.cfg.hc;
        return BlockCarry{c.f32(n * D), c.f32(n * D), c.f32(n * hc), c.f32(n * hc * hc)};
    }
};

HcPostArgs Model::block_forward(Ctx& c, int il, const LayerWeights& L, float* H, float* H2, const HcPostArgs* first,
                                const BlockCarry& carry) {
    // H [n, hc, D] in: ready, or the output of `first` (the previous block's last hc_post, run by the first op
    // here). H2 is scratch of the same size. Returns the block's last hc_post, not yet run: H [n, hc, D] out.
    const int64_t n = c.n, D = cfg_.n_embd;
    const int hc = cfg_.hc;
    const HcParams hp = hc_params(cfg_);
    float* x = c.f32(n * D);
    float* y = c.f32(n * D);
    float* post = c.f32(n * hc);
    float* comb = c.f32(n * hc * hc);

    // x [n, D], normed
    c.b.hc_pre_norm(x, post, comb, H, L.hc_attn_fn, L.hc_attn_scale, L.hc_attn_base, n, hp, first, L.attn_norm,
                    cfg_.norm_eps);
    if (first) c.trace("block_out", il - 1, H, n * hc * D);  // the previous block's output, just written
    attention_forward(c, il, L, x, y);  // y [n, D]
    c.b.join();  // post and comb may come from a branch of hc_pre
    // H2 [n, hc, D] = hc_post(y, H), fused into the FFN's hc_pre.
    const HcPostArgs attn_post{H2, y, nullptr, H, post, comb};
    c.b.hc_pre_norm(x, carry.post, carry.comb, H2, L.hc_ffn_fn, L.hc_ffn_scale, L.hc_ffn_base, n, hp, &attn_post,
                    L.ffn_norm, cfg_.norm_eps);
    ffn_forward(c, il, L, x, carry.routed, carry.shared);
    c.b.join();  // carry.post and carry.comb may come from a branch of hc_pre
    return HcPostArgs{H, carry.routed, carry.shared, H2, carry.post, carry.comb};  // H = hc_post(routed + shared, H2)
}

const float* Model::output_logits_device(Ctx& c, const float* H, const Weight& hc_fn, const float* hc_base,
                                        const float* hc_scale, const float* norm, const std::vector<int32_t>& rows) {
    const int64_t D = cfg_.n_embd, V = cfg_.n_vocab, R = (int64_t)rows.size();
    const HcParams hp = hc_params(cfg_);
    const float* Hs = H;
    // Every row in order needs no gather (items list their rows in their own order, which the step's row
    // layout need not follow: single-token sequences come first).
    bool in_order = R == c.n;
    for (int64_t i = 0; in_order && i < R; ++i) in_order = rows[i] == i;
    if (!in_order) {
        float* g = c.f32(R * cfg_.hc_dim());
        c.b.gather_rows(g, H, c.i32(rows), R, cfg_.hc_dim());
        Hs = g;
    }
    float* y = c.f32(R * D);
    c.b.hc_head(y, Hs, hc_fn, hc_scale, hc_base, R, hp);   // [R, D]
    c.b.rms_norm(y, y, norm, R, D, D, cfg_.norm_eps);
    float* logits = c.f32(R * V);
    c.b.matmul(logits, V, y, D, w_.output, R);              // [R, V]
    return logits;
}

void Model::draw_tokens(Ctx& c, const float* logits, std::span<BatchItem> items, const std::vector<int64_t>& last_row) {
    std::vector<SampleArgs> args;
    std::vector<SampleAdjust> adjust;
    for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].draw) continue;
        for (int d = 0; d < items[i].n_draws; ++d) {
            const DrawRequest& req = items[i].draw[d];
            SampleArgs a = req.args;
            a.row = last_row[i] - (items[i].n_draws - 1) + d;
            a.adjust_begin = (int32_t)adjust.size();
            a.adjust_count = (int32_t)req.adjust.size();
            adjust.insert(adjust.end(), req.adjust.begin(), req.adjust.end());
            args.push_back(a);
        }
    }
    if (args.empty()) return;
    // The adjustment list is padded to a power of two, so that a replayed step graph keeps its key while the
    // history grows.
    const size_t cap = adjust.empty() ? 1 : std::bit_ceil(std::max<size_t>(adjust.size(), 64));
    adjust.resize(cap);
    const int64_t rows = (int64_t)args.size();
    auto* args_d = static_cast<SampleArgs*>(c.bytes(args.size() * sizeof(SampleArgs)));
    auto* adjust_d = static_cast<SampleAdjust*>(c.bytes(cap * sizeof(SampleAdjust)));
    auto* out_d = static_cast<SampleOut*>(c.bytes(args.size() * sizeof(SampleOut)));
    c.b.upload(args_d, args.data(), args.size() * sizeof(SampleArgs));
    c.b.upload(adjust_d, adjust.data(), cap * sizeof(SampleAdjust));
    c.b.sample(out_d, logits, cfg_.n_vocab, args_d, rows, adjust_d);
    std::vector<SampleOut> out(args.size());
    c.b.download(out.data(), out_d, out.size() * sizeof(SampleOut));
    size_t k = 0;
    for (BatchItem& it : items)
        if (it.draw)
            for (int d = 0; d < it.n_draws; ++d) it.drawn[d] = out[k++];
}

Status Model::step(KvCache& cache, std::span<const int32_t> tokens, const StepOptions& opt,
                   std::vector<float>* logits, std::vector<float>* hidden) {
    BatchItem item;
    item.cache = &cache;
    item.tokens = tokens;
    item.all_logits = opt.all_logits;
    item.logits = logits;
    item.hidden = hidden;
    return step_batch(std::span<BatchItem>(&item, 1), opt);
}

Status Model::step_batch(std::span<BatchItem> items, const StepOptions& opt, Backend& ops) {
    if (items.empty()) return make_error("step: no sequences");
    int64_t N = 0;
    for (const BatchItem& it : items) {
        const int64_t n = (int64_t)it.tokens.size();
        if (n == 0) return make_error("step: a sequence has no tokens");
        if (!it.cache) return make_error("step: a sequence has no cache");
        if (!it.draw != !it.drawn) return make_error("step: a draw needs both its request and its result");
        if (it.draw && (it.n_draws < 1 || it.n_draws > n)) return make_error("step: n_draws outside [1, tokens]");
        if (it.hidden_from < 0 || it.hidden_from >= n) return make_error("step: hidden_from outside the step's rows");
        if (it.cache->store() == KvStore::quant_sim && !opt.quant_sim)
            return make_error("step: an exact-mode step on a cache made for quant-sim steps (it keeps the indexer's "
                              "keys as FP4 codes); exact steps need a cache made with KvStore::exact");
        if (it.cache->store() != items[0].cache->store())
            return make_error("step: the sequences' caches store their indexer keys differently");
        if (it.cache->pos() + n > it.cache->capacity())
            return make_error("context full: position " + std::to_string(it.cache->pos() + n) +
                              " exceeds the cache capacity " + std::to_string(it.cache->capacity()));
        for (int32_t t : it.tokens)
            if (t < 0 || t >= cfg_.n_vocab)
                return make_error("token id " + std::to_string(t) + " is out of range [0, " +
                                  std::to_string(cfg_.n_vocab) + ")");
        N += n;
    }
    if (N > max_step_tokens()) return make_error("step: too many tokens for one step");
    Ctx c(ops, cfg_, opt);
    c.n = N;
    // Rows: the single-token sequences first (the decode group when there are two or more), then the others,
    // each in item order; c.seqs[i] is items[i].
    int64_t singles = 0;
    for (const BatchItem& it : items) singles += it.tokens.size() == 1;
    std::vector<int32_t> pos((size_t)N), toks((size_t)N), logit_rows;
    int64_t next_single = 0, next_other = singles;
    for (BatchItem& it : items) {
        const int64_t n = (int64_t)it.tokens.size();
        SeqSlice s{n == 1 ? next_single++ : next_other, n, it.cache->pos(), it.cache, false};
        if (n > 1) next_other += n;
        for (int64_t i = 0; i < n; ++i) {
            pos[(size_t)(s.row0 + i)] = (int32_t)(s.pos0 + i);
            toks[(size_t)(s.row0 + i)] = it.tokens[(size_t)i];
        }
        if (it.logits || it.draw) {
            for (int64_t i = s.n - logit_row_count(it); i < s.n; ++i) logit_rows.push_back((int32_t)(s.row0 + i));
        }
        c.seqs.push_back(s);
    }
    c.pos = c.i32(pos);
    c.tokens = c.i32(toks);
    if (singles >= 2) {
        c.group = singles;
        build_group_tables(c);
    }

    const int64_t D = cfg_.n_embd;
    const int hc = cfg_.hc;
    float* e = c.f32(N * D);
    c.b.embed(e, w_.token_embd, c.tokens, N);
    float* H = c.f32(N * hc * D);   // [N, hc, D]: every stream starts as the embedding
    for (int k = 0; k < hc; ++k) c.b.copy_rows(H + k * D, hc * D, e, D, N, D);
    float* H2 = c.f32(N * hc * D);
    const BlockCarry carry = BlockCarry::alloc(c);
    HcPostArgs last;  // the last hc_post of the block before, run fused by the next block's first op
    for (int il = 0; il < cfg_.n_layer; ++il) {
        const size_t layer_mark = c.mark();
        const HcPostArgs prev = last;
        last = block_forward(c, il, w_.layers[il], H, H2, il > 0 ? &prev : nullptr, carry);
        c.release(layer_mark);
    }
    if (cfg_.n_layer > 0) {  // the last block's hc_post on its own: hc_head reads H next
        c.b.hc_post(last, N, hc_params(cfg_));
        c.trace("block_out", cfg_.n_layer - 1, H, N * hc * D);
    }
    for (size_t i = 0; i < items.size(); ++i) {
        const SeqSlice& s = c.seqs[i];
        if (items[i].hidden_device) {
            const int64_t from = items[i].hidden_from;
            c.b.copy(items[i].hidden_device, H + (s.row0 + from) * hc * D, (size_t)(s.n - from) * hc * D * sizeof(float));
        }
        if (!items[i].hidden) continue;
        items[i].hidden->resize(s.n * hc * D);
        c.b.download(items[i].hidden->data(), H + s.row0 * hc * D, (size_t)s.n * hc * D * sizeof(float));
    }
    if (!logit_rows.empty()) {
        const float* logits = output_logits_device(c, H, w_.output_hc_fn, w_.output_hc_base, w_.output_hc_scale,
                                                   w_.output_norm, logit_rows);
        const int64_t V = cfg_.n_vocab;
        std::vector<int64_t> last_row(items.size(), -1);
        bool drawn = false, host_only = true;
        int64_t off = 0;
        for (size_t i = 0; i < items.size(); ++i) {
            if (!items[i].logits && !items[i].draw) continue;
            const int64_t rows = logit_row_count(items[i]);
            last_row[i] = off + rows - 1;
            drawn |= items[i].draw != nullptr;
            host_only &= items[i].logits != nullptr;
            off += rows;
        }
        if (drawn) draw_tokens(c, logits, items, last_row);
        if (host_only) {  // one download for every item (the usual case)
            std::vector<float> all((size_t)off * V);
            c.b.download(all.data(), logits, all.size() * sizeof(float));
            for (size_t i = 0; i < items.size(); ++i) {
                if (!items[i].logits) continue;
                const int64_t rows = logit_row_count(items[i]);
                const int64_t first = last_row[i] - rows + 1;
                items[i].logits->assign(all.begin() + first * V, all.begin() + (last_row[i] + 1) * V);
            }
        } else {
            for (size_t i = 0; i < items.size(); ++i) {
                if (!items[i].logits) continue;
                const int64_t rows = logit_row_count(items[i]);
                items[i].logits->resize((size_t)(rows * V));
                c.b.download(items[i].logits->data(), logits + (last_row[i] - rows + 1) * V,
                             (size_t)(rows * V) * sizeof(float));
            }
        }
    }
    for (const SeqSlice& s : c.seqs) s.cache->set_pos(s.pos0 + s.n);
    return {};
}

Status Model::mtp_step(KvCache& cache, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                       const StepOptions& opt, std::vector<float>* logits) {
    const int64_t n = (int64_t)next_tokens.size();
    if ((int64_t)hidden.size() != n * cfg_.hc * cfg_.n_embd) return make_error("mtp_step: hidden state size does not match");
    float* h = static_cast<float*>(backend_.alloc(std::max<size_t>(hidden.size(), 1) * sizeof(float)));
    backend_.upload(h, hidden.data(), hidden.size() * sizeof(float));
    MtpItem item;
    item.cache = &cache;
    item.hidden = h;
    item.next_tokens = next_tokens;
    item.logits = logits;
    item.all_logits = true;
    Status s = mtp_step(item, opt, backend_);
    backend_.free(h);  // ops run in issue order: a later use of the memory comes after the step's
    return s;
}

Status Model::mtp_step(const MtpItem& item, const StepOptions& opt, Backend& ops) {
    if (!w_.has_mtp) return make_error("this model file has no MTP block");
    if (!item.cache) return make_error("mtp_step: no cache");
    KvCache& cache = *item.cache;
    if (!cache.has_mtp()) return make_error("the cache was created without room for the MTP block");
    const int64_t n = (int64_t)item.next_tokens.size();
    const int64_t D = cfg_.n_embd;
    const int hc = cfg_.hc;
    if (n == 0) return make_error("mtp_step: no tokens");
    if (!item.hidden) return make_error("mtp_step: no hidden state");
    if (!item.draw != !item.drawn) return make_error("mtp_step: a draw needs both its request and its result");
    if (cache.mtp_pos() + n > cache.capacity()) return make_error("context full (MTP block)");
    for (int32_t t : item.next_tokens)
        if (t < 0 || t >= cfg_.n_vocab) return make_error("token id " + std::to_string(t) + " is out of range");
    Ctx c(ops, cfg_, opt);
    c.n = n;
    const int64_t pos0 = cache.mtp_pos();
    c.seqs.push_back(SeqSlice{0, n, pos0, &cache, true});
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = (int32_t)(pos0 + i);
    c.pos = c.i32(pos);
    c.tokens = c.i32(std::vector<int32_t>(item.next_tokens.begin(), item.next_tokens.end()));
    const MtpWeights& m = w_.mtp;

    // e = e_proj(enorm(embed(t+1))) [n, D]; h = h_proj(hnorm(H_k)) per stream [n, hc, D]; X_k = e + h_k.
    float* e = c.f32(n * D);
    c.b.embed(e, w_.token_embd, c.tokens, n);
    c.b.rms_norm(e, e, m.enorm, n, D, D, cfg_.norm_eps);
    float* ep = c.f32(n * D);
    c.b.matmul(ep, D, e, D, m.e_proj, n);
    float* h = c.f32(n * hc * D);
    c.b.rms_norm(h, item.hidden, m.hnorm, n * hc, D, D, cfg_.norm_eps);
    float* X = c.f32(n * hc * D);
    c.b.matmul(X, D, h, D, m.h_proj, n * hc);
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < hc; ++k) c.b.add(X + (i * hc + k) * D, X + (i * hc + k) * D, ep + i * D, D);
    float* X2 = c.f32(n * hc * D);
    const BlockCarry carry = BlockCarry::alloc(c);
    const HcPostArgs last = block_forward(c, cfg_.n_layer, m.block, X, X2, nullptr, carry);
    c.b.hc_post(last, n, hc_params(cfg_));  // X [n, hc, D]: hc_head reads it next
    if (item.hidden_out) c.b.copy(item.hidden_out, X + (n - 1) * hc * D, (size_t)hc * D * sizeof(float));
    if (item.logits || item.draw) {
        std::vector<int32_t> rows;
        for (int64_t i = item.logits && item.all_logits ? 0 : n - 1; i < n; ++i) rows.push_back((int32_t)i);
        const float* logits = output_logits_device(c, X, m.hc_head_fn, m.hc_head_base, m.hc_head_scale, m.norm, rows);
        if (item.draw) {
            BatchItem bi;
            bi.draw = item.draw;
            bi.drawn = item.drawn;
            draw_tokens(c, logits, std::span<BatchItem>(&bi, 1), {(int64_t)rows.size() - 1});
        }
        if (item.logits) {
            item.logits->resize(rows.size() * (size_t)cfg_.n_vocab);
            c.b.download(item.logits->data(), logits, item.logits->size() * sizeof(float));
        }
    }
    cache.set_mtp_pos(pos0 + n);
    return {};
}

}  // namespace dsv4
