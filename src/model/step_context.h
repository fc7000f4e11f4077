// Per-step state passed through the forward pass: sizes, positions, options and a scratch arena of backend
// buffers released when the step ends. Private to the model folder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/deepseek4.h"

namespace dsv4 {

// One sequence's rows within a step: rows [row0, row0+n) of every activation, at positions pos0.. of `cache`.
struct SeqSlice {
    int64_t row0 = 0;
    int64_t n = 0;
    int64_t pos0 = 0;
    KvCache* cache = nullptr;
    bool mtp = false;  // the MTP block's cache layer and position
};

// The cache buffers of one layer for each sequence of a step's decode group (Model::Ctx::group): pointer
// tables in backend memory, entry j for the group's row j.
struct GroupTables {
    float* const* window = nullptr;
    float* const* comp = nullptr;
    float* const* index = nullptr;
    float* const* state_kv = nullptr;
    float* const* state_sc = nullptr;
    float* const* index_state_kv = nullptr;
    float* const* index_state_sc = nullptr;
};

struct Model::Ctx {
    Backend& b;
    const ModelConfig& cfg;
    const StepOptions& opt;
    int64_t n = 0;                    // rows (tokens of all sequences) in this step
    const int32_t* pos = nullptr;     // [n] backend: each row's position
    const int32_t* tokens = nullptr;  // [n] backend
    std::vector<SeqSlice> seqs;
    // The decode group: with two or more single-token sequences, they take rows [0, group) and the
    // attention sublayer runs each of its per-sequence ops once for all of them (per-row cache tables);
    // 0 otherwise (every sequence by itself).
    int64_t group = 0;
    std::vector<GroupTables> group_tables;  // per layer, when group > 0
    std::vector<int64_t> group_pos;         // [group] the position of each group row
    KvStore group_store = KvStore::exact;   // when group > 0: how the group's caches store their entries
    std::vector<void*> scratch;            // released by release() or when the step ends
    std::vector<void*> persistent;         // i32_memo lists: kept for the whole step
    std::map<std::string, int32_t*> memo;  // see i32_memo

    Ctx(Backend& backend, const ModelConfig& c, const StepOptions& o) : b(backend), cfg(c), opt(o) {}
    ~Ctx() {
        for (void* p : scratch) b.free(p);
        for (void* p : persistent) b.free(p);
    }
    Ctx(const Ctx&) = delete;
    Ctx& operator=(const Ctx&) = delete;

    float* f32(int64_t count) {
        void* p = b.alloc((size_t)std::max<int64_t>(count, 1) * sizeof(float));
        scratch.push_back(p);
        return static_cast<float*>(p);
    }
    void* bytes(size_t n) {
        void* p = b.alloc(std::max<size_t>(n, 1));
        scratch.push_back(p);
        return p;
    }
    int32_t* i32(const std::vector<int32_t>& host, bool keep = false) {
        void* p = b.alloc(std::max<size_t>(host.size(), 1) * sizeof(int32_t));
        (keep ? persistent : scratch).push_back(p);
        if (!host.empty()) b.upload(p, host.data(), host.size() * sizeof(int32_t));
        return static_cast<int32_t*>(p);
    }
    // The scratch buffers allocated after mark() can go back to the backend with release(mark): a layer's
    // temporaries are freed when the layer ends, so a long prefill chunk needs one layer's worth, not the
    // sum over layers. Safe on every backend: ops run in issue order, so a later op that reuses the memory
    // runs after the ops that used it; branches (Backend::branch) must be joined first, which step graphs
    // check.
    size_t mark() const { return scratch.size(); }
    void release(size_t mark) {
        while (scratch.size() > mark) {
            b.free(scratch.back());
            scratch.pop_back();
        }
    }
    // An index list that depends only on positions (so is the same for every layer of a kind), built and
    // uploaded once per step under `key` and reused by the later layers.
    template <class Build>
    const int32_t* i32_memo(const std::string& key, Build&& build) {
        auto it = memo.find(key);
        if (it != memo.end()) return it->second;
        int32_t* p = i32(build(), true);
        memo.emplace(key, p);
        return p;
    }
    // A table of backend pointers uploaded to backend memory (kept for the whole step).
    void* const* ptr_table(const std::vector<void*>& host) {
        void* p = b.alloc(std::max<size_t>(host.size(), 1) * sizeof(void*));
        persistent.push_back(p);
        if (!host.empty()) b.upload(p, host.data(), host.size() * sizeof(void*));
        return static_cast<void* const*>(p);
    }
    int32_t* i32_uninit(int64_t count) {
        void* p = b.alloc((size_t)std::max<int64_t>(count, 1) * sizeof(int32_t));
        scratch.push_back(p);
        return static_cast<int32_t*>(p);
    }
    void trace(const char* name, int layer, const float* data, int64_t count) const {
        if (opt.trace) opt.trace(name, layer, data, count);
    }
};

// Fills c.group_tables and c.group_pos for c.group > 0: every layer's cache buffers of the group's sequences,
// uploaded as one table, and their positions (attention.cpp).
void build_group_tables(Model::Ctx& c);

}  // namespace dsv4
