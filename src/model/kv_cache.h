// Per-sequence attention state of every layer: the sliding-window ring, the append-only compressed and
// indexer entries, and the compressors' partial-block states. The position is the number of tokens seen;
// entry counts derive from it, so restoring a snapshot (windows + states + position) rewinds exactly, and a
// speculative step's rejected tokens are undone by putting back only the rows they overwrote (rollback).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

// Rows after each window ring where a step of at most this many tokens puts its own rows while it attends
// (the ring's slots still hold the older tokens those rows' queries read), so that the ring need not be copied.
constexpr int64_t kWindowStageRows = 8;

// The most tokens of one step a cache of model `cfg` can undo (KvCache::rollback): its window and every
// compress ratio of its layers bound it.
int64_t kv_rollback_limit(const ModelConfig& cfg);

// How a cache stores its append-only entries: exact keeps f32 rows; quant_sim keeps what the model's quant-sim
// rounding makes of them, as codes: the lightning indexer's keys as packed FP4 rows (ops/fp4_rows.h: 68 bytes a
// 128-value key instead of 512) and the compressed KV entries as packed FP8 rows (ops/kv_rows.h: 720 bytes a
// 512-value entry with 64 RoPE dims instead of 2,048). Both are lossless for that mode (the same logits bit for
// bit). A quant_sim cache serves quant-sim steps only; an exact one serves both.
enum class KvStore { exact, quant_sim };

// The store for caches whose steps all run with quant_sim as given (StepOptions::quant_sim).
inline KvStore kv_store_for(bool quant_sim) { return quant_sim ? KvStore::quant_sim : KvStore::exact; }

struct LayerCache {
    int ratio = 0;
    float* window = nullptr;        // [window, head_dim], token t at row t % window; then kWindowStageRows rows
    float* comp = nullptr;          // [capacity / ratio, comp_row_floats]
    int64_t comp_row_floats = 0;    // head_dim, or kv_row_floats(head_dim, rope_dim) when comp_packed
    bool comp_packed = false;       // packed FP8 entries (KvStore::quant_sim)
    float* index = nullptr;         // [capacity / 4, index_row_floats] (ratio 4 only)
    int64_t index_row_floats = 0;   // index_head_dim, or fp4_row_floats(index_head_dim) when index_fp4
    bool index_fp4 = false;         // packed FP4 keys (KvStore::quant_sim)
    float* state_kv = nullptr;      // [coff*ratio, coff*head_dim]
    float* state_sc = nullptr;
    float* index_state_kv = nullptr;  // [8, 2*index_head_dim]
    float* index_state_sc = nullptr;
    int64_t state_floats = 0, index_state_floats = 0;
};

class KvCache {
public:
    // Room for `capacity` tokens; `with_mtp` adds the MTP block's window cache (as layer n_layer).
    KvCache(const ModelConfig& cfg, Backend& backend, int64_t capacity, bool with_mtp,
            KvStore store = KvStore::exact);
    ~KvCache();
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    int64_t pos() const { return pos_; }
    int64_t capacity() const { return capacity_; }
    void set_pos(int64_t p) { pos_ = p; }
    LayerCache& layer(int il) { return layers_[il]; }
    bool has_mtp() const { return with_mtp_; }
    // Position of the MTP block's own window (it trails the main model by one token).
    int64_t mtp_pos() const { return mtp_pos_; }
    void set_mtp_pos(int64_t p) { mtp_pos_ = p; }

