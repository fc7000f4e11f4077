// Byte-level BPE over one pre-tokenized word: start from the word's byte tokens and repeatedly merge the
// adjacent pair of lowest merge rank (leftmost on ties) until no pair has a merge. Working on token ids
// of raw bytes means the byte-level text of the word is never built. Also a bounded, thread-safe cache of
// recently encoded words, since real text repeats its words a lot.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace dsv4 {

// Appends the tokens of `word` (raw bytes) to `out`. Uses a priority queue of candidate merges, so a long
// word costs O(n log n).
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out);

// The textbook form: rescan the whole word for the best pair after every merge, O(n^2). The oracle that
// tests compare bpe_encode_word against; also what short words use, where it is faster.
void bpe_encode_word_simple(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out);

// Word -> tokens cache with two generations: lookups search the current one, then the previous one
// (promoting what they find); when the current one fills up it becomes the previous one and the oldest is
// dropped. That approximates LRU with bounded memory (at most 2 * capacity words) and O(1) work.
class BpeCache {
public:
    explicit BpeCache(size_t capacity = 32768, size_t max_word_bytes = 64)
        : capacity_(capacity), max_word_bytes_(max_word_bytes) {}

    // Appends the cached tokens of `word` to `out` and returns true, or returns false.
    bool lookup(std::string_view word, std::vector<int32_t>& out) const;
    void insert(std::string_view word, const int32_t* tokens, size_t n) const;
    void clear() const;
    size_t size() const;

private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    using Map = std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>>;

    size_t capacity_, max_word_bytes_;
    // The cache is an implementation detail of const encoding; the mutex makes it safe across threads.
    mutable std::mutex mu_;
    mutable Map current_, previous_;
};

}  // namespace dsv4
