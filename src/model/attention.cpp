// The attention sublayer (shared/spec/deepseek_v4.md §4-5) for all three layer kinds: window-only (ratio 0),
// CSA (ratio 4: overlapping compressor + lightning indexer top-k) and HCA (any other ratio: all entries).
// Host code only builds index lists from positions; every number is computed by backend ops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "model/step_context.h"

namespace dsv4 {

namespace {

// The two projections a compressor needs for a step's n tokens (kv and gate, [n, coff*d] each), as jobs of
// the layer's projection batch.
struct CompressorProj {
    float* kv = nullptr;
    float* sc = nullptr;
};
CompressorProj compressor_jobs(Model::Ctx& c, std::vector<MatmulJob>& jobs, const CompressorWeights& w, int ratio,
                               int d, int64_t n, const float* x) {
    const int64_t D = c.cfg.n_embd;
    const int64_t width = (ratio == 4 ? 2 : 1) * (int64_t)d;
    CompressorProj p{c.f32(n * width), c.f32(n * width)};
    jobs.push_back({p.kv, width, x, D, &w.kv});
    jobs.push_back({p.sc, width, x, D, &w.gate});
    return p;
}

// The compressor op's arguments for n tokens from their projections (per-sequence or per-token states are
// the caller's to set).
CompressorArgs compressor_args(const CompressorWeights& w, const CompressorProj& pr, int ratio, int d, float* out,
                               int64_t n, const int32_t* pos) {
    CompressorArgs a;
    a.kv = pr.kv;
    a.score = pr.sc;
    a.ape = w.ape;
    a.out_entries = out;
    a.n = n;
    a.pos = pos;
    a.ratio = ratio;
    a.d = d;
    a.overlap = ratio == 4;
    return a;
}

// Finish n pooled entries in place: norm, RoPE at each entry's block start (epos), and the FP8 round trip of the
// main compressor's non-RoPE dims, or the indexer's rotation.
void finish_entries(Model::Ctx& c, const CompressorWeights& w, float* out, int64_t n, int d, const int32_t* epos,
                    const RopeParams& rope, bool indexer) {
    c.b.norm_rope(out, n, 1, d, d, w.norm, c.cfg.norm_eps, epos, rope, !indexer && c.opt.quant_sim ? 64 : 0);
    if (indexer) c.b.hadamard(out, n, d, c.opt.quant_sim);
}

// How a cache stores a compressor's entries (model/kv_cache.h): f32 rows, packed FP4 indexer keys or packed FP8
// KV entries.
enum class Rows { f32, fp4, fp8 };

// Entries finished in `out` ([n, d]) into their rows `rows` of `entries` (or, with `tables`, of their sequences'
// caches), in the cache's format.
void store_entries(Model::Ctx& c, float* entries, float* const* tables, const float* out, const int32_t* rows,
                   int64_t n, int d, Rows format) {
    switch (format) {
        case Rows::fp4: c.b.pack_fp4_rows(entries, tables, out, rows, n, d); break;
        case Rows::fp8: c.b.pack_kv_rows(entries, tables, out, rows, n, d, c.cfg.rope_dim); break;
        case Rows::f32:
            if (tables)
                c.b.scatter_rows_to(tables, out, rows, n, d);
            else
                c.b.scatter_rows(entries, out, rows, n, d);
            break;
    }
}

// Run one compressor over the step's tokens from its projections and append the completed entries
// (normalized, RoPE'd at their block start, then fake-quantized or rotated) to `entries`. The entries are
// finished in a scratch buffer and scattered to their rows by a device index list, so a decode step's op
// arguments do not depend on the position (step graphs replay them). Returns the number of new entries.
int64_t compress(Model::Ctx& c, const SeqSlice& s, const CompressorWeights& w, const CompressorProj& pr, int ratio,
                 int d, float* state_kv, float* state_sc, float* entries, const RopeParams& rope, bool indexer,
                 Rows format) {
    const int64_t n = s.n;
    const int64_t first = s.pos0 / ratio;
    const int64_t n_new = (s.pos0 + n) / ratio - first;
    float* out = n_new > 0 ? c.f32(n_new * d) : nullptr;
    CompressorArgs a = compressor_args(w, pr, ratio, d, out, n, c.pos + s.row0);
    a.state_kv = state_kv;
    a.state_sc = state_sc;
    c.b.compressor(a);
    if (n_new == 0) return 0;
    const int32_t* epos = c.i32_memo("epos/" + std::to_string(s.row0) + "/" + std::to_string(ratio), [&] {
        std::vector<int32_t> v(n_new);
        for (int64_t j = 0; j < n_new; ++j) v[j] = (int32_t)((first + j) * ratio);  // block start position
        return v;
    });
    finish_entries(c, w, out, n_new, d, epos, rope, indexer);
    const int32_t* rows = c.i32_memo("erow/" + std::to_string(s.row0) + "/" + std::to_string(ratio), [&] {
        std::vector<int32_t> v(n_new);
        for (int64_t j = 0; j < n_new; ++j) v[j] = (int32_t)(first + j);
        return v;
    });
    store_entries(c, entries, nullptr, out, rows, n_new, d, format);
    return n_new;
}

// The projections a layer with compression (ratio > 0) needs for every row of the step, as one batch: its
// compressors' kv and gate and, at ratio 4, the lightning indexer's query and head weights (the query rotated
// and, in quant-sim mode, FP4-simulated here, for all rows at once).
struct SourceProj {
    CompressorProj main, index;
    float* qi = nullptr;   // [N, ih, id]
    float* wts = nullptr;  // [N, ih]
};
SourceProj source_projections(Model::Ctx& c, const LayerWeights& L, const float* x, const float* qr_n,
                              const RopeParams& rope) {
    const ModelConfig& cfg = c.cfg;
    const int64_t D = cfg.n_embd, N = c.n;
    const int ih = cfg.index_n_head, id = cfg.index_head_dim;
    std::vector<MatmulJob> jobs;
    SourceProj p;
    p.main = compressor_jobs(c, jobs, L.compressor, L.ratio, cfg.head_dim, N, x);
    if (L.ratio == 4) {
        p.index = compressor_jobs(c, jobs, L.index_compressor, 4, id, N, x);
        p.qi = c.f32(N * ih * id);
        p.wts = c.f32(N * ih);
        jobs.push_back({p.qi, (int64_t)ih * id, qr_n, cfg.q_lora_rank, &L.index_q_b});
        jobs.push_back({p.wts, ih, x, D, &L.index_proj});
    }
    c.b.matmul_batch(jobs, N);
    if (L.ratio == 4) {
        // Lightning indexer queries: rotated FP4-simulated, against the indexer's own compressed keys. The head
        // weights need no scaling: the reference's constant factor (id*ih)^-0.5 is positive, so it cannot
        // change the top-k and is left out.
        c.b.rope(p.qi, N, ih, id, (int64_t)ih * id, c.pos, rope, false);
        c.b.hadamard(p.qi, N * ih, id, c.opt.quant_sim);
    }
    return p;
}

// Rows [row0, ...) of a compressor's projections.
CompressorProj proj_rows(const CompressorProj& p, int64_t row0, int ratio, int d) {
    const int64_t width = (ratio == 4 ? 2 : 1) * (int64_t)d;
    return {p.kv + row0 * width, p.sc + row0 * width};
}

// compress() for the decode group (rows [0, c.group), one token of its own sequence each, at c.group_pos):
// one compressor update over every sequence's state, then the entries the tokens complete (rows of zeros for
// the others) finished as compress() finishes them and scattered to their sequences' caches.
void compress_group(Model::Ctx& c, const CompressorWeights& w, const CompressorProj& pr, int ratio, int d,
                    float* const* state_kv, float* const* state_sc, float* const* entries, const RopeParams& rope,
                    bool indexer, Rows format) {
    const int64_t G = c.group;
    const std::vector<int64_t>& gpos = c.group_pos;
    float* out = c.f32(G * d);
    CompressorArgs a = compressor_args(w, pr, ratio, d, out, G, c.pos);
    a.state_kv_rows = state_kv;
    a.state_sc_rows = state_sc;
    c.b.compressor(a);
    const std::string r = std::to_string(ratio);
    const int32_t* epos = c.i32_memo("group-epos/" + r, [&] {
        std::vector<int32_t> v((size_t)G);
        for (int64_t j = 0; j < G; ++j) v[j] = (int32_t)(gpos[j] / ratio * ratio);  // its block's start
        return v;
    });
    finish_entries(c, w, out, G, d, epos, rope, indexer);
    const int32_t* rows = c.i32_memo("group-erow/" + r, [&] {
        std::vector<int32_t> v((size_t)G);
        for (int64_t j = 0; j < G; ++j) v[j] = (gpos[j] + 1) % ratio == 0 ? (int32_t)(gpos[j] / ratio) : -1;
        return v;
    });
    store_entries(c, nullptr, entries, out, rows, G, d, format);
}

// The window list of the query at position p of a step that feeds tokens from pos0 (row[win], -1 where
// unused): its visible tokens t in (p - win, p], each as its row in the window source: the ring slot t % win
// for a token before this step's or for every token of a decode step (`ring`), else row fresh0 + t - pos0.
void window_row(int32_t* row, int64_t p, int64_t pos0, int win, bool ring, int64_t fresh0) {
    const int64_t lo = std::max<int64_t>(0, p - win + 1);
    for (int64_t t = lo; t <= p; ++t) row[t - lo] = (int32_t)(ring || t < pos0 ? t % win : fresh0 + (t - pos0));
}

}  // namespace

void build_group_tables(Model::Ctx& c) {
    constexpr int kKinds = 7;
    const int64_t G = c.group;
    const int n_layer = c.cfg.n_layer;
    std::vector<void*> host((size_t)n_layer * kKinds * G, nullptr);
    for (const SeqSlice& s : c.seqs) {
        if (s.n != 1) continue;
        for (int il = 0; il < n_layer; ++il) {
            const LayerCache& lc = s.cache->layer(il);
            void* const ptrs[kKinds] = {lc.window, lc.comp, lc.index, lc.state_kv, lc.state_sc, lc.index_state_kv,
                                        lc.index_state_sc};
            for (int k = 0; k < kKinds; ++k) host[((size_t)il * kKinds + k) * G + s.row0] = ptrs[k];
        }
    }
    // The group's caches store their entries alike (Model::step_batch refuses mixed stores): one op serves them.
    c.group_store = KvStore::exact;
    for (const SeqSlice& s : c.seqs)
        if (s.n == 1) c.group_store = s.cache->store();
    c.group_pos.assign((size_t)G, 0);
    for (const SeqSlice& s : c.seqs)
        if (s.n == 1) c.group_pos[(size_t)s.row0] = s.pos0;
    float* const* base = reinterpret_cast<float* const*>(c.ptr_table(host));
    c.group_tables.resize(n_layer);
    for (int il = 0; il < n_layer; ++il) {
        float* const* t = base + (size_t)il * kKinds * G;
        c.group_tables[il] = {t, t + G, t + 2 * G, t + 3 * G, t + 4 * G, t + 5 * G, t + 6 * G};
    }
}

void Model::attention_forward(Ctx& c, int il, const LayerWeights& L, const float* x_all, float* out_all) {
    const ModelConfig& cfg = cfg_;
    const int64_t D = cfg.n_embd;
    const int nh = cfg.n_head, hd = cfg.head_dim, win = cfg.window;
    const int ratio = L.ratio;
    RopeParams rope{ratio > 0 ? rope_freqs_compressed_ : rope_freqs_window_, cfg.rope_dim};
    const int64_t N = c.n;
    // The decode group (rows [0, NG), see Model::Ctx::group) runs each per-sequence op once for all its
    // sequences, through the layer's cache tables; every other sequence runs them by itself.
    const int64_t NG = c.group;
    auto grouped = [NG](const SeqSlice& s) { return NG > 0 && s.n == 1; };
    const std::vector<int64_t>& gpos = c.group_pos;
    const GroupTables* T = NG > 0 ? &c.group_tables[il] : nullptr;
    // With per-row tables an op's single-source argument only says that a source exists: the table's own
    // address stands in, the same whichever sequences the group holds, so a step's ops (and its graph's key)
    // depend on the group's size alone.
    auto placeholder = [](float* const* table) { return reinterpret_cast<const float*>(table); };

    // The index lists of every sequence, uploaded before the branches below (a list is shared by the layers).
    struct SeqLists {
        const int32_t* ring_rows = nullptr;  // the ring slot of each token that stays in the window, else -1
        const int32_t* win_idx = nullptr;
        int64_t n_old = 0;  // ring rows a multi-token step attends to before its own rows
    };
    std::vector<SeqLists> lists(c.seqs.size());
    for (size_t si = 0; si < c.seqs.size(); ++si) {
        const SeqSlice& s = c.seqs[si];
        if (grouped(s)) continue;
        const int64_t n = s.n, pos0 = s.pos0;
        // Token t goes to slot t % win: the ring is written by one scatter through this device list.
        lists[si].ring_rows = c.i32_memo("ring/" + std::to_string(s.row0), [&] {
            std::vector<int32_t> v(n, -1);
            for (int64_t t = std::max<int64_t>(pos0, pos0 + n - win); t < pos0 + n; ++t)
                v[t - pos0] = (int32_t)(t % win);
            return v;
        });
        // The window source. One token (decode): it goes into the ring first (the slot it takes held token
        // pos0 - win, which is outside its window) and attends to the ring itself. A few tokens (a verify
        // step): the ring as it lies (token t < pos0 in slot t % win) and this step's rows in the stage rows
        // after it (row win + t - pos0). More: the ring's filled slots copied out (when pos0 < win they are
        // [0, pos0)), then this step's rows. Either way the ring is written after the attention.
        const bool decode = n == 1, staged = n > 1 && n <= kWindowStageRows;
        const int64_t n_old = decode || staged ? 0 : std::min<int64_t>(pos0, win);
        lists[si].n_old = n_old;
        const int64_t fresh0 = staged ? win : n_old;  // where this step's rows start in the source
        lists[si].win_idx = c.i32_memo("win/" + std::to_string(s.row0), [&] {
            std::vector<int32_t> v((size_t)n * win, -1);
            for (int64_t i = 0; i < n; ++i) window_row(v.data() + i * win, pos0 + i, pos0, win, decode, fresh0);
            return v;
        });
    }
    // The group's: each token as a decode token of its own sequence.
    const int32_t* group_ring = nullptr;
    const int32_t* group_win = nullptr;
    if (NG > 0) {
        group_ring = c.i32_memo("group-ring", [&] {
            std::vector<int32_t> v((size_t)NG);
            for (int64_t j = 0; j < NG; ++j) v[j] = (int32_t)(gpos[j] % win);
            return v;
        });
        group_win = c.i32_memo("group-win", [&] {
            std::vector<int32_t> v((size_t)NG * win, -1);
            for (int64_t j = 0; j < NG; ++j) window_row(v.data() + j * win, gpos[j], gpos[j], win, true, 0);
            return v;
        });
    }

    // Query for every row: low-rank, normalized, per-head unweighted RMS norm, RoPE on the tail dims.
    float* qr_all = c.f32(N * cfg.q_lora_rank);
    float* kv_all = c.f32(N * hd);  // [N, hd] shared K = V
    const MatmulJob in_proj[] = {{qr_all, cfg.q_lora_rank, x_all, D, &L.q_a}, {kv_all, hd, x_all, D, &L.kv}};
    c.b.matmul_batch(in_proj, N);  // qr_all is normed where it is read: by q_b (matmul_norm) and on the branch

    // Three independent chains meet at the attention: the shared KV row (a branch, which also puts a decode
    // token's row into the window ring), the compressors and the indexer (a branch; they read x and qr), and
    // the query (the main line).
    c.b.branch();
    // The KV row: kv_norm, RoPE, and in quant-sim mode the FP8 round trip of its non-RoPE dims.
    c.b.norm_rope(kv_all, N, 1, hd, hd, L.kv_norm, cfg.norm_eps, c.pos, rope, c.opt.quant_sim ? 64 : 0);
    if (NG > 0) c.b.scatter_rows_to(T->window, kv_all, group_ring, NG, hd);
    for (size_t si = 0; si < c.seqs.size(); ++si) {
        const SeqSlice& s = c.seqs[si];
        if (s.n == 1 && !grouped(s))
            c.b.scatter_rows(s.cache->layer(il).window, kv_all + s.row0 * hd, lists[si].ring_rows, 1, hd);
    }
    c.b.end_branch();

    std::vector<AttentionArgs> args(c.seqs.size());
    AttentionArgs group_args;
    if (ratio > 0) {
        c.b.branch();
        // The indexer's query reads the normed latent: normed into a buffer of this branch, while q_b norms
        // its own.
        float* qr_n = c.f32(N * cfg.q_lora_rank);
        c.b.rms_norm(qr_n, qr_all, L.q_a_norm, N, cfg.q_lora_rank, cfg.q_lora_rank, cfg.norm_eps);
        const SourceProj pr = source_projections(c, L, x_all, qr_n, rope);
        const int ih = cfg.index_n_head, id = cfg.index_head_dim, top_k = cfg.index_top_k;
        const int32_t* counts = nullptr;  // [N] compressed entries each row sees (ratio != 4)
        const int32_t* n_vis = nullptr;   // [N] indexer keys each row sees (ratio 4)
        int32_t* idx = nullptr;           // [N, top_k] the indexer's choice (ratio 4)
        if (ratio == 4) {
            n_vis = c.i32_memo("vis", [&] {
                std::vector<int32_t> v((size_t)N);
                for (const SeqSlice& s : c.seqs)
                    for (int64_t i = 0; i < s.n; ++i) v[s.row0 + i] = (int32_t)((s.pos0 + i + 1) / 4);
                return v;
            });
            idx = c.i32_uninit(N * top_k);
        } else {
            counts = c.i32_memo("count/" + std::to_string(ratio), [&] {
                std::vector<int32_t> v((size_t)N);
                for (const SeqSlice& s : c.seqs)
                    for (int64_t i = 0; i < s.n; ++i) v[s.row0 + i] = (int32_t)((s.pos0 + i + 1) / ratio);
                return v;
            });
        }
        if (NG > 0) {
            const bool comp_packed = KvCache::packs_comp(cfg, c.group_store);
            compress_group(c, L.compressor, pr.main, ratio, hd, T->state_kv, T->state_sc, T->comp, rope, false,
                           comp_packed ? Rows::fp8 : Rows::f32);
            if (ratio == 4) {
                const bool packed = KvCache::packs_index(cfg, c.group_store);
                compress_group(c, L.index_compressor, pr.index, 4, id, T->index_state_kv, T->index_state_sc, T->index,
                               rope, true, packed ? Rows::fp4 : Rows::f32);
                c.b.indexer_topk(idx, pr.qi, pr.wts, placeholder(T->index), n_vis, NG, ih, id, top_k, T->index,
                                 packed);
            }
        }
        for (size_t si = 0; si < c.seqs.size(); ++si) {
            const SeqSlice& s = c.seqs[si];
            if (grouped(s)) continue;
            LayerCache& lc = s.cache->layer(il);
            DSV4_CHECK(!lc.comp_packed || c.opt.quant_sim);  // Model::step_batch refuses it
            compress(c, s, L.compressor, proj_rows(pr.main, s.row0, ratio, hd), ratio, hd, lc.state_kv, lc.state_sc,
                     lc.comp, rope, false, lc.comp_packed ? Rows::fp8 : Rows::f32);
            AttentionArgs& a = args[si];
            a.kv_comp = lc.comp;
            a.comp_packed = lc.comp_packed;
            a.comp_rope = cfg.rope_dim;
            if (ratio == 4) {
                DSV4_CHECK(!lc.index_fp4 || c.opt.quant_sim);  // Model::step_batch refuses it
                compress(c, s, L.index_compressor, proj_rows(pr.index, s.row0, 4, id), 4, id, lc.index_state_kv,
                         lc.index_state_sc, lc.index, rope, true, lc.index_fp4 ? Rows::fp4 : Rows::f32);
                c.b.indexer_topk(idx + s.row0 * top_k, pr.qi + s.row0 * ih * id, pr.wts + s.row0 * ih, lc.index,
                                 n_vis + s.row0, s.n, ih, id, top_k, nullptr, lc.index_fp4);
                a.comp_idx = idx + s.row0 * top_k;
                a.n_comp = top_k;
            } else {
                a.comp_count = counts + s.row0;
            }
        }
        if (NG > 0) {
            group_args.kv_comp = placeholder(T->comp);
            group_args.kv_comp_rows = T->comp;
            group_args.comp_packed = KvCache::packs_comp(cfg, c.group_store);
            group_args.comp_rope = cfg.rope_dim;
            if (ratio == 4) {
                group_args.comp_idx = idx;
                group_args.n_comp = top_k;
            } else {
                group_args.comp_count = counts;
            }
        }
        c.b.end_branch();
    }

    float* q_all = c.f32(N * nh * hd);  // [N, nh, hd]
    c.b.matmul_norm(q_all, (int64_t)nh * hd, qr_all, cfg.q_lora_rank, L.q_a_norm, cfg.norm_eps, L.q_b, N);
    c.b.norm_rope(q_all, N, nh, hd, (int64_t)nh * hd, nullptr, cfg.norm_eps, c.pos, rope, 0);
    c.b.join();
    float* o_all = c.f32(N * nh * hd);

    auto common = [&](AttentionArgs& a, int64_t row0, int64_t n) {
        a.out = o_all + row0 * nh * hd;
        a.q = q_all + row0 * nh * hd;
        a.n = n;
        a.n_heads = nh;
        a.head_dim = hd;
        a.scale = 1.0f / std::sqrt((float)hd);
        a.sinks = L.sinks;
        a.n_win = win;
        a.out_rope = rope;  // the output's inverse RoPE, in the attention op
        a.pos = c.pos + row0;
    };
    if (NG > 0) {
        common(group_args, 0, NG);
        group_args.kv_win = placeholder(T->window);
        group_args.kv_win_rows = T->window;
        group_args.win_idx = group_win;
        c.b.attention(group_args);
    }
    for (size_t si = 0; si < c.seqs.size(); ++si) {
        const SeqSlice& s = c.seqs[si];
        if (grouped(s)) continue;
        LayerCache& lc = s.cache->layer(il);
        const int64_t n = s.n;
        const float* kv = kv_all + s.row0 * hd;
        const float* kvw = lc.window;
        if (n > 1 && n <= kWindowStageRows) {
            c.b.copy_rows(lc.window + (int64_t)win * hd, hd, kv, hd, n, hd);
        } else if (n > 1) {
            const int64_t n_old = lists[si].n_old;
            float* buf = c.f32((n_old + n) * hd);
            if (n_old > 0) c.b.copy_rows(buf, hd, lc.window, hd, n_old, hd);
            c.b.copy_rows(buf + n_old * hd, hd, kv, hd, n, hd);
            kvw = buf;
        }
        AttentionArgs& a = args[si];
        common(a, s.row0, n);
        a.kv_win = kvw;
        a.win_idx = lists[si].win_idx;
        c.b.attention(a);

        // Several tokens: they go into the ring now (their queries have read the older rows).
        if (n > 1) c.b.scatter_rows(lc.window, kv, lists[si].ring_rows, n, hd);
    }

    // The output (inverse-RoPE'd by the attention op) through the grouped low-rank projection: group g = heads
    // [g*hpg, (g+1)*hpg).
    const int G = cfg.o_groups, hpg = nh / G;
    const int64_t orank = cfg.o_lora_rank;
    float* z = c.f32(N * G * orank);
    std::vector<Weight> group_w(G);
    std::vector<MatmulJob> groups(G);
    for (int g = 0; g < G; ++g) {
        group_w[g] = L.out_a.row_range(g * orank, orank);
        groups[g] = {z + g * orank, G * orank, o_all + (int64_t)g * hpg * hd, (int64_t)nh * hd, &group_w[g]};
    }
    c.b.matmul_batch(groups, N);
    c.b.matmul(out_all, D, z, G * orank, L.out_b, N);
}

}  // namespace dsv4
