// The trie walk and the mask cache.
#include "runtime/token_mask.h"

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <unordered_map>

#include "core/check.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

constexpr size_t kMaxCachedMasks = 512;  // per grammar (16 KiB each for a 129k vocabulary: 8 MiB); cleared when full
constexpr size_t kMaxListed = 2048;      // distances listed per mask beside the common one (16 KiB at most)

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

namespace {

// A repeat whose items are single bytes of one set.
bool byte_repeat(const Grammar& g, const GrammarNode& n) {
    return n.kind == GrammarNodeKind::repeat && n.items >= 0 &&
           g.nodes[static_cast<size_t>(n.items)].kind == GrammarNodeKind::byte_set;
}

// Adds, for every length-bounded string body and every repeat of single bytes with an upper bound above its
// lower one, a copy without the upper bound; twin[node] names it. (With equal bounds no two counts share a
// view: the copy keeps the count below the lower bound.)
Grammar with_unbounded_twins(Grammar g, std::vector<int32_t>& twin) {
    const size_t n = g.nodes.size();
    twin.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
        const GrammarNode& node = g.nodes[i];
        if (node.kind != GrammarNodeKind::repeat || node.max_items < 0) continue;
        if (!node.string_chars && !(byte_repeat(g, node) && node.max_items > node.min_items)) continue;
        GrammarNode copy = node;
        copy.max_items = -1;
        twin[i] = g.add(std::move(copy));
    }
    twin.resize(g.nodes.size(), -1);
    return g;
}

// The characters a token writes into a string body from a character boundary before a closing quote: raw
// UTF-8 characters, short escapes and \uXXXX count one each, a character the token only begins counts too.
// (Only tokens the grammar accepts are counted against a budget, so malformed bytes need no care.)
int32_t string_chars_before_quote(std::string_view b) {
    int32_t n = 0;
    for (size_t i = 0; i < b.size();) {
        const auto c = static_cast<uint8_t>(b[i]);
        if (c == '"') break;
        ++n;
        if (c == '\\')
            i += (i + 1 < b.size() && b[i + 1] == 'u') ? 6 : 2;
        else
            i += c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    }
    return n;
}

// The leading bytes of `b` that are in `set` (bit c of set[c / 64]).
int32_t leading_bytes_in(std::string_view b, const uint64_t* set) {
    int32_t n = 0;
    while (static_cast<size_t>(n) < b.size()) {
        const auto c = static_cast<uint8_t>(b[static_cast<size_t>(n)]);
        if (!((set[c >> 6] >> (c & 63)) & 1)) break;
        ++n;
    }
    return n;
}

// [r] = the tokens for which items(token bytes) <= r, for r below min(bound + 1, the most any token writes):
// past that every token stays within the bound.
std::vector<TokenMask> within_table(const TokenTrie& t, int32_t bound,
                                    const std::function<int32_t(std::string_view)>& items) {
    std::vector<int32_t> count(t.n_vocab, 0);
    int32_t most = 0;
    std::string path;
    for (const TokenTrie::Node& node : t.nodes) {
        path.resize(node.depth - 1u);
        path.push_back(static_cast<char>(node.byte));
        if (node.n_tokens == 0) continue;
        const int32_t c = items(path);
        most = std::max(most, c);
        for (uint32_t k = 0; k < node.n_tokens; ++k) count[static_cast<size_t>(t.ids[node.first_token + k])] = c;
    }
    const int32_t n_masks = std::min(bound + 1, most);
    std::vector<TokenMask> table(static_cast<size_t>(std::max(n_masks, 0)), TokenMask((t.n_vocab + 63) / 64, 0));
    for (size_t id = 0; id < t.n_vocab; ++id)
        if (count[id] < n_masks) mask_set(table[static_cast<size_t>(count[id])], static_cast<int32_t>(id));
    for (size_t r = 1; r < table.size(); ++r)
        for (size_t w = 0; w < table[r].size(); ++w) table[r][w] |= table[r - 1][w];
    return table;
}

}  // namespace