    // Forget everything: position 0 and fresh compressor states (kv 0, score -inf).
    void reset();
    size_t bytes() const { return bytes_; }
    // What bytes() of a cache constructed with these arguments is, without allocating it (memory planning).
    static size_t bytes_for(const ModelConfig& cfg, int64_t capacity, bool with_mtp, KvStore store = KvStore::exact);
    KvStore store() const { return store_; }
    // Bytes the append-only entries add per token of context (windows and compressor states are fixed): a CSA
    // layer's (ratio 4) compressed entry and indexer key every 4 tokens, an HCA layer's entry every `ratio`.
    struct TokenBytes {
        double csa_entry = 0, csa_index = 0;  // one CSA layer
        double hca = 0;                       // one HCA layer (the model's first HCA ratio)
        double all = 0;                       // every layer together
    };
    static TokenBytes bytes_per_token(const ModelConfig& cfg, KvStore store);
    // Whether the store keeps the indexer's keys packed for a model of this config (head dims of whole FP4
    // blocks; others keep f32 rows in either store).
    static bool packs_index(const ModelConfig& cfg, KvStore store);
    // Whether the store keeps the compressed KV entries packed (FP8 codes of the non-RoPE dims; a model whose
    // heads are all RoPE dims keeps f32 rows in either store).
    static bool packs_comp(const ModelConfig& cfg, KvStore store);

    // A copy of what is not append-only (windows, compressor states, positions): context-independent in
    // size, enough to rewind this same cache. With `with_entries` it also holds the compressed and indexer
    // entries up to the position, so it can be restored into another cache of the same layout (prefix reuse).
    struct Snapshot {
        int64_t pos = 0, mtp_pos = 0;
        bool with_entries = false;
        KvStore store = KvStore::exact;  // the entries' format
        std::vector<float> data;  // host copy
        size_t bytes() const { return data.size() * sizeof(float); }
    };
    Snapshot snapshot(bool with_entries = false) const;
    // A snapshot taken without entries, completed with this cache's entries up to its position (valid while
    // this cache has not been rewound below that position).
    Snapshot add_entries(const Snapshot& small) const;
    // Restore a snapshot; entries past the snapshot's position become invisible.
    Status restore(const Snapshot& s);

    // Undoing the last tokens of a step (speculative decoding). A step of n tokens at pos() (mtp_pos() for the
    // MTP block's part) overwrites, besides append-only entries that stay invisible below the position, the
    // window ring slots of its positions and the compressors' state rows of their slots (and, when one of
    // them completes a block of an overlapping compressor, the previous block's rows). save_for_rollback
    // copies exactly those rows aside on the backend before such a step; rollback(k) after it puts back the
    // ones the last k tokens changed and moves the position back by k, so the cache is bit for bit the cache
    // that only saw the first n - k. One saved step per part at a time; n at most rollback_limit().
    int64_t rollback_limit() const { return kv_rollback_limit(cfg_); }
    Status save_for_rollback(int64_t n, bool mtp = false);
    Status rollback(int64_t k, bool mtp = false);

private:
    template <class F>
    void for_each_region(F&& f) const;
    const ModelConfig& cfg_;
    Backend& backend_;
    int64_t capacity_ = 0;
    bool with_mtp_ = false;
    KvStore store_ = KvStore::exact;
    int64_t pos_ = 0, mtp_pos_ = 0;
    std::vector<LayerCache> layers_;
    std::vector<void*> allocs_;
    size_t bytes_ = 0;
    // The windows and compressor states of every layer lie in one block of `unit`-float rows, so that a
    // rollback's saved rows are one gather and one scatter over unit indices.
    float* rows_base_ = nullptr;
    int64_t unit_ = 0;
    struct Journal {
        float* saved = nullptr;      // [cap, unit] backend
        int32_t* index = nullptr;    // [cap] backend: unit index of each saved row (or -1)
        int64_t cap = 0;
        int64_t pos = -1, n = 0;     // the saved step (pos -1: none)
        std::vector<int32_t> units;  // host copy of the saved units, in save order
        std::vector<int32_t> tag;    // per saved unit: the step token whose rejection restores it (see .cpp)
    };
    Journal journal_[2];  // main layers, MTP block
    void unit_rows(int il, int64_t p0, int64_t n, std::vector<int32_t>& units, std::vector<int32_t>& tag) const;
};

}  // namespace dsv4
