// The trie walk and the mask cache.
#include "runtime/token_mask.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

constexpr size_t kMaxCachedMasks = 512;  // per grammar (16 KiB each for a 129k vocabulary: 8 MiB); cleared when full

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
        if (t == TokenType::unused || t == TokenType::unknown) continue;
        // Special tokens stay out of every value, except the pieces of tool-call markup (a vocabulary may
        // hold "｜DSML｜" as one token) that the tool-call grammar spells.
        if (tok.is_special(id) && tok.token_text(id).find(chat::kDsml) == std::string_view::npos) continue;
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

GrammarMatcher::GrammarMatcher(GrammarConstraint constraint, std::vector<int32_t> end_tokens)
    : c_(std::move(constraint)), runner_(c_.grammar->grammar()), end_tokens_(std::move(end_tokens)) {
    active_ = c_.trigger.empty();
    state_ = runner_.initial();
    if (active_) (void)runner_.advance(state_, c_.prefix);  // a prefix the grammar rejects leaves nothing allowed
}

std::span<const uint64_t> GrammarMatcher::mask() {
    const size_t n_vocab = c_.grammar->trie().n_vocab;
    if (!active_) {
        mask_.assign((n_vocab + 63) / 64, ~uint64_t{0});
        if (n_vocab % 64) mask_.back() = (uint64_t{1} << (n_vocab % 64)) - 1;
        if (c_.trigger_required)
            for (int32_t t : end_tokens_)
                if (t >= 0 && static_cast<size_t>(t) < n_vocab) mask_[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (t & 63));
    } else {
        std::shared_ptr<const TokenMask> m = c_.grammar->byte_mask(state_);
        mask_ = *m;
        if (accepting())
            for (int32_t t : end_tokens_)
                if (t >= 0 && static_cast<size_t>(t) < n_vocab) mask_set(mask_, t);
    }
    for (int32_t t : banned_)
        if (t >= 0 && static_cast<size_t>(t) < n_vocab) mask_[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (t & 63));
    return mask_;
}

void GrammarMatcher::ban(int32_t token) { banned_.push_back(token); }

bool GrammarMatcher::is_end_token(int32_t token) const {
    return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

Status GrammarMatcher::accept(int32_t token, std::string_view bytes) {
    if (is_end_token(token)) {
        if (active_ ? !accepting() : c_.trigger_required)
            return make_error("grammar: the end token " + std::to_string(token) + " before the value is complete");
        banned_.clear();
        return {};
    }
    if (!active_) {
        std::string text = tail_;
        text.append(bytes);
        const size_t at = text.find(c_.trigger);
        if (at == std::string::npos) {
            const size_t keep = std::min(text.size(), c_.trigger.size() - 1);
            tail_ = text.substr(text.size() - keep);
            banned_.clear();
            return {};
        }
        GrammarState s = runner_.initial();
        (void)runner_.advance(s, c_.prefix);
        const std::string_view rest = std::string_view(text).substr(at + c_.trigger.size());
        if (!runner_.advance(s, rest))
            return make_error("grammar: token " + std::to_string(token) + " ends the trigger with bytes the value cannot start with");
        state_ = std::move(s);
        active_ = true;
        tail_.clear();
        banned_.clear();
        return {};
    }
    GrammarState s = state_;
    if (bytes.empty() || !runner_.advance(s, bytes))
        return make_error("grammar: token " + std::to_string(token) + " is not allowed here");
    state_ = std::move(s);
    banned_.clear();
    return {};
}

bool GrammarMatcher::accepting() const { return active_ && runner_.accepting(state_); }
bool GrammarMatcher::finished() const { return active_ && runner_.finished(state_); }

}  // namespace dsv4
