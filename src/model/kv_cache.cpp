// KvCache allocation, reset and snapshots.
#include "model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

namespace dsv4 {

namespace {

// Where everything of a cache lies, from the config alone: per layer its window (with the stage rows) and
// compressor states (the rewindable rows, as float offsets into one block), and the floats of its
// append-only compressed and indexer entries, each allocated on its own. KvCache lays itself out by it and
// bytes_for sums it.
struct Layout {
    struct Layer {
        int ratio = 0;
        int64_t off_window = 0, off_state = 0, off_index = 0;
        int64_t state_floats = 0, index_state_floats = 0;
        int64_t comp_floats = 0, comp_row_floats = 0, index_floats = 0, index_row_floats = 0;
    };
    std::vector<Layer> layers;
    int64_t rows_floats = 0;
};

Layout cache_layout(const ModelConfig& cfg, int64_t capacity, bool with_mtp, KvStore store) {
    const int n = cfg.n_layer + (with_mtp ? 1 : 0);
    const int64_t hd = cfg.head_dim, id = cfg.index_head_dim;
    const bool packed = KvCache::packs_index(cfg, store), packed_comp = KvCache::packs_comp(cfg, store);
    Layout lo;
    lo.layers.resize(n);
    for (int il = 0; il < n; ++il) {
        Layout::Layer& L = lo.layers[il];
        L.ratio = il < cfg.n_layer ? cfg.ratio(il) : 0;
        L.off_window = lo.rows_floats;
        lo.rows_floats += ((int64_t)cfg.window + kWindowStageRows) * hd;
        if (L.ratio > 0) {
            const int coff = L.ratio == 4 ? 2 : 1;
            L.state_floats = (int64_t)coff * L.ratio * coff * hd;
            L.off_state = lo.rows_floats;
            lo.rows_floats += 2 * L.state_floats;
            // Packed rows are whole 16-byte pieces, so a GPU's aligned reads stay inside the row.
            L.comp_row_floats = packed_comp ? kv_row_floats(hd, cfg.rope_dim) : hd;
            L.comp_floats = std::max<int64_t>(1, capacity / L.ratio) * L.comp_row_floats;
        }
        if (L.ratio == 4) {
            L.index_state_floats = 8 * 2 * id;
            L.off_index = lo.rows_floats;
            lo.rows_floats += 2 * L.index_state_floats;
            // Packed rows get 16 bytes of slack after the last one: a GPU reads them in aligned 16-byte
            // pieces, the last of which may run past the row's end.
            L.index_row_floats = packed ? fp4_row_floats(id) : id;
            L.index_floats = std::max<int64_t>(1, capacity / 4) * L.index_row_floats + (packed ? 4 : 0);
        }
    }
    return lo;
}

}  // namespace

bool KvCache::packs_comp(const ModelConfig& cfg, KvStore store) {
    return store == KvStore::quant_sim && cfg.rope_dim >= 0 && cfg.rope_dim < cfg.head_dim;
}

bool KvCache::packs_index(const ModelConfig& cfg, KvStore store) {
    return store == KvStore::quant_sim && cfg.index_head_dim > 0 && cfg.index_head_dim % kFp4Block == 0;
}

KvCache::KvCache(const ModelConfig& cfg, Backend& backend, int64_t capacity, bool with_mtp, KvStore store)
    : cfg_(cfg), backend_(backend), capacity_(capacity), with_mtp_(with_mtp), store_(store) {
    const Layout lo = cache_layout(cfg, capacity, with_mtp, store);
    layers_.resize(lo.layers.size());
    auto alloc = [&](int64_t floats) -> float* {
        if (floats <= 0) return nullptr;
        void* p = backend_.alloc((size_t)floats * sizeof(float));
        allocs_.push_back(p);
        bytes_ += (size_t)floats * sizeof(float);
        return static_cast<float*>(p);
    };
    unit_ = std::gcd((int64_t)cfg.head_dim, 2 * (int64_t)cfg.index_head_dim);
    rows_base_ = alloc(lo.rows_floats);
    backend_.fill(rows_base_, 0.0f, lo.rows_floats);  // windows start as zeros, never as stray bits
    for (size_t il = 0; il < lo.layers.size(); ++il) {
        const Layout::Layer& P = lo.layers[il];
        LayerCache& L = layers_[il];
        L.ratio = P.ratio;
        L.state_floats = P.state_floats;
        L.index_state_floats = P.index_state_floats;
        L.window = rows_base_ + P.off_window;
        if (L.ratio > 0) {
            L.state_kv = rows_base_ + P.off_state;
            L.state_sc = L.state_kv + L.state_floats;
            L.comp = alloc(P.comp_floats);
            L.comp_row_floats = P.comp_row_floats;
            L.comp_packed = packs_comp(cfg, store);
        }
        if (L.ratio == 4) {
            L.index_state_kv = rows_base_ + P.off_index;
            L.index_state_sc = L.index_state_kv + L.index_state_floats;
            L.index = alloc(P.index_floats);
            L.index_row_floats = P.index_row_floats;
            L.index_fp4 = packs_index(cfg, store);
        }
    }
    reset();
}

size_t KvCache::bytes_for(const ModelConfig& cfg, int64_t capacity, bool with_mtp, KvStore store) {
    const Layout lo = cache_layout(cfg, capacity, with_mtp, store);
    int64_t floats = lo.rows_floats;
    for (const Layout::Layer& L : lo.layers) floats += L.comp_floats + L.index_floats;
    return (size_t)floats * sizeof(float);
}

KvCache::TokenBytes KvCache::bytes_per_token(const ModelConfig& cfg, KvStore store) {
    TokenBytes t;
    const double entry = packs_comp(cfg, store) ? (double)kv_row_bytes(cfg.head_dim, cfg.rope_dim) : 4.0 * cfg.head_dim;
    const double key = packs_index(cfg, store) ? (double)fp4_row_bytes(cfg.index_head_dim) : 4.0 * cfg.index_head_dim;
    t.csa_entry = entry / 4;
    t.csa_index = key / 4;
    for (int il = 0; il < cfg.n_layer; ++il) {
        const int r = cfg.ratio(il);
        if (r == 4) t.all += t.csa_entry + t.csa_index;
        if (r > 0 && r != 4) {
            if (t.hca == 0) t.hca = entry / r;
            t.all += entry / r;
        }
    }
    return t;
}

KvCache::~KvCache() {
    for (void* p : allocs_) backend_.free(p);
    for (Journal& j : journal_) {
        if (j.saved) backend_.free(j.saved);
        if (j.index) backend_.free(j.index);
    }
}

void KvCache::reset() {
    pos_ = 0;
    mtp_pos_ = 0;
    for (Journal& j : journal_) j.pos = -1;
    for (auto& L : layers_) {
        if (L.state_kv) {
            backend_.fill(L.state_kv, 0.0f, L.state_floats);
            backend_.fill(L.state_sc, -INFINITY, L.state_floats);
        }
        if (L.index_state_kv) {
            backend_.fill(L.index_state_kv, 0.0f, L.index_state_floats);
            backend_.fill(L.index_state_sc, -INFINITY, L.index_state_floats);
        }
    }
}

template <class F>
void KvCache::for_each_region(F&& f) const {
    const int64_t win = (int64_t)cfg_.window * cfg_.head_dim;
    for (const auto& L : layers_) {
        f(L.window, win);
        if (L.state_kv) {
            f(L.state_kv, L.state_floats);
            f(L.state_sc, L.state_floats);
        }
        if (L.index_state_kv) {
            f(L.index_state_kv, L.index_state_floats);
            f(L.index_state_sc, L.index_state_floats);
        }
    }
}

namespace {

// The append-only rows visible at `pos` (compressed and indexer entries), per layer; main layers only
// (the MTP block is window-only).
template <class F>
void for_each_entry_region(const std::vector<LayerCache>& layers, const ModelConfig& cfg, int64_t pos, F&& f) {
    for (int il = 0; il < cfg.n_layer && il < (int)layers.size(); ++il) {
        const LayerCache& L = layers[il];
        if (L.comp) f(L.comp, (pos / L.ratio) * L.comp_row_floats);
        if (L.index) f(L.index, (pos / 4) * L.index_row_floats);
    }
}

}  // namespace

KvCache::Snapshot KvCache::snapshot(bool with_entries) const {
    Snapshot s;
    s.pos = pos_;
    s.mtp_pos = mtp_pos_;
    s.with_entries = with_entries;
    s.store = store_;
    int64_t total = 0;
    auto count = [&](const float*, int64_t n) { total += n; };
    for_each_region(count);
    if (with_entries) for_each_entry_region(layers_, cfg_, pos_, count);
    s.data.resize(total);
    int64_t off = 0;
    auto copy = [&](const float* p, int64_t n) {
        if (n > 0) backend_.download(s.data.data() + off, p, (size_t)n * sizeof(float));
        off += n;
    };
    for_each_region(copy);
    if (with_entries) for_each_entry_region(layers_, cfg_, pos_, copy);
    return s;
}

KvCache::Snapshot KvCache::add_entries(const Snapshot& small) const {
    Snapshot s = small;
    if (small.with_entries) return s;
    s.with_entries = true;
    int64_t extra = 0;
    for_each_entry_region(layers_, cfg_, small.pos, [&](const float*, int64_t n) { extra += n; });
    int64_t off = (int64_t)s.data.size();
    s.data.resize(s.data.size() + extra);
    for_each_entry_region(layers_, cfg_, small.pos, [&](const float* p, int64_t n) {
        if (n > 0) backend_.download(s.data.data() + off, p, (size_t)n * sizeof(float));
        off += n;
    });
    return s;
}

Status KvCache::restore(const Snapshot& s) {
    if (s.pos > capacity_) return make_error("cache snapshot position exceeds the cache capacity");
    if (s.with_entries && s.store != store_)
        return make_error("cache snapshot's entries are stored in another format than this cache's");
    int64_t total = 0;
    auto count = [&](const float*, int64_t n) { total += n; };
    for_each_region(count);
    if (s.with_entries) for_each_entry_region(layers_, cfg_, s.pos, count);
    if ((int64_t)s.data.size() != total) return make_error("cache snapshot does not match this cache's layout");
    int64_t off = 0;
    auto copy = [&](const float* p, int64_t n) {
        if (n > 0) backend_.upload(const_cast<float*>(p), s.data.data() + off, (size_t)n * sizeof(float));
        off += n;
    };
    for_each_region(copy);
    if (s.with_entries) for_each_entry_region(layers_, cfg_, s.pos, copy);
    pos_ = s.pos;
    mtp_pos_ = s.mtp_pos;
    for (Journal& j : journal_) j.pos = -1;
    return {};
}

int64_t kv_rollback_limit(const ModelConfig& cfg) {
    int64_t lim = cfg.window;
    for (int il = 0; il < cfg.n_layer; ++il)
        if (cfg.ratio(il) > 0) lim = std::min<int64_t>(lim, cfg.ratio(il));
    return lim;
}

// The unit rows a step of n tokens from position p0 overwrites at layer il, each tagged with the index (in
// the step) of the token whose rejection means the row goes back: its own ring slot and state slot; and when
// token jc completes a block of an overlapping compressor (which moves the current block's rows into the
// previous block's), the previous block's rows, tagged jc. With n <= rollback_limit() the rows of one layer
// are distinct, and a rejected token's slots hold, before the step, either a slot its block has not reached
// or a row the accepted tokens still need: both are right to put back.
void KvCache::unit_rows(int il, int64_t p0, int64_t n, std::vector<int32_t>& units, std::vector<int32_t>& tag) const {
    const LayerCache& L = layers_[il];
    auto put = [&](const float* row, int64_t floats, int32_t t) {
        const int64_t first = (row - rows_base_) / unit_;
        for (int64_t u = 0; u < floats / unit_; ++u) {
            units.push_back((int32_t)(first + u));
            tag.push_back(t);
        }
    };
    const int64_t hd = cfg_.head_dim;
    for (int64_t j = 0; j < n; ++j) put(L.window + ((p0 + j) % cfg_.window) * hd, hd, (int32_t)j);
    auto state = [&](const float* kv, const float* sc, int r, int64_t width, bool overlap) {
        const int off = overlap ? r : 0;
        int32_t completes = -1;
        for (int64_t j = 0; j < n; ++j) {
            const int64_t slot = off + (p0 + j) % r;
            put(kv + slot * width, width, (int32_t)j);
            put(sc + slot * width, width, (int32_t)j);
            if ((p0 + j + 1) % r == 0) completes = (int32_t)j;
        }
        if (overlap && completes >= 0) {
            put(kv, r * width, completes);
            put(sc, r * width, completes);
        }
    };
    if (L.ratio > 0) {
        const bool overlap = L.ratio == 4;
        state(L.state_kv, L.state_sc, L.ratio, (overlap ? 2 : 1) * hd, overlap);
    }
    if (L.index_state_kv) state(L.index_state_kv, L.index_state_sc, 4, 2 * (int64_t)cfg_.index_head_dim, true);
}

Status KvCache::save_for_rollback(int64_t n, bool mtp) {
    if (mtp && !with_mtp_) return make_error("save_for_rollback: the cache has no MTP block");
    if (n < 1 || n > rollback_limit())
        return make_error("save_for_rollback: " + std::to_string(n) + " tokens; a step can be undone for at most " +
                          std::to_string(rollback_limit()) + " (the window and the smallest compress ratio)");
    const int64_t p0 = mtp ? mtp_pos_ : pos_;
    if (p0 + n > capacity_) return make_error("save_for_rollback: the step does not fit the cache");
    Journal& j = journal_[mtp ? 1 : 0];
    j.units.clear();
    j.tag.clear();
    if (mtp) {
        unit_rows(cfg_.n_layer, p0, n, j.units, j.tag);
    } else {
        for (int il = 0; il < cfg_.n_layer; ++il) unit_rows(il, p0, n, j.units, j.tag);
    }
    const int64_t count = (int64_t)j.units.size();
    if (count > j.cap) {
        if (j.saved) backend_.free(j.saved);
        if (j.index) backend_.free(j.index);
        j.cap = count;
        j.saved = static_cast<float*>(backend_.alloc((size_t)count * unit_ * sizeof(float)));
        j.index = static_cast<int32_t*>(backend_.alloc((size_t)count * sizeof(int32_t)));
    }
    backend_.upload(j.index, j.units.data(), (size_t)count * sizeof(int32_t));
    backend_.gather_rows(j.saved, rows_base_, j.index, count, unit_);
    j.pos = p0;
    j.n = n;
    return {};
}

Status KvCache::rollback(int64_t k, bool mtp) {
    Journal& j = journal_[mtp ? 1 : 0];
    int64_t& pos = mtp ? mtp_pos_ : pos_;
    if (j.pos < 0) return make_error("rollback: no step was saved for rollback");
    if (pos != j.pos + j.n)
        return make_error("rollback: the cache is at position " + std::to_string(pos) + ", not just after the saved " +
                          std::to_string(j.n) + "-token step at " + std::to_string(j.pos));
    if (k < 0 || k > j.n) return make_error("rollback: " + std::to_string(k) + " of a " + std::to_string(j.n) + "-token step");
    if (k > 0) {
        std::vector<int32_t> idx(j.units.size());
        for (size_t u = 0; u < idx.size(); ++u) idx[u] = j.tag[u] >= j.n - k ? j.units[u] : -1;
        backend_.upload(j.index, idx.data(), idx.size() * sizeof(int32_t));
        backend_.scatter_rows(rows_base_, j.saved, j.index, (int64_t)idx.size(), unit_);
        pos -= k;
    }
    j.pos = -1;
    return {};
}

}  // namespace dsv4