TokenGrammar::TokenGrammar(Grammar g, std::shared_ptr<const TokenTrie> trie)
    : grammar_(with_unbounded_twins(std::move(g), twin_)), trie_(std::move(trie)), distance_(grammar_, *trie_) {
    // One table per kind of item: string characters, or the bytes of one set; each up to its largest bound.
    struct Kind {
        bool string_chars;
        std::array<uint64_t, 4> set;  // zero for string characters
        int32_t bound;
    };
    std::vector<Kind> kinds;
    within_of_.assign(twin_.size(), -1);
    for (size_t i = 0; i < twin_.size(); ++i) {
        if (twin_[i] < 0) continue;
        const GrammarNode& n = grammar_.nodes[i];
        std::array<uint64_t, 4> set = {};
        if (!n.string_chars) std::copy_n(grammar_.nodes[static_cast<size_t>(n.items)].bytes, 4, set.begin());
        auto k = std::find_if(kinds.begin(), kinds.end(),
                              [&](const Kind& x) { return x.string_chars == n.string_chars && x.set == set; });
        if (k == kinds.end()) k = kinds.insert(kinds.end(), Kind{n.string_chars, set, 0});
        k->bound = std::max(k->bound, n.max_items);
        within_of_[i] = static_cast<int32_t>(k - kinds.begin());
    }
    for (const Kind& k : kinds)
        within_.push_back(k.string_chars ? within_table(*trie_, k.bound, string_chars_before_quote)
                                         : within_table(*trie_, k.bound, [&k](std::string_view b) {
                                               return leading_bytes_in(b, k.set.data());
                                           }));
}

bool TokenGrammar::unbounded_view(const GrammarState& s, GrammarState& view, const TokenMask*& within) const {
    if (twin_.empty() || s.ends.size() != 1 || s.frames.empty()) return false;
    const GrammarFrame& top = s.frames.back();
    const int32_t twin = twin_[static_cast<size_t>(top.node)];
    if (twin < 0) return false;
    const GrammarNode& n = grammar_.nodes[static_cast<size_t>(top.node)];
    if (!n.string_chars && !follow_excludes_items(s)) return false;
    const std::vector<TokenMask>& table = within_[static_cast<size_t>(within_of_[static_cast<size_t>(top.node)])];
    const int32_t left = n.max_items - top.a;
    within = static_cast<size_t>(left) < table.size() ? &table[static_cast<size_t>(left)] : nullptr;
    view = s;
    view.frames.back().node = twin;
    view.frames.back().a = std::min(top.a, n.min_items);  // an unbounded repeat holds its count at min_items
    return true;
}

bool TokenGrammar::follow_excludes_items(const GrammarState& s) const {
    const GrammarNode& n = grammar_.nodes[static_cast<size_t>(s.frames.back().node)];
    GrammarState full = s;
    full.frames.back().a = n.max_items;
    std::string key;
    full.key(key);
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = follow_clear_.find(key); it != follow_clear_.end()) return it->second;
    }
    const uint64_t* set = grammar_.nodes[static_cast<size_t>(n.items)].bytes;
    GrammarRunner run(grammar_);
    GrammarState next;
    bool clear = true;
    for (int c = 0; c < 256 && clear; ++c) {
        if (!((set[c >> 6] >> (c & 63)) & 1)) continue;
        run.advance(full, static_cast<uint8_t>(c), next);
        clear = next.dead();
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (follow_clear_.size() >= kMaxCachedMasks) follow_clear_.clear();
    follow_clear_.emplace(std::move(key), clear);
    return clear;
}

void TokenGrammar::keep_within(const TokenMask* within, TokenMask& out) {
    if (!within) return;
    for (size_t i = 0; i < out.size(); ++i) out[i] &= (*within)[i];
}

void TokenGrammar::walk(const GrammarState& s, int32_t limit, Entry& out) const {
    const TokenTrie& t = *trie_;
    out.mask.assign((t.n_vocab + 63) / 64, 0);
    out.widest = out.common = 0;
    out.listed = true;
    out.other.clear();
    if (s.dead()) return;
    const bool distances = distance_.available();
    thread_local std::vector<uint64_t> found;  // (distance << 32 | token) of every allowed token
    found.clear();
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
        if (node.n_tokens > 0) {
            const int32_t d = distances ? distance_.state(next) : 0;
            if (limit < 0 || d <= limit)
                for (uint32_t k = 0; k < node.n_tokens; ++k) {
                    const int32_t id = t.ids[node.first_token + k];
                    mask_set(out.mask, id);
                    if (limit < 0 && distances) found.push_back(uint64_t(uint32_t(d)) << 32 | uint32_t(id));
                }
        }
        ++i;
    }
    if (found.empty()) return;
    // The most common distance stays implicit; the rest are listed while few.
    std::unordered_map<int32_t, uint32_t> counts;
    for (uint64_t v : found) {
        const auto d = static_cast<int32_t>(v >> 32);
        ++counts[d];
        out.widest = std::max(out.widest, d);
    }
    uint32_t most = 0;
    for (auto [d, c] : counts)
        if (c > most || (c == most && d < out.common)) most = c, out.common = d;
    if (found.size() - most > kMaxListed) {
        out.listed = false;
        return;
    }
    for (uint64_t v : found)
        if (static_cast<int32_t>(v >> 32) != out.common) out.other.push_back(v);
    std::sort(out.other.begin(), out.other.end());
}

