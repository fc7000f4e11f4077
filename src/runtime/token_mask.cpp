// The trie walk and the mask cache.
#include "runtime/token_mask.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

constexpr size_t kMaxCachedMasks = 1024;  // per grammar (16 KiB each for a 129k vocabulary); cleared when full

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : n_vocab(token_bytes.size()) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < token_bytes.size(); ++i)
        if (!token_bytes[i].empty()) order.push_back(static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)] ||
               (token_bytes[static_cast<size_t>(a)] == token_bytes[static_cast<size_t>(b)] && a < b);
    });
    std::vector<uint32_t> path;  // path[d]: the node at depth d + 1 on the current branch
    const std::string* prev = nullptr;
    for (int32_t id : order) {
        const std::string& s = token_bytes[static_cast<size_t>(id)];
        size_t lcp = 0;
        if (prev)
            while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
        while (path.size() > lcp) {
            nodes[path.back()].end = static_cast<uint32_t>(nodes.size());
            path.pop_back();
        }
        for (size_t d = lcp; d < s.size(); ++d) {
            path.push_back(static_cast<uint32_t>(nodes.size()));
            nodes.push_back(Node{static_cast<uint8_t>(s[d]), static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)), 0,
                                 static_cast<uint32_t>(ids.size()), 0});
        }
        Node& leaf = nodes[path.back()];
        if (leaf.n_tokens == 0) leaf.first_token = static_cast<uint32_t>(ids.size());
        ids.push_back(id);
        ++leaf.n_tokens;
        max_depth = std::max(max_depth, s.size());
        prev = &s;
    }
    while (!path.empty()) {
        nodes[path.back()].end = static_cast<uint32_t>(nodes.size());
        path.pop_back();
    }
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tok) {
    std::vector<std::string> bytes(static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
        const TokenType t = tok.token_type(id);
        if (tok.is_special(id) || t == TokenType::unused || t == TokenType::unknown) continue;
        bytes[static_cast<size_t>(id)] = std::string(tok.token_text(id));
    }
    return std::make_shared<TokenTrie>(bytes);
}

TokenGrammar::TokenGrammar(Grammar g, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(g)), trie_(std::move(trie)) {}

void TokenGrammar::compute_mask(const GrammarState& s, TokenMask& out) const {
    const TokenTrie& t = *trie_;
    out.assign((t.n_vocab + 63) / 64, 0);
    if (s.dead()) return;
    GrammarRunner run(grammar_);
    std::vector<GrammarState> at(t.max_depth + 1);  // at[d]: the state after the current branch's first d bytes
    at[0] = s;
    const size_t n = t.nodes.size();
    for (size_t i = 0; i < n;) {
        const TokenTrie::Node& node = t.nodes[i];
        GrammarState& next = at[node.depth];
        run.advance(at[node.depth - 1u], node.byte, next);
        if (next.dead()) {
            i = node.end;
            continue;
        }
        for (uint32_t k = 0; k < node.n_tokens; ++k) mask_set(out, t.ids[node.first_token + k]);
        ++i;
    }
}

std::shared_ptr<const TokenMask> TokenGrammar::byte_mask(const GrammarState& s) const {
    std::string key;
    s.key(key);
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = cache_.find(key); it != cache_.end()) {
            ++stats_.hits;
            return it->second;
        }
        ++stats_.misses;
    }
    auto m = std::make_shared<TokenMask>();
    compute_mask(s, *m);
    std::lock_guard<std::mutex> lk(mu_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(std::move(key), m);
    return m;
}

TokenGrammar::CacheStats TokenGrammar::cache_stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar, std::vector<int32_t> end_tokens)
    : g_(std::move(grammar)), runner_(g_->grammar()), end_tokens_(std::move(end_tokens)) {
    state_ = runner_.initial();
}

std::span<const uint64_t> GrammarMatcher::mask() {
    std::shared_ptr<const TokenMask> m = g_->byte_mask(state_);
    mask_ = *m;
    if (accepting())
        for (int32_t t : end_tokens_)
            if (t >= 0 && static_cast<size_t>(t) < g_->trie().n_vocab) mask_set(mask_, t);
    return mask_;
}

bool GrammarMatcher::is_end_token(int32_t token) const {
    return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

Status GrammarMatcher::accept(int32_t token, std::string_view bytes) {
    if (is_end_token(token)) {
        if (!accepting()) return make_error("grammar: the end token " + std::to_string(token) + " before the value is complete");
        return {};
    }
    GrammarState s = state_;
    if (bytes.empty() || !runner_.advance(s, bytes))
        return make_error("grammar: token " + std::to_string(token) + " is not allowed here");
    state_ = std::move(s);
    return {};
}

bool GrammarMatcher::accepting() const { return runner_.accepting(state_); }
bool GrammarMatcher::finished() const { return runner_.finished(state_); }

}  // namespace dsv4
