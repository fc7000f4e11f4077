// KvCache allocation, reset and snapshots.
#include "model/kv_cache.h"

#include <cmath>

namespace dsv4 {

KvCache::KvCache(const ModelConfig& cfg, Backend& backend, int64_t capacity, bool with_mtp)
    : cfg_(cfg), backend_(backend), capacity_(capacity), with_mtp_(with_mtp) {
    const int n = cfg.n_layer + (with_mtp ? 1 : 0);
    layers_.resize(n);
    auto alloc = [&](int64_t floats) -> float* {
        if (floats <= 0) return nullptr;
        void* p = backend_.alloc((size_t)floats * sizeof(float));
        allocs_.push_back(p);
        bytes_ += (size_t)floats * sizeof(float);
        return static_cast<float*>(p);
    };
    const int64_t hd = cfg.head_dim;
    for (int il = 0; il < n; ++il) {
        LayerCache& L = layers_[il];
        L.ratio = il < cfg.n_layer ? cfg.ratio(il) : 0;
        L.window = alloc((int64_t)cfg.window * hd);
        if (L.ratio > 0) {
            const int coff = L.ratio == 4 ? 2 : 1;
            L.comp = alloc(std::max<int64_t>(1, capacity / L.ratio) * hd);
            L.state_floats = (int64_t)coff * L.ratio * coff * hd;
            L.state_kv = alloc(L.state_floats);
            L.state_sc = alloc(L.state_floats);
        }
        if (L.ratio == 4) {
            const int64_t id = cfg.index_head_dim;
            L.index = alloc(std::max<int64_t>(1, capacity / 4) * id);
            L.index_state_floats = 8 * 2 * id;
            L.index_state_kv = alloc(L.index_state_floats);
            L.index_state_sc = alloc(L.index_state_floats);
        }
    }
    reset();
}

KvCache::~KvCache() {
    for (void* p : allocs_) backend_.free(p);
}

void KvCache::reset() {
    pos_ = 0;
    mtp_pos_ = 0;
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
        if (L.comp) f(L.comp, (pos / L.ratio) * cfg.head_dim);
        if (L.index) f(L.index, (pos / 4) * cfg.index_head_dim);
    }
}

}  // namespace

KvCache::Snapshot KvCache::snapshot(bool with_entries) const {
    Snapshot s;
    s.pos = pos_;
    s.mtp_pos = mtp_pos_;
    s.with_entries = with_entries;
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
    return {};
}

}  // namespace dsv4