void TokenGrammar::compute_mask(const GrammarState& s, TokenMask& out) const {
    Entry e;
    walk(s, -1, e);
    out = std::move(e.mask);
}

void TokenGrammar::compute_mask(const GrammarState& s, int32_t limit, TokenMask& out) const {
    Entry e;
    walk(s, std::max(limit, 0), e);
    out = std::move(e.mask);
}

std::shared_ptr<const TokenGrammar::Entry> TokenGrammar::entry(const GrammarState& s, const std::string& key) const {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = cache_.find(key); it != cache_.end()) {
            ++stats_.hits;
            return it->second;
        }
        ++stats_.misses;
    }
    auto e = std::make_shared<Entry>();
    walk(s, -1, *e);
    std::lock_guard<std::mutex> lk(mu_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(key, e);
    return e;
}

std::shared_ptr<const TokenMask> TokenGrammar::byte_mask(const GrammarState& s) const {
    GrammarState view;
    const TokenMask* within = nullptr;
    const bool bounded = unbounded_view(s, view, within);
    std::string key;
    (bounded ? view : s).key(key);
    std::shared_ptr<const Entry> e = entry(bounded ? view : s, key);
    if (!within) return std::shared_ptr<const TokenMask>(e, &e->mask);
    auto kept = std::make_shared<TokenMask>(e->mask);
    keep_within(within, *kept);
    return kept;
}

void TokenGrammar::budget_mask(const GrammarState& s, int32_t limit, TokenMask& out) const {
    GrammarState view;
    const TokenMask* within = nullptr;
    if (unbounded_view(s, view, within)) {
        budget_mask(view, limit, out);
        keep_within(within, out);
        return;
    }
    std::string key;
    s.key(key);
    std::shared_ptr<const Entry> e = entry(s, key);
    if (!distance_.available() || limit >= e->widest) {
        out = e->mask;
        return;
    }
    const auto dist = [](uint64_t v) { return static_cast<int32_t>(v >> 32); };
    const auto id = [](uint64_t v) { return static_cast<int32_t>(v & 0xFFFFFFFFu); };
    if (e->listed) {
        if (limit >= e->common) {
            out = e->mask;
            for (auto it = e->other.rbegin(); it != e->other.rend() && dist(*it) > limit; ++it)
                out[static_cast<size_t>(id(*it)) >> 6] &= ~(uint64_t{1} << (id(*it) & 63));
        } else {
            out.assign(e->mask.size(), 0);
            for (uint64_t v : e->other) {
                if (dist(v) > limit) break;
                mask_set(out, id(v));
            }
        }
        return;
    }
    // Too many distances to list: the limited walk, cached under the state and the limit (a key of a length
    // no state key has, so the two never collide).
    key.push_back('\xff');
    key.append(reinterpret_cast<const char*>(&limit), sizeof(limit));
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (auto it = cache_.find(key); it != cache_.end()) {
            ++stats_.hits;
            out = it->second->mask;
            return;
        }
        ++stats_.misses;
    }
    auto limited = std::make_shared<Entry>();
    walk(s, limit, *limited);
    out = limited->mask;
    std::lock_guard<std::mutex> lk(mu_);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(std::move(key), std::move(limited));
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
    const GrammarDistance& dist = c_.grammar->distance();
    if (!active_ && dist.available()) {
        GrammarState s = runner_.initial();
        start_distance_ = runner_.advance(s, c_.prefix) ? dist.state(s) : GrammarDistance::kUnreachable;
        trigger_spell_ = dist.spell_suffixes(c_.trigger);
    }
}

void GrammarMatcher::apply_bans() {
    const size_t n_vocab = c_.grammar->trie().n_vocab;
    for (int32_t t : banned_)
        if (t >= 0 && static_cast<size_t>(t) < n_vocab)
            mask_[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (t & 63));
}

bool GrammarMatcher::mask_empty() const {
    return std::all_of(mask_.begin(), mask_.end(), [](uint64_t w) { return w == 0; });
}

