// Prefix cache: KV-cache snapshots (windows, compressor states and entries) of token prefixes at block
// boundaries, so a request that shares a prefix with an earlier one restores that state instead of
// recomputing it. DeepSeek-V4's cache is hybrid (a sliding window plus recurrent compressor state), so
// reuse works only at exact snapshot positions, never by slicing a longer cache.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"

namespace dsv4 {

class PrefixCache {
public:
    PrefixCache(int64_t block, size_t max_bytes) : block_(block), max_bytes_(max_bytes) {}

    int64_t block() const { return block_; }
    // The snapshot of the longest cached prefix of `tokens` whose length is a multiple of the block and at most
    // `max_len`, or null. The pointer is valid until the next insert.
    const KvCache::Snapshot* lookup(std::span<const int32_t> tokens, int64_t max_len);
    // Store the snapshot of tokens (its length a multiple of the block, equal to snap.pos).
    void insert(std::span<const int32_t> tokens, KvCache::Snapshot snap);

    size_t size() const { return map_.size(); }
    size_t bytes() const { return bytes_; }
    uint64_t hits() const { return hits_; }
    uint64_t misses() const { return misses_; }

private:
    struct Entry {
        std::vector<int32_t> tokens;
        KvCache::Snapshot snap;
        std::list<uint64_t>::iterator lru;
    };
    // Hash of tokens[0:len) computed block by block (so every block-aligned prefix hash comes in one pass).
    static uint64_t extend(uint64_t h, std::span<const int32_t> block);
    void evict();

    int64_t block_;
    size_t max_bytes_;
    size_t bytes_ = 0;
    uint64_t hits_ = 0, misses_ = 0;
    std::unordered_map<uint64_t, Entry> map_;
    std::list<uint64_t> lru_;  // front = most recent
};

}  // namespace dsv4
