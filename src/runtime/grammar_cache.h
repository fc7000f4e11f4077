// Compiled grammars bound to the vocabulary, kept across requests: a request whose schema was seen before
// reuses the grammar and every token mask computed for it. Least recently used grammars go first. The
// vocabulary's byte trie is built once, on the first grammar. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "runtime/token_mask.h"

namespace dsv4 {

class GrammarCache {
public:
    explicit GrammarCache(const Tokenizer& tok, size_t capacity = 16) : tok_(tok), capacity_(capacity) {}

    // The grammar for `key`; on a miss `build` makes it (the same key must always build the same grammar).
    Result<std::shared_ptr<const TokenGrammar>> get(const std::string& key, const std::function<Result<Grammar>()>& build);

    size_t size() const;
    uint64_t hits() const;

private:
    const Tokenizer& tok_;
    size_t capacity_;
    mutable std::mutex mu_;
    std::shared_ptr<const TokenTrie> trie_;
    std::list<std::pair<std::string, std::shared_ptr<const TokenGrammar>>> lru_;  // most recent first
    std::unordered_map<std::string, decltype(lru_)::iterator> index_;
    uint64_t hits_ = 0;
};

}  // namespace dsv4
