// BPE merging over token ids, and the word cache (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <queue>

namespace dsv4 {

namespace {

// Below this many bytes the rescanning loop beats the heap: no allocations, and the whole word sits in
// a cache line or two.
constexpr size_t kShortWord = 32;

constexpr int32_t kNoMerge = INT32_MAX;

// Short words: keep the rank of each adjacent pair in an array, merge the best, and refresh only the
// two ranks that the merge changed.
void encode_short(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
    int32_t ids[kShortWord], ranks[kShortWord], merged[kShortWord];
    size_t n = word.size();
    for (size_t i = 0; i < n; ++i) ids[i] = vocab.byte_token(static_cast<uint8_t>(word[i]));
    auto rank_at = [&](size_t i) {
        const Vocab::Merge* m = vocab.find_merge(ids[i], ids[i + 1]);
        ranks[i] = m ? m->rank : kNoMerge;
        merged[i] = m ? m->id : -1;
    };
    for (size_t i = 0; i + 1 < n; ++i) rank_at(i);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; ++i) {
            if (ranks[i] < ranks[best]) best = i;  // strict: the leftmost of equal ranks wins
        }
        if (ranks[best] == kNoMerge) break;
        ids[best] = merged[best];
        for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
        for (size_t i = best + 1; i + 2 < n; ++i) ranks[i] = ranks[i + 1], merged[i] = merged[i + 1];
        --n;
        if (best > 0) rank_at(best - 1);
        if (best + 1 < n) rank_at(best);
    }
    out.insert(out.end(), ids, ids + n);
}

// Long words: symbols in a linked list, candidate merges in a min-heap by (rank, position). A candidate
// is stale when either of its symbols has changed since it was pushed; it is then skipped. Positions are
// the left symbol's original index, which keeps left-to-right order among equal ranks.
void encode_long(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
    struct Symbol {
        int32_t id, prev, next;
        bool alive;
    };
    struct Candidate {
        int32_t rank, pos;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const auto n = static_cast<int32_t>(word.size());
    std::vector<Symbol> sym(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
        sym[i] = Symbol{vocab.byte_token(static_cast<uint8_t>(word[i])), i - 1, i + 1 < n ? i + 1 : -1, true};
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](int32_t left) {
        const int32_t right = sym[left].next;
        if (right < 0) return;
        if (const Vocab::Merge* m = vocab.find_merge(sym[left].id, sym[right].id)) heap.push({m->rank, left});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        Symbol& left = sym[c.pos];
        if (!left.alive || left.next < 0) continue;
        Symbol& right = sym[left.next];
        const Vocab::Merge* m = vocab.find_merge(left.id, right.id);
        if (m == nullptr || m->rank != c.rank) continue;  // stale: one side changed since the push
        left.id = m->id;
        right.alive = false;
        left.next = right.next;
        if (left.next >= 0) sym[left.next].prev = c.pos;
        if (left.prev >= 0) push(left.prev);
        push(c.pos);
    }
    // The first symbol always survives: a merge keeps its left symbol.
    for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace

void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
    if (word.empty()) return;
    if (word.size() <= kShortWord) {
        encode_short(vocab, word, out);
    } else {
        encode_long(vocab, word, out);
    }
}

void bpe_encode_word_simple(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
    std::vector<int32_t> ids;
    for (const char c : word) ids.push_back(vocab.byte_token(static_cast<uint8_t>(c)));
    for (;;) {
        int32_t best_rank = kNoMerge, best_id = -1;
        size_t best = 0;
        for (size_t i = 0; i + 1 < ids.size(); ++i) {
            const Vocab::Merge* m = vocab.find_merge(ids[i], ids[i + 1]);
            if (m != nullptr && m->rank < best_rank) best_rank = m->rank, best_id = m->id, best = i;
        }
        if (best_id < 0) break;
        ids[best] = best_id;
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    out.insert(out.end(), ids.begin(), ids.end());
}

BpeCache::BpeCache(size_t n_slots) {
    size_t n = 2;
    while (n < n_slots) n <<= 1;
    set_mask_ = n / 2 - 1;
    slots_.assign(n, Slot{});
}

bool BpeCache::lookup(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
    if (word.empty() || word.size() > kMaxWordBytes) return false;
    const auto tag = static_cast<uint32_t>(h >> 32);
    const size_t base = 2 * set_of(h);
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t way = 0; way < 2; ++way) {
        const Slot& s = slots_[base + way];
        if (s.tag == tag && s.len == word.size() && std::memcmp(s.word, word.data(), word.size()) == 0) {
            out.insert(out.end(), s.tokens, s.tokens + s.n_tokens);
            return true;
        }
    }
    return false;
}

void BpeCache::insert(std::string_view word, uint64_t h, const int32_t* tokens, size_t n) const {
    if (word.empty() || word.size() > kMaxWordBytes || n > kMaxTokens) return;
    const size_t base = 2 * set_of(h);
    Slot fresh{};
    fresh.tag = static_cast<uint32_t>(h >> 32);
    fresh.len = static_cast<uint8_t>(word.size());
    fresh.n_tokens = static_cast<uint8_t>(n);
    std::memcpy(fresh.word, word.data(), word.size());
    std::copy(tokens, tokens + n, fresh.tokens);
    std::lock_guard<std::mutex> lock(mu_);
    slots_[base + 1] = slots_[base];
    slots_[base] = fresh;
}

void BpeCache::clear() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(slots_.begin(), slots_.end(), Slot{});
}

size_t BpeCache::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.len > 0; }));
}

}  // namespace dsv4