void GrammarMatcher::trigger_mask(int32_t limit) {
    // The tail may end with several prefixes of the trigger; from each, the tokens that spell the trigger on.
    const TokenTrie& t = c_.grammar->trie();
    const std::string& trig = c_.trigger;
    mask_.assign((t.n_vocab + 63) / 64, 0);
    for (size_t k = 0; k < trig.size(); ++k) {
        if (k > tail_.size() || tail_.compare(tail_.size() - k, k, trig, 0, k) != 0) continue;
        size_t i = 0, end = t.nodes.size();  // the children of the current trie node: [i, end)
        for (size_t j = k; j < trig.size(); ++j) {
            while (i < end && t.nodes[i].byte != static_cast<uint8_t>(trig[j])) i = t.nodes[i].end;
            if (i >= end) break;
            const TokenTrie::Node& node = t.nodes[i];
            const int64_t after =
                static_cast<int64_t>(start_distance_) + (j + 1 == trig.size() ? 0 : trigger_spell_[j + 1]);
            if (after <= limit)
                for (uint32_t m = 0; m < node.n_tokens; ++m) mask_set(mask_, t.ids[node.first_token + m]);
            end = node.end;
            ++i;
        }
    }
}

std::span<const uint64_t> GrammarMatcher::mask(int64_t tokens_left) {
    const size_t n_vocab = c_.grammar->trie().n_vocab;
    // The distance a token may leave: the draws after it, less one for the end token.
    const int64_t reserve = end_tokens_.empty() ? 0 : 1;
    const bool budget = tokens_left >= 0 && c_.grammar->distance().available();
    limit_ =
        budget ? static_cast<int32_t>(std::clamp<int64_t>(tokens_left - 1 - reserve, -1, GrammarDistance::kUnreachable))
               : -1;
    auto unlimited = [&] {
        if (!active_) {
            mask_.assign((n_vocab + 63) / 64, ~uint64_t{0});
            if (n_vocab % 64) mask_.back() = (uint64_t{1} << (n_vocab % 64)) - 1;
            if (c_.trigger_required)
                for (int32_t t : end_tokens_)
                    if (t >= 0 && static_cast<size_t>(t) < n_vocab)
                        mask_[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (t & 63));
        } else {
            mask_ = *c_.grammar->byte_mask(state_);
            if (accepting())
                for (int32_t t : end_tokens_)
                    if (t >= 0 && static_cast<size_t>(t) < n_vocab) mask_set(mask_, t);
        }
        apply_bans();
    };
    if (!budget) {
        unlimited();
        return mask_;
    }
    if (!active_) {
        // Free text is fine while the whole trigger and the value still fit after the token (a token that
        // completes the trigger is checked by accept); past that, only spelling the trigger is.
        if (c_.trigger_required && static_cast<int64_t>(trigger_spell_[0]) + start_distance_ > limit_) {
            trigger_mask(limit_);
            apply_bans();
            if (!mask_empty()) return mask_;
            limit_ = -1;  // below the minimum: as without a budget, accept included
        }
        unlimited();
        return mask_;
    }
    if (limit_ >= 0) {
        c_.grammar->budget_mask(state_, limit_, mask_);
    } else {
        mask_.assign((n_vocab + 63) / 64, 0);
    }
    if (accepting())
        for (int32_t t : end_tokens_)
            if (t >= 0 && static_cast<size_t>(t) < n_vocab) mask_set(mask_, t);
    apply_bans();
    if (mask_empty()) {
        // The budget is below what the value needs (the caller did not check constraint_min_tokens): decode as
        // without it, to be cut at the limit.
        limit_ = -1;
        unlimited();
    }
    return mask_;
}

void GrammarMatcher::ban(int32_t token) {
    banned_.push_back(token);
}

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
            return make_error("grammar: token " + std::to_string(token) +
                              " ends the trigger with bytes the value cannot start with");
        if (limit_ >= 0 && c_.grammar->distance().state(s) > limit_)
            return make_error("grammar: token " + std::to_string(token) +
                              " opens the value too late to finish it in the tokens left");
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

bool GrammarMatcher::accepting() const {
    return active_ && runner_.accepting(state_);
}
bool GrammarMatcher::finished() const {
    return active_ && runner_.finished(state_);
}

}  // namespace dsv4

namespace dsv4 {

int64_t constraint_min_tokens(const GrammarConstraint& c, bool end_token) {
    const GrammarDistance& dist = c.grammar->distance();
    if (!dist.available()) return 0;
    GrammarRunner run(c.grammar->grammar());
    GrammarState s = run.initial();
    int64_t need = run.advance(s, c.prefix) ? dist.state(s) : GrammarDistance::kUnreachable;
    if (!c.trigger.empty()) need = c.trigger_required ? need + dist.spell(c.trigger) : 0;
    return need + (end_token ? 1 : 0);
}

}  // namespace dsv4
