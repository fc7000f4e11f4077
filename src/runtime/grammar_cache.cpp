// The grammar cache: an LRU list with an index.
#include "runtime/grammar_cache.h"

namespace dsv4 {

Result<std::shared_ptr<const TokenGrammar>> GrammarCache::get(const std::string& key,
                                                              const std::function<Result<Grammar>()>& build) {
    std::shared_ptr<const TokenTrie> trie;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            ++hits_;
            return it->second->second;
        }
        if (!trie_) trie_ = TokenTrie::from_tokenizer(tok_);
        trie = trie_;
    }
    auto g = build();
    if (!g.ok()) return std::move(g).take_error();
    auto tg = std::make_shared<const TokenGrammar>(std::move(*g), trie);
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;  // built meanwhile
    lru_.emplace_front(key, tg);
    index_[key] = lru_.begin();
    while (lru_.size() > capacity_) {
        index_.erase(lru_.back().first);
        lru_.pop_back();
    }
    return tg;
}

size_t GrammarCache::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return lru_.size();
}

uint64_t GrammarCache::hits() const {
    std::lock_guard<std::mutex> lk(mu_);
    return hits_;
}

}  // namespace dsv4
