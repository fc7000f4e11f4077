// Distances per node, per frame phase (the frame fields are those of grammar.cpp), and per stack: the top
// frame's remainder plus, for each frame below it, what its node still needs once its child has ended.
// Whitespace is never needed; optional properties and items beyond min_items are left out of the bound.
#include "runtime/grammar_distance.h"

#include <algorithm>

#include "runtime/token_mask.h"

namespace dsv4 {
namespace {

constexpr int32_t kInf = GrammarDistance::kUnreachable;

int32_t add(int64_t a, int64_t b) { return static_cast<int32_t>(std::min<int64_t>(kInf, a + b)); }
int32_t mul(int64_t n, int64_t x) { return n <= 0 ? 0 : static_cast<int32_t>(std::min<int64_t>(kInf, n * x)); }

// Continuation bytes left in the UTF-8 state of grammar.cpp's utf8_next.
int32_t utf8_left(int32_t state) {
    static constexpr int32_t kLeft[8] = {0, 1, 2, 3, 2, 2, 3, 3};
    return state >= 0 && state < 8 ? kLeft[state] : 0;
}

bool number_accepting(int32_t phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

// The child of trie node `parent` (-1: the root) on byte `b`, or -1.
int64_t trie_child(const TokenTrie& t, int64_t parent, uint8_t b) {
    size_t i = parent < 0 ? 0 : static_cast<size_t>(parent) + 1;
    const size_t end = parent < 0 ? t.nodes.size() : t.nodes[static_cast<size_t>(parent)].end;
    while (i < end) {
        if (t.nodes[i].byte == b) return static_cast<int64_t>(i);
        i = t.nodes[i].end;
    }
    return -1;
}

}  // namespace

std::vector<int32_t> GrammarDistance::spell_suffixes(const std::string& text) const {
    const size_t n = text.size();
    std::vector<int32_t> cost(n + 1, kInf);
    cost[n] = 0;
    for (size_t i = n; i-- > 0;) {
        int64_t at = -1;
        for (size_t j = i; j < n; ++j) {
            at = trie_child(trie_, at, static_cast<uint8_t>(text[j]));
            if (at < 0) break;
            if (trie_.nodes[static_cast<size_t>(at)].n_tokens > 0) cost[i] = std::min(cost[i], add(1, cost[j + 1]));
        }
    }
    return cost;
}

int32_t GrammarDistance::spell(const std::string& text) const { return spell_suffixes(text)[0]; }

GrammarDistance::GrammarDistance(const Grammar& g, const TokenTrie& trie) : g_(g), trie_(trie) {
    available_ = true;
    for (int b = 0; b < 256 && available_; ++b) {
        const int64_t c = trie_child(trie_, -1, static_cast<uint8_t>(b));
        available_ = c >= 0 && trie_.nodes[static_cast<size_t>(c)].n_tokens > 0;
    }
    const size_t n = g_.nodes.size();
    literal_.resize(n);
    rest_.resize(n);
    key_first_.resize(n);
    key_next_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const GrammarNode& gn = g_.nodes[i];
        if (gn.kind == GrammarNodeKind::literal) literal_[i] = spell_suffixes(gn.text);
        if (gn.kind == GrammarNodeKind::object)
            for (const GrammarProperty& p : gn.properties) {
                key_first_[i].push_back(spell_suffixes(p.key + ":"));
                key_next_[i].push_back(spell_suffixes("," + p.key + ":"));
            }
    }
    // Whole values: a fixed point from "unreachable" down (references make the node graph cyclic).
    whole_.assign(n, kInf);
    auto refresh_rest = [&] {
        for (size_t i = 0; i < n; ++i) {
            const GrammarNode& gn = g_.nodes[i];
            std::vector<int32_t>& r = rest_[i];
            if (gn.kind == GrammarNodeKind::sequence) {
                r.assign(gn.children.size() + 1, 0);
                for (size_t k = gn.children.size(); k-- > 0;) r[k] = add(r[k + 1], node(gn.children[k]));
            } else if (gn.kind == GrammarNodeKind::object && gn.any_value < 0) {
                r.assign(gn.properties.size() + 1, 0);
                for (size_t k = gn.properties.size(); k-- > 0;) {
                    const GrammarProperty& p = gn.properties[k];
                    r[k] = p.required ? add(r[k + 1], add(key_next_[i][k][0], node(p.value))) : r[k + 1];
                }
            }
        }
    };
    for (size_t pass = 0; pass <= n; ++pass) {
        refresh_rest();
        bool changed = false;
        for (size_t i = 0; i < n; ++i) {
            const GrammarNode& gn = g_.nodes[i];
            int32_t v = kInf;
            switch (gn.kind) {
                case GrammarNodeKind::literal: v = literal_[i][0]; break;
                case GrammarNodeKind::string: v = 2; break;
                case GrammarNodeKind::raw_text:
                case GrammarNodeKind::integer:
                case GrammarNodeKind::number:
                case GrammarNodeKind::byte_set: v = 1; break;
                case GrammarNodeKind::any_of:
                    for (int32_t c : gn.children) v = std::min(v, node(c));
                    break;
                case GrammarNodeKind::sequence: v = rest_[i][0]; break;
                case GrammarNodeKind::repeat: v = mul(gn.min_items, node(gn.items)); break;
                case GrammarNodeKind::object:
                case GrammarNodeKind::array: v = top(GrammarFrame{static_cast<int32_t>(i)}); break;
            }
            if (v < whole_[i]) {
                whole_[i] = v;
                changed = true;
            }
        }
        if (!changed) break;
    }
    refresh_rest();
}

int32_t GrammarDistance::node(int32_t id) const { return id < 0 ? kInf : whole_[static_cast<size_t>(id)]; }

int32_t GrammarDistance::after_property(int32_t obj, int32_t last) const {
    return add(rest_[static_cast<size_t>(obj)][static_cast<size_t>(last + 1)], 1);  // the required ones left, '}'
}

int32_t GrammarDistance::key_options(int32_t obj, int32_t last, int32_t pos, int32_t current) const {
    const GrammarNode& n = g_.nodes[static_cast<size_t>(obj)];
    int32_t lo, hi;
    key_range(n, last, lo, hi);
    const std::string* cur = current >= 0 ? &n.properties[static_cast<size_t>(current)].key : nullptr;
    int32_t best = kInf;
    for (int32_t j = lo; j <= hi; ++j) {
        const GrammarProperty& p = n.properties[static_cast<size_t>(j)];
        const size_t at = static_cast<size_t>(pos);
        if (at > p.key.size() || (cur && p.key.compare(0, at, *cur, 0, at) != 0)) continue;
        const int32_t key = key_first_[static_cast<size_t>(obj)][static_cast<size_t>(j)][at];
        best = std::min(best, add(add(key, node(p.value)), after_property(obj, j)));
    }
    return best;
}

int32_t GrammarDistance::top(const GrammarFrame& f) const {
    const GrammarNode& n = g_.nodes[static_cast<size_t>(f.node)];
    switch (n.kind) {
        case GrammarNodeKind::literal: return literal_[static_cast<size_t>(f.node)][static_cast<size_t>(f.a)];
        case GrammarNodeKind::string:
            switch (f.phase) {
                case 0: return 2;
                case 1: return utf8_left(f.c) + 1;
                case 2: return 2;  // the escaped character, the quote
                default: return f.a + 1;
            }
        case GrammarNodeKind::raw_text: return f.phase == 0 ? 1 : utf8_left(f.c);
        case GrammarNodeKind::integer:
        case GrammarNodeKind::number: return number_accepting(f.phase) ? 0 : 1;
        case GrammarNodeKind::byte_set: return 1;
        case GrammarNodeKind::any_of: return node(f.node);
        case GrammarNodeKind::sequence: return rest_[static_cast<size_t>(f.node)][static_cast<size_t>(f.a)];
        case GrammarNodeKind::repeat: return mul(n.min_items - f.a, node(n.items));
        case GrammarNodeKind::array: {
            const int32_t item = node(n.items);
            auto after_items = [&](int32_t read) { return add(mul(n.min_items - read, add(1, item)), 1); };
            switch (f.phase) {
                case 0: return add(1, n.min_items == 0 ? 1 : add(item, after_items(1)));
                case 1: return n.min_items == 0 ? 1 : add(item, after_items(1));
                case 5: return after_items(f.a);
                case 6: return add(item, after_items(f.a + 1));
                default: return kInf;
            }
        }
        case GrammarNodeKind::object: {
            if (n.any_value >= 0) {
                const int32_t value = node(n.any_value);
                switch (f.phase) {
                    case 0: return 2;
                    case 1:
                    case 5: return 1;
                    case 3: return add(add(1, value), 1);
                    case 4: return add(value, 1);
                    case 6: return add(add(add(node(n.items), 1), value), 1);
                    default: return kInf;
                }
            }
            const int32_t last = f.phase == 0 ? -1 : f.a;
            auto first = [&] {
                bool may_close = true;
                for (const GrammarProperty& p : n.properties) may_close = may_close && !p.required;
                return may_close ? 1 : key_options(f.node, -1, 0, -1);
            };
            switch (f.phase) {
                case 0: return add(1, first());
                case 1: return first();
                case 2: return key_options(f.node, last, f.c, f.b);
                case 3:
                case 4: {
                    const int32_t value = node(n.properties[static_cast<size_t>(f.b)].value);
                    return add(add(f.phase == 3 ? 1 : 0, value), after_property(f.node, f.b));
                }
                case 5: return after_property(f.node, last);
                case 6: return key_options(f.node, last, 0, -1);
                default: return kInf;
            }
        }
    }
    return kInf;
}

int32_t GrammarDistance::below(const GrammarFrame& f) const {
    const GrammarNode& n = g_.nodes[static_cast<size_t>(f.node)];
    switch (n.kind) {
        case GrammarNodeKind::sequence: return rest_[static_cast<size_t>(f.node)][static_cast<size_t>(f.a + 1)];
        case GrammarNodeKind::repeat: return mul(n.min_items - f.a - 1, node(n.items));
        case GrammarNodeKind::array: return add(mul(n.min_items - f.a - 1, add(1, node(n.items))), 1);
        case GrammarNodeKind::object:
            if (n.any_value >= 0) return f.phase == 7 ? add(add(1, node(n.any_value)), 1) : 1;
            return after_property(f.node, f.b);
        default: return kInf;  // only containers have children
    }
}

int32_t GrammarDistance::stack(const GrammarFrame* frames, size_t n) const {
    if (n == 0) return 0;
    int32_t d = top(frames[n - 1]);
    for (size_t i = 0; i + 1 < n; ++i) d = add(d, below(frames[i]));
    if (d > 0) return d;
    // Nothing left to read but the stack is not empty: only a lone number ends there (GrammarRunner::accepting);
    // anything else would hand the next byte to a frame that takes none.
    const GrammarNodeKind k = g_.nodes[static_cast<size_t>(frames[0].node)].kind;
    return n == 1 && (k == GrammarNodeKind::integer || k == GrammarNodeKind::number) ? 0 : kInf;
}

int32_t GrammarDistance::state(const GrammarState& s) const {
    int32_t best = kInf;
    uint32_t begin = 0;
    for (uint32_t end : s.ends) {
        best = std::min(best, stack(s.frames.data() + begin, end - begin));
        begin = end;
    }
    return best;
}

}  // namespace dsv4
