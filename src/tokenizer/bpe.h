// Byte-level BPE over one pre-tokenized word: start from the word's byte tokens and repeatedly merge the
// adjacent pair of lowest merge rank (leftmost on ties) until no pair has a merge. Working on token ids
// of raw bytes means the byte-level text of the word is never built. Also a fixed-size, thread-safe cache
// of recently encoded words, since real text repeats its words a lot.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace dsv4 {

// Appends the tokens of `word` (raw bytes) to `out`. Uses a priority queue of candidate merges, so a long
// word costs O(n log n).
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out);

// The textbook form: rescan the whole word for the best pair after every merge, O(n^2). The oracle that
// tests compare bpe_encode_word against; also what short words use, where it is faster.
void bpe_encode_word_simple(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out);

// Word -> tokens cache: a fixed table of 64-byte slots (one cache line each) holding a short word and its
// tokens inline, two-way set associative; a new word takes the first way of its set and moves the old one
// to the second. Memory is fixed at construction, and a lookup touches one line. Words longer than
// kMaxWordBytes or with more than kMaxTokens tokens are not cached (they are rare, and long ones are the
// cheapest per byte to encode anyway). Thread-safe.
class BpeCache {
public:
    static constexpr size_t kMaxWordBytes = 26;
    static constexpr size_t kMaxTokens = 8;

    // `n_slots` is rounded up to a power of two (at least 2).
    explicit BpeCache(size_t n_slots = 16384);

    static uint64_t hash(std::string_view word) { return std::hash<std::string_view>{}(word); }
    // Start loading the slots a later lookup of a word with this hash will read. The table is larger than
    // a core's L2 cache, so a lookup is mostly one cache miss; encoding prefetches a few words ahead to
    // overlap those misses with the work on the words before.
    void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[2 * set_of(hash)]); }

    // Appends the cached tokens of `word` to `out` and returns true, or returns false. `hash` is hash(word).
    bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
    bool lookup(std::string_view word, std::vector<int32_t>& out) const { return lookup(word, hash(word), out); }
    void insert(std::string_view word, uint64_t hash, const int32_t* tokens, size_t n) const;
    void insert(std::string_view word, const int32_t* tokens, size_t n) const { insert(word, hash(word), tokens, n); }
    void clear() const;
    size_t size() const;  // words held

private:
    struct alignas(64) Slot {
        uint32_t tag;      // high bits of the word's hash, for a quick reject
        uint8_t len;       // word bytes; 0 marks an empty slot (empty words are never cached)
        uint8_t n_tokens;
        char word[kMaxWordBytes];
        int32_t tokens[kMaxTokens];
    };
    static_assert(sizeof(Slot) == 64, "a cache slot is one cache line");

    size_t set_of(uint64_t hash) const { return static_cast<size_t>(hash) & set_mask_; }

    size_t set_mask_;
    // The cache is an implementation detail of const encoding; the mutex makes it safe across threads.
    mutable std::mutex mu_;
    mutable std::vector<Slot> slots_;  // set s holds ways slots_[2s] and slots_[2s + 1]
};

}  // namespace dsv4
