// Code point sets as JSON characters, and the regex subset parsed into a small tree, then into grammar nodes.
#include "runtime/string_grammar.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int32_t kMaxRepeat = 1000;

CodePointSet normalized(CodePointSet s) {
    // Surrogates are not characters: cut them out, then sort and merge.
    CodePointSet cut;
    for (auto [lo, hi] : s) {
        if (lo > hi) continue;
        if (lo < 0xD800 && hi >= 0xD800) cut.push_back({lo, 0xD7FF});
        if (hi > 0xDFFF && lo <= 0xDFFF) cut.push_back({0xE000, hi});
        if (hi < 0xD800 || lo > 0xDFFF) cut.push_back({lo, hi});
    }
    std::sort(cut.begin(), cut.end());
    CodePointSet out;
    for (auto r : cut) {
        if (!out.empty() && r.first <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, r.second);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

CodePointSet complement(const CodePointSet& s) {
    CodePointSet out;
    uint32_t next = 0;
    for (auto [lo, hi] : s) {
        if (lo > next) out.push_back({next, lo - 1});
        next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return normalized(std::move(out));
}

CodePointSet digit_set() { return {{'0', '9'}}; }
CodePointSet word_set() { return normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// ECMA-262 WhiteSpace and LineTerminator: exactly what \s matches, so \S is exact too.
CodePointSet space_set() {
    return normalized({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
CodePointSet dot_set() { return complement(normalized({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})); }

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (one encoded length) into ranges whose encodings are a product of byte ranges: every byte
// after the first that differs between lo and hi spans its whole continuation range.
void utf8_ranges(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
    const int len = utf8_length(lo);
    for (int i = 1; i < len; ++i) {
        const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            utf8_ranges(lo, lo | m, out);
            utf8_ranges((lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            utf8_ranges(lo, (hi & ~m) - 1, out);
            utf8_ranges(hi & ~m, hi, out);
            return;
        }
    }
    std::string a, b;
    utf8_append(a, lo);
    utf8_append(b, hi);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (size_t k = 0; k < a.size(); ++k) seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
    out.push_back(std::move(seq));
}

// ---- the regex tree ----------------------------------------------------------------------------------------

struct Re {
    enum Kind { chars, seq, alt, repeat } kind = seq;
    CodePointSet set;      // chars
    std::vector<Re> kids;  // seq, alt, repeat (one)
    int32_t min = 1, max = 1;
    bool nullable() const {
        switch (kind) {
            case chars: return false;
            case seq: return std::all_of(kids.begin(), kids.end(), [](const Re& k) { return k.nullable(); });
            case alt: return std::any_of(kids.begin(), kids.end(), [](const Re& k) { return k.nullable(); });
            case repeat: return min == 0 || kids[0].nullable();
        }
        return false;
    }
};

class Parser {
public:
    explicit Parser(std::string_view p) : p_(p) {}

    // The top level: alternatives with their anchors.
    struct Branch {
        Re re;
        bool start = false, end = false;
    };
    Result<std::vector<Branch>> top() {
        std::vector<Branch> out;
        for (;;) {
            Branch b;
            if (peek('^')) {
                ++i_;
                b.start = true;
            }
            DSV4_ASSIGN_OR_RETURN(b.re, concat(true));
            if (peek('$')) {
                ++i_;
                b.end = true;
            }
            out.push_back(std::move(b));
            if (i_ == p_.size()) return out;
            if (peek('|')) {
                ++i_;
                continue;
            }
            return err(p_[i_] == ')' ? "an unmatched ')'" : std::string("'") + p_[i_] + "' here");
        }
    }

private:
    Error err(const std::string& what) const {
        return make_error(what + " at offset " + std::to_string(i_) + " is not supported");
    }
    bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }

    Result<Re> alternation() {
        Re a;
        a.kind = Re::alt;
        for (;;) {
            DSV4_ASSIGN_OR_RETURN(Re c, concat(false));
            a.kids.push_back(std::move(c));
            if (!peek('|')) break;
            ++i_;
        }
        if (a.kids.size() == 1) return std::move(a.kids[0]);
        return a;
    }

    // Items up to '|', ')' or the end ('$' ends a top-level one: anchors only at the ends).
    Result<Re> concat(bool top) {
        Re s;
        s.kind = Re::seq;
        while (i_ < p_.size() && !peek('|') && !peek(')')) {
            if (peek('$')) {
                if (top && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) break;
                return err("'$' before the end of the pattern");
            }
            if (peek('^')) return err("'^' after the start of the pattern");
            DSV4_ASSIGN_OR_RETURN(Re atom, atom_at());
            DSV4_ASSIGN_OR_RETURN(Re q, quantified(std::move(atom)));
            s.kids.push_back(std::move(q));
        }
        if (s.kids.size() == 1) return std::move(s.kids[0]);
        return s;
    }

    Result<Re> quantified(Re atom) {
        int32_t lo = 1, hi = 1;
        const size_t at = i_;
        if (peek('*')) {
            lo = 0, hi = -1, ++i_;
        } else if (peek('+')) {
            lo = 1, hi = -1, ++i_;
        } else if (peek('?')) {
            lo = 0, hi = 1, ++i_;
        } else if (peek('{')) {
            ++i_;
            DSV4_ASSIGN_OR_RETURN(lo, count());
            hi = lo;
            if (peek(',')) {
                ++i_;
                hi = -1;
                if (!peek('}')) {
                    DSV4_ASSIGN_OR_RETURN(hi, count());
                }
            }
            if (!peek('}')) return err("a '{' that is not a quantifier {m}, {m,} or {m,n}");
            ++i_;
            if (hi >= 0 && lo > hi) return err("a quantifier {m,n} with m > n");
        } else {
            return atom;
        }
        if (peek('?')) return err("a lazy quantifier");
        if (peek('*') || peek('+') || peek('{')) return err("a quantifier after a quantifier");
        if (atom.nullable()) {
            i_ = at;
            return err("a quantifier over an expression that can match the empty string");
        }
        Re r;
        r.kind = Re::repeat;
        r.min = lo;
        r.max = hi;
        r.kids.push_back(std::move(atom));
        return r;
    }

    Result<int32_t> count() {
        int64_t v = 0;
        const size_t start = i_;
        while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
            v = v * 10 + (p_[i_++] - '0');
            if (v > kMaxRepeat) return err("a repetition count above " + std::to_string(kMaxRepeat));
        }
        if (i_ == start) return err("a '{' that is not a quantifier {m}, {m,} or {m,n}");
        return static_cast<int32_t>(v);
    }

    // One UTF-8 character of the pattern (validated).
    Result<uint32_t> utf8_char() {
        const auto c0 = static_cast<uint8_t>(p_[i_]);
        const int len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
        if (len == 0 || i_ + static_cast<size_t>(len) > p_.size()) return err("invalid UTF-8");
        uint32_t cp = len == 1 ? c0 : c0 & (0x7F >> len);
        for (int k = 1; k < len; ++k) {
            const auto c = static_cast<uint8_t>(p_[i_ + static_cast<size_t>(k)]);
            if ((c & 0xC0) != 0x80) return err("invalid UTF-8");
            cp = (cp << 6) | (c & 0x3F);
        }
        if (len > 1 && (utf8_length(cp) != len || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)))
            return err("invalid UTF-8");
        i_ += static_cast<size_t>(len);
        return cp;
    }

    Result<uint32_t> hex(int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
            if (i_ >= p_.size()) return err("an incomplete hex escape");
            const char c = p_[i_];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return err("an incomplete hex escape");
            v = v * 16 + static_cast<uint32_t>(d);
            ++i_;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return err("a surrogate escape");
        return v;
    }

    // After a '\': a class escape (\d ...) into `set`, or one character. in_class: '\b' is a backspace.
    Result<CodePointSet> escape(bool in_class) {
        if (i_ >= p_.size()) return err("a '\\' at the end");
        const char c = p_[i_];
        auto one = [](uint32_t cp) { return CodePointSet{{cp, cp}}; };
        switch (c) {
            case 'd': ++i_; return digit_set();
            case 'D': ++i_; return complement(digit_set());
            case 'w': ++i_; return word_set();
            case 'W': ++i_; return complement(word_set());
            case 's': ++i_; return space_set();
            case 'S': ++i_; return complement(space_set());
            case 't': ++i_; return one('\t');
            case 'n': ++i_; return one('\n');
            case 'r': ++i_; return one('\r');
            case 'f': ++i_; return one('\f');
            case 'v': ++i_; return one('\v');
            case 'x': {
                ++i_;
                DSV4_ASSIGN_OR_RETURN(uint32_t v, hex(2));
                return one(v);
            }
            case 'u': {
                ++i_;
                DSV4_ASSIGN_OR_RETURN(uint32_t v, hex(4));
                return one(v);
            }
            case '0':
                if (i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9') return err("an octal escape");
                ++i_;
                return one(0);
            case 'b':
                if (in_class) {
                    ++i_;
                    return one('\b');
                }
                return err("the word boundary \\b");
            default: break;
        }
        if (c >= '1' && c <= '9') return err("a backreference");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return err(std::string("the escape \\") + c);
        DSV4_ASSIGN_OR_RETURN(uint32_t cp, utf8_char());  // escaped punctuation (or any other character) is itself
        return one(cp);
    }

    Result<Re> atom_at() {
        Re r;
        r.kind = Re::chars;
        const char c = p_[i_];
        if (c == '(') {
            ++i_;
            if (peek('?')) {
                if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
                    i_ += 2;
                } else {
                    return err("a lookaround or named group '(?'");
                }
            }
            DSV4_ASSIGN_OR_RETURN(Re inner, alternation());
            if (!peek(')')) return err("an unclosed '('");
            ++i_;
            return inner;
        }
        if (c == '[') return char_class();
        if (c == '*' || c == '+' || c == '?' || c == '{') return err(std::string("a quantifier '") + c + "' with nothing before it");
        if (c == ']' || c == '}') {
            ++i_;
            r.set = {{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}};
            return r;
        }
        if (c == '.') {
            ++i_;
            r.set = dot_set();
            return r;
        }
        if (c == '\\') {
            ++i_;
            DSV4_ASSIGN_OR_RETURN(r.set, escape(false));
            return r;
        }
        DSV4_ASSIGN_OR_RETURN(uint32_t cp, utf8_char());
        r.set = {{cp, cp}};
        return r;
    }

    Result<Re> char_class() {
        ++i_;  // '['
        bool negate = false;
        if (peek('^')) {
            negate = true;
            ++i_;
        }
        CodePointSet set;
        bool first = true;
        for (;;) {
            if (i_ >= p_.size()) return err("an unclosed '['");
            if (peek(']') && !first) break;
            first = false;
            // One class atom: a character (possibly a range start) or a class escape.
            auto class_atom = [&](CodePointSet& s) -> Status {
                if (peek('\\')) {
                    ++i_;
                    DSV4_ASSIGN_OR_RETURN(s, escape(true));
                    return {};
                }
                if (peek('[') && i_ + 1 < p_.size() && (p_[i_ + 1] == ':' || p_[i_ + 1] == '=' || p_[i_ + 1] == '.'))
                    return err("a POSIX class '[" + std::string(1, p_[i_ + 1]) + "'");
                DSV4_ASSIGN_OR_RETURN(uint32_t cp, utf8_char());
                s = {{cp, cp}};
                return {};
            };
            CodePointSet lo;
            DSV4_TRY(class_atom(lo));
            if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
                ++i_;
                CodePointSet hi;
                DSV4_TRY(class_atom(hi));
                if (lo.size() != 1 || lo[0].first != lo[0].second || hi.size() != 1 || hi[0].first != hi[0].second)
                    return err("a range with a class escape at one end");
                if (lo[0].first > hi[0].first) return err("a range out of order");
                set.push_back({lo[0].first, hi[0].first});
            } else {
                set.insert(set.end(), lo.begin(), lo.end());
            }
        }
        ++i_;  // ']'
        Re r;
        r.kind = Re::chars;
        r.set = negate ? complement(normalized(std::move(set))) : normalized(std::move(set));
        if (r.set.empty()) return err("a class that matches nothing");
        return r;
    }

    std::string_view p_;
    size_t i_ = 0;
};

}  // namespace

CodePointSet code_points_all() { return normalized({{0, kMaxCodePoint}}); }

int32_t StringGrammarBuilder::add_literal(std::string text) {
    GrammarNode n;
    n.kind = GrammarNodeKind::literal;
    n.text = std::move(text);
    return g_.add(std::move(n));
}

int32_t StringGrammarBuilder::add_byte_range(uint8_t lo, uint8_t hi) {
    GrammarNode n;
    n.kind = GrammarNodeKind::byte_set;
    for (unsigned b = lo; b <= hi; ++b) n.bytes[b >> 6] |= uint64_t{1} << (b & 63);
    return g_.add(std::move(n));
}

int32_t StringGrammarBuilder::character(const CodePointSet& set) {
    for (const auto& [s, id] : characters_)
        if (s == set) return id;
    GrammarNode alt;
    alt.kind = GrammarNodeKind::any_of;
    GrammarNode raw;
    raw.kind = GrammarNodeKind::byte_set;
    bool any_raw = false;
    std::vector<std::string> escapes;  // after the '\\': one node for all of them, so a step tries few alternatives
    static const char* kHex = "0123456789abcdef";
    for (auto [lo, hi] : set) {
        for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) {
            std::string esc;
            switch (c) {
                case '"': esc = "\\\""; break;
                case '\\': esc = "\\\\"; break;
                case '\b': esc = "\\b"; break;
                case '\f': esc = "\\f"; break;
                case '\n': esc = "\\n"; break;
                case '\r': esc = "\\r"; break;
                case '\t': esc = "\\t"; break;
                default:
                    if (c < 0x20 || (no_lt_ && c == '<')) esc = std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
            }
            if (esc.empty()) {
                raw.bytes[c >> 6] |= uint64_t{1} << (c & 63);
                any_raw = true;
            } else {
                escapes.push_back(esc.substr(1));
            }
        }
        if (hi < 0x80) continue;
        // Non-ASCII: split at the encoded-length boundaries, then into products of byte ranges.
        for (auto [a, b] : {std::pair<uint32_t, uint32_t>{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, kMaxCodePoint}}) {
            const uint32_t x = std::max(lo, a), y = std::min(hi, b);
            if (x > y) continue;
            std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
            utf8_ranges(x, y, seqs);
            for (const auto& s : seqs) {
                GrammarNode sq;
                sq.kind = GrammarNodeKind::sequence;
                for (auto [p, q] : s) sq.children.push_back(add_byte_range(p, q));
                alt.children.push_back(g_.add(std::move(sq)));
            }
        }
    }
    if (!escapes.empty()) {
        GrammarNode rest;
        rest.kind = GrammarNodeKind::any_of;
        for (std::string& e : escapes) rest.children.push_back(add_literal(std::move(e)));
        const int32_t after = rest.children.size() == 1 ? rest.children[0] : g_.add(std::move(rest));
        GrammarNode esc;
        esc.kind = GrammarNodeKind::sequence;
        esc.children = {add_literal("\\"), after};
        alt.children.insert(alt.children.begin(), g_.add(std::move(esc)));
    }
    if (any_raw) alt.children.insert(alt.children.begin(), g_.add(std::move(raw)));
    const int32_t id = alt.children.size() == 1 ? alt.children[0] : g_.add(std::move(alt));
    characters_.push_back({set, id});
    return id;
}

int32_t StringGrammarBuilder::sized_string(int32_t min_len, int32_t max_len) {
    const int32_t quote = add_literal("\"");
    if (max_len == 0) return add_literal("\"\"");
    GrammarNode r;
    r.kind = GrammarNodeKind::repeat;
    r.items = character(code_points_all());
    r.min_items = min_len;
    r.max_items = max_len;
    r.string_chars = true;
    const int32_t body = g_.add(std::move(r));
    GrammarNode s;
    s.kind = GrammarNodeKind::sequence;
    s.children = {quote, body, quote};
    return g_.add(std::move(s));
}

Result<int32_t> StringGrammarBuilder::pattern_string(std::string_view pattern) {
    Parser parser(pattern);
    DSV4_ASSIGN_OR_RETURN(std::vector<Parser::Branch> branches, parser.top());
    // Tree -> nodes; -1 stands for the empty string (only at the top of a branch or inside a sequence).
    auto build = [&](auto& self, const Re& r) -> int32_t {
        switch (r.kind) {
            case Re::chars: return character(r.set);
            case Re::seq: {
                GrammarNode s;
                s.kind = GrammarNodeKind::sequence;
                for (const Re& k : r.kids)
                    if (int32_t id = self(self, k); id >= 0) s.children.push_back(id);
                if (s.children.empty()) return -1;
                if (s.children.size() == 1) return s.children[0];
                return g_.add(std::move(s));
            }
            case Re::alt: {
                GrammarNode a;
                a.kind = GrammarNodeKind::any_of;
                bool empty = false, optional = false;  // a branch that is empty; one that may be
                for (const Re& k : r.kids) {
                    const int32_t id = self(self, k);
                    if (id < 0) {
                        empty = true;
                    } else {
                        a.children.push_back(id);
                        optional = optional || k.nullable();
                    }
                }
                if (a.children.empty()) return -1;
                const int32_t id = a.children.size() == 1 ? a.children[0] : g_.add(std::move(a));
                if (!empty || optional) return id;
                GrammarNode opt;  // (x|): x or nothing
                opt.kind = GrammarNodeKind::repeat;
                opt.items = id;
                opt.min_items = 0;
                opt.max_items = 1;
                return g_.add(std::move(opt));
            }
            case Re::repeat: {
                if (r.max == 0) return -1;
                const int32_t id = self(self, r.kids[0]);
                if (r.min == 1 && r.max == 1) return id;
                GrammarNode rep;
                rep.kind = GrammarNodeKind::repeat;
                rep.items = id;
                rep.min_items = r.min;
                rep.max_items = r.max;
                return g_.add(std::move(rep));
            }
        }
        return -1;
    };
    int32_t any_text = -1;  // what an unanchored end allows: any characters
    auto anything = [&] {
        if (any_text < 0) {
            GrammarNode rep;
            rep.kind = GrammarNodeKind::repeat;
            rep.items = character(code_points_all());
            rep.min_items = 0;
            rep.max_items = -1;
            any_text = g_.add(std::move(rep));
        }
        return any_text;
    };
    const int32_t quote = add_literal("\"");
    GrammarNode alt;
    alt.kind = GrammarNodeKind::any_of;
    for (const Parser::Branch& b : branches) {
        GrammarNode s;
        s.kind = GrammarNodeKind::sequence;
        s.children.push_back(quote);
        if (!b.start) s.children.push_back(anything());
        if (const int32_t body = build(build, b.re); body >= 0) s.children.push_back(body);
        if (!b.end && s.children.back() != any_text) s.children.push_back(anything());
        s.children.push_back(quote);
        alt.children.push_back(g_.add(std::move(s)));
    }
    return alt.children.size() == 1 ? alt.children[0] : g_.add(std::move(alt));
}

}  // namespace dsv4
