#include "runtime/prefix_cache.h"

#include <algorithm>

namespace dsv4 {

uint64_t PrefixCache::extend(uint64_t h, std::span<const int32_t> block) {
    // FNV-1a over the ids, chained from the previous block's hash.
    for (int32_t t : block) {
        uint32_t v = (uint32_t)t;
        for (int i = 0; i < 4; ++i) {
            h ^= (v >> (8 * i)) & 0xffu;
            h *= 1099511628211ull;
        }
    }
    return h;
}

const KvCache::Snapshot* PrefixCache::lookup(std::span<const int32_t> tokens, int64_t max_len) {
    const int64_t n_blocks = std::min<int64_t>((int64_t)tokens.size(), max_len) / block_;
    std::vector<uint64_t> hashes(n_blocks);
    uint64_t h = 1469598103934665603ull;
    for (int64_t b = 0; b < n_blocks; ++b) {
        h = extend(h, tokens.subspan(b * block_, block_));
        hashes[b] = h;
    }
    for (int64_t b = n_blocks - 1; b >= 0; --b) {
        auto it = map_.find(hashes[b]);
        if (it == map_.end()) continue;
        const int64_t len = (b + 1) * block_;
        if ((int64_t)it->second.tokens.size() != len ||
            !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens.begin()))
            continue;  // hash collision
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        ++hits_;
        return &it->second.snap;
    }
    ++misses_;
    return nullptr;
}

void PrefixCache::insert(std::span<const int32_t> tokens, KvCache::Snapshot snap) {
    if (tokens.empty() || (int64_t)tokens.size() % block_ != 0 || snap.pos != (int64_t)tokens.size()) return;
    if (snap.bytes() > max_bytes_) return;
    uint64_t h = 1469598103934665603ull;
    for (size_t b = 0; b < tokens.size(); b += block_) h = extend(h, tokens.subspan(b, block_));
    auto it = map_.find(h);
    if (it != map_.end()) {
        bytes_ -= it->second.snap.bytes();
        lru_.erase(it->second.lru);
        map_.erase(it);
    }
    lru_.push_front(h);
    bytes_ += snap.bytes();
    map_.emplace(h, Entry{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(snap), lru_.begin()});
    evict();
}

void PrefixCache::evict() {
    while (bytes_ > max_bytes_ && !lru_.empty()) {
        const uint64_t h = lru_.back();
        lru_.pop_back();
        auto it = map_.find(h);
        if (it == map_.end()) continue;
        bytes_ -= it->second.snap.bytes();
        map_.erase(it);
    }
}

}  // namespace dsv4
