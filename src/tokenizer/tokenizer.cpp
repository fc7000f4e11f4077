// The Tokenizer: special-token splitting, then pre-tokenization and cached BPE; decoding (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/check.h"
#include "format/gguf.h"

namespace dsv4 {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
    DSV4_ASSIGN_OR_RETURN(Vocab vocab, Vocab::from_gguf(file));
    auto r = from_vocab(std::move(vocab));
    if (!r.ok()) return make_error(file.path() + ": " + r.error());
    return r;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(Vocab vocab) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre, PreTokenizer::create(vocab.pre()));
    std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(vocab), std::move(pre)));
    t->build_trie();
    return t;
}

Tokenizer::Tokenizer(Vocab vocab, std::unique_ptr<PreTokenizer> pre) : vocab_(std::move(vocab)), pre_(std::move(pre)) {}
Tokenizer::~Tokenizer() = default;

void Tokenizer::build_trie() {
    // Sorted texts make every node's subtree a contiguous range, so each node's edges can be laid out
    // together before its children are built.
    std::vector<std::pair<std::string_view, int32_t>> specials;
    for (const int32_t id : vocab_.special_ids()) specials.emplace_back(vocab_.text(id), id);
    std::sort(specials.begin(), specials.end());
    trie_.nodes.assign(1, SpecialTrie::Node{});
    trie_.edges.clear();
    for (const auto& s : specials) trie_.starts[static_cast<uint8_t>(s.first[0])] = true;

    struct Range {
        uint32_t node;
        size_t lo, hi, depth;  // specials[lo, hi) share their first `depth` bytes
    };
    std::vector<Range> pending{{0, 0, specials.size(), 0}};
    while (!pending.empty()) {
        const Range r = pending.back();
        pending.pop_back();
        size_t i = r.lo;
        if (i < r.hi && specials[i].first.size() == r.depth) {
            // Equal texts sort together; the lowest id among duplicates was first in the vocabulary.
            trie_.nodes[r.node].token = specials[i].second;
            while (i < r.hi && specials[i].first.size() == r.depth) ++i;
        }
        trie_.nodes[r.node].first_edge = static_cast<uint32_t>(trie_.edges.size());
        while (i < r.hi) {
            const uint8_t b = static_cast<uint8_t>(specials[i].first[r.depth]);
            size_t j = i;
            while (j < r.hi && static_cast<uint8_t>(specials[j].first[r.depth]) == b) ++j;
            const auto child = static_cast<uint32_t>(trie_.nodes.size());
            trie_.nodes.push_back(SpecialTrie::Node{});
            trie_.edges.push_back({b, child});
            ++trie_.nodes[r.node].n_edges;
            pending.push_back({child, i, j, r.depth + 1});
            i = j;
        }
    }
}

Tokenizer::SpecialTrie::Match Tokenizer::SpecialTrie::longest_at(std::string_view text, size_t pos) const {
    Match best{0, -1};
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        const Node& nd = nodes[node];
        const auto b = static_cast<uint8_t>(text[i]);
        uint32_t next = 0;
        for (uint32_t e = nd.first_edge; e < nd.first_edge + nd.n_edges; ++e) {
            if (edges[e].byte == b) {
                next = edges[e].child;
                break;
            }
        }
        if (next == 0) break;  // the root is never a child
        node = next;
        if (nodes[node].token >= 0) best = {i - pos + 1, nodes[node].token};
    }
    return best;
}

std::optional<int32_t> Tokenizer::find_special(std::string_view text) const {
    if (text.empty()) return std::nullopt;
    const SpecialTrie::Match m = trie_.longest_at(text, 0);
    if (m.len != text.size()) return std::nullopt;
    return m.token;
}

void Tokenizer::encode_plain(std::string_view text, std::vector<std::string_view>& words,
                             std::vector<int32_t>& out) const {
    if (text.empty()) return;
    words.clear();
    pre_->split(text, words);
    // Hash each word a few words ahead of its lookup and prefetch its cache slot (see BpeCache::prefetch).
    constexpr size_t kAhead = 8;
    uint64_t ring[kAhead];
    auto start_lookup = [&](size_t i) {
        ring[i % kAhead] = BpeCache::hash(words[i]);
        cache_.prefetch(ring[i % kAhead]);
    };
    for (size_t i = 0; i < std::min(kAhead, words.size()); ++i) start_lookup(i);
    for (size_t i = 0; i < words.size(); ++i) {
        const std::string_view w = words[i];
        const uint64_t h = ring[i % kAhead];
        if (i + kAhead < words.size()) start_lookup(i + kAhead);
        if (w.size() == 1) {
            out.push_back(vocab_.byte_token(static_cast<uint8_t>(w[0])));
            continue;
        }
        if (cache_.lookup(w, h, out)) continue;
        const size_t start = out.size();
        bpe_encode_word(vocab_, w, out);
        cache_.insert(w, h, out.data() + start, out.size() - start);
    }
}

void Tokenizer::encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
    std::vector<std::string_view> words;
    if (!parse_special || trie_.edges.empty()) {
        encode_plain(text, words, out);
        return;
    }
    size_t plain_start = 0;
    for (size_t pos = 0; pos < text.size();) {
        if (!trie_.starts[static_cast<uint8_t>(text[pos])]) {
            ++pos;
            continue;
        }
        const SpecialTrie::Match m = trie_.longest_at(text, pos);
        if (m.len == 0) {
            ++pos;
            continue;
        }
        encode_plain(text.substr(plain_start, pos - plain_start), words, out);
        out.push_back(m.token);
        pos += m.len;
        plain_start = pos;
    }
    encode_plain(text.substr(plain_start), words, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    encode(text, parse_special, out);
    return out;
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (!vocab_.valid(ids[i])) {
            return make_error("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary (0.." + std::to_string(vocab_.size() - 1) + ")");
        }
    }
    return {};
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    out.reserve(ids.size() * 4);
    for (const int32_t id : ids) {
        DSV4_CHECK_MSG(vocab_.valid(id), "token id %d outside the vocabulary", id);
        out += vocab_.bytes(id);
    }
    return out;
}

}  // namespace dsv4
