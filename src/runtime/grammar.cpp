// The grammar's byte transitions. Frame fields per node kind:
//   literal   a: bytes matched
//   string    phase 0 '"' next, 1 body, 2 after '\', 3 in \uXXXX (a: hex digits left, b: 1 when the first was
//             d/D, so the next must be 0-7: no surrogates); c: UTF-8 state (below)
//   raw_text  phase 0 nothing read, 1 some; c: UTF-8 state
//   integer / number  phase: the number DFA below; a, b, c: digits of the integer part, fraction, exponent
//   object    phase 0 '{' next, 1 after '{', 2 in a known key (b: a key with the bytes read so far, c: bytes
//             read), 3 after the key, 4 after ':', 5 after a value, 6 after ',', 7 an any-keys key is being
//             read, 8 a value is being read; a: index of the last known property written (-1: none);
//             c in phases 1, 3-6: whitespace bytes read here
//   array     phase 0 '[' next, 1 after '[', 5 after an item, 6 after ',', 8 an item is being read; a: items
//             read, c: whitespace
//   sequence  a: the child being read; phase 0: push it next, 1: it is on the stack
//   byte_set  nothing (one byte, then done)
//   repeat    a: repetitions read (held at min_items once reached when unbounded, so the states recur)
#include "runtime/grammar.h"

#include <cstring>

namespace dsv4 {

void key_range(const GrammarNode& n, int32_t last, int32_t& lo, int32_t& hi) {
    lo = last + 1;
    hi = static_cast<int32_t>(n.properties.size()) - 1;
    for (int32_t j = lo; j <= hi; ++j)
        if (n.properties[static_cast<size_t>(j)].required) {
            hi = j;
            break;
        }
}

namespace {

constexpr int kMaxDepth = 64;      // nested alternatives / sequence pushes resolved for one byte
constexpr size_t kMaxStacks = 64;  // stacks kept in one state (alternatives that share a prefix)

enum class Step { reject, consumed, done, pass, delegate };

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// UTF-8 validation. State: 0 between characters; 1-3 that many continuation bytes (80-BF) left; 4 after E0
// (A0-BF, then 1); 5 after ED (80-9F, then 1: no surrogates); 6 after F0 (90-BF, then 2); 7 after F4 (80-8F,
// then 2). Returns the next state or -1.
int utf8_next(int state, uint8_t c) {
    switch (state) {
        case 0:
            if (c < 0x80) return 0;
            if (c >= 0xC2 && c <= 0xDF) return 1;
            if (c == 0xE0) return 4;
            if (c == 0xED) return 5;
            if (c >= 0xE1 && c <= 0xEF) return 2;
            if (c == 0xF0) return 6;
            if (c >= 0xF1 && c <= 0xF3) return 3;
            if (c == 0xF4) return 7;
            return -1;
        case 1: return (c & 0xC0) == 0x80 ? 0 : -1;
        case 2: return (c & 0xC0) == 0x80 ? 1 : -1;
        case 3: return (c & 0xC0) == 0x80 ? 2 : -1;
        case 4: return c >= 0xA0 && c <= 0xBF ? 1 : -1;
        case 5: return c >= 0x80 && c <= 0x9F ? 1 : -1;
        case 6: return c >= 0x90 && c <= 0xBF ? 2 : -1;
        case 7: return c >= 0x80 && c <= 0x8F ? 2 : -1;
    }
    return -1;
}

// Bounded so that every value is an exact integer / a finite double for any reader (15 digits e99 at most).
constexpr int32_t kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;

// Number DFA: 0 start, 1 after '-', 2 a leading 0, 3 integer digits, 4 after '.', 5 fraction digits, 6 after
// 'e', 7 after the exponent's sign, 8 exponent digits. Accepting: 2, 3, 5, 8.
bool number_accepting(int32_t phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

Step number_step(GrammarFrame& f, uint8_t c, bool fraction) {
    const bool digit = is_digit(c);
    switch (f.phase) {
        case 0:
            if (c == '-') {
                f.phase = 1;
                return Step::consumed;
            }
            [[fallthrough]];
        case 1:
            if (c == '0') {
                f.phase = 2;
                return Step::consumed;
            }
            if (digit) {
                f.phase = 3;
                f.a = 1;
                return Step::consumed;
            }
            return Step::reject;
        case 2:
        case 3:
            if (f.phase == 3 && digit) {
                if (f.a >= kMaxIntDigits) return Step::reject;
                ++f.a;
                return Step::consumed;
            }
            if (fraction && c == '.') {
                f.phase = 4;
                return Step::consumed;
            }
            if (fraction && (c == 'e' || c == 'E')) {
                f.phase = 6;
                return Step::consumed;
            }
            return digit ? Step::reject : Step::pass;  // "01" is not JSON
        case 4:
            if (!digit) return Step::reject;
            f.phase = 5;
            f.b = 1;
            return Step::consumed;
        case 5:
            if (digit) {
                if (f.b >= kMaxFracDigits) return Step::reject;
                ++f.b;
                return Step::consumed;
            }
            if (c == 'e' || c == 'E') {
                f.phase = 6;
                return Step::consumed;
            }
            return Step::pass;
        case 6:
            if (c == '+' || c == '-') {
                f.phase = 7;
                return Step::consumed;
            }
            [[fallthrough]];
        case 7:
            if (!digit) return Step::reject;
            f.phase = 8;
            f.c = 1;
            return Step::consumed;
        case 8:
            if (digit) {
                if (f.c >= kMaxExpDigits) return Step::reject;
                ++f.c;
                return Step::consumed;
            }
            return Step::pass;
    }
    return Step::reject;
}

Step string_step(GrammarFrame& f, const GrammarNode& n, uint8_t c) {
    switch (f.phase) {
        case 0:
            if (c != '"') return Step::reject;
            f.phase = 1;
            return Step::consumed;
        case 1: {
            if (f.c == 0) {
                if (c == '"') return Step::done;
                if (c == '\\') {
                    f.phase = 2;
                    return Step::consumed;
                }
                if (c < 0x20 || (n.no_lt && c == '<')) return Step::reject;
            }
            const int u = utf8_next(f.c, c);
            if (u < 0) return Step::reject;
            f.c = u;
            return Step::consumed;
        }
        case 2:
            if (c == 'u') {
                f.phase = 3;
                f.a = 4;
                f.b = 0;
                return Step::consumed;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                f.phase = 1;
                return Step::consumed;
            }
            return Step::reject;
        case 3:
            if (!is_hex(c)) return Step::reject;
            if (f.a == 4 && (c == 'd' || c == 'D')) f.b = 1;
            if (f.a == 3 && f.b == 1 && !(c >= '0' && c <= '7')) return Step::reject;
            if (--f.a == 0) {
                f.phase = 1;
                f.b = 0;
            }
            return Step::consumed;
    }
    return Step::reject;
}

// Whitespace at a structural position: consumed while the bound allows.
Step whitespace(GrammarFrame& f, int32_t max_ws) {
    if (f.c >= max_ws) return Step::reject;
    ++f.c;
    return Step::consumed;
}

void set_phase(GrammarFrame& f, int32_t phase) {
    f.phase = phase;
    f.c = 0;
}


bool may_close(const GrammarNode& n, int32_t last) {
    for (size_t j = static_cast<size_t>(last + 1); j < n.properties.size(); ++j)
        if (n.properties[j].required) return false;
    return true;
}

Step object_step(GrammarFrame& f, const GrammarNode& n, uint8_t c, int32_t max_ws, int32_t& child) {
    const bool any_keys = n.any_value >= 0;
    switch (f.phase) {
        case 0:
            if (c != '{') return Step::reject;
            f.a = -1;
            set_phase(f, 1);
            return Step::consumed;
        case 1:
        case 6:
            if (is_ws(c)) return whitespace(f, max_ws);
            if (f.phase == 1 && c == '}') return (any_keys || may_close(n, f.a)) ? Step::done : Step::reject;
            if (any_keys) {
                set_phase(f, 7);
                child = n.items;
                return Step::delegate;
            }
            if (c != '"') return Step::reject;
            {
                int32_t lo, hi;
                key_range(n, f.a, lo, hi);
                if (lo > hi) return Step::reject;
                f.b = lo;
                f.phase = 2;
                f.c = 1;
            }
            return Step::consumed;
        case 2: {
            int32_t lo, hi;
            key_range(n, f.a, lo, hi);
            const std::string& cur = n.properties[static_cast<size_t>(f.b)].key;
            const size_t p = static_cast<size_t>(f.c);
            for (int32_t j = lo; j <= hi; ++j) {
                const std::string& k = n.properties[static_cast<size_t>(j)].key;
                if (k.size() > p && static_cast<uint8_t>(k[p]) == c && k.compare(0, p, cur, 0, p) == 0) {
                    f.b = j;
                    if (p + 1 == k.size()) {
                        set_phase(f, 3);
                    } else {
                        f.c = static_cast<int32_t>(p + 1);
                    }
                    return Step::consumed;
                }
            }
            return Step::reject;
        }
        case 3:
            if (is_ws(c)) return whitespace(f, max_ws);
            if (c != ':') return Step::reject;
            set_phase(f, 4);
            return Step::consumed;
        case 4:
            if (is_ws(c)) return whitespace(f, max_ws);
            set_phase(f, 8);
            child = any_keys ? n.any_value : n.properties[static_cast<size_t>(f.b)].value;
            return Step::delegate;
        case 5:
            if (is_ws(c)) return whitespace(f, max_ws);
            if (c == '}') return (any_keys || may_close(n, f.a)) ? Step::done : Step::reject;
            if (c == ',') {
                if (!any_keys) {
                    int32_t lo, hi;
                    key_range(n, f.a, lo, hi);
                    if (lo > hi) return Step::reject;
                }
                set_phase(f, 6);
                return Step::consumed;
            }
            return Step::reject;
    }
    return Step::reject;
}

Step array_step(GrammarFrame& f, const GrammarNode& n, uint8_t c, int32_t max_ws, int32_t& child) {
    switch (f.phase) {
        case 0:
            if (c != '[') return Step::reject;
            f.a = 0;
            set_phase(f, 1);
            return Step::consumed;
        case 1:
        case 6:
            if (is_ws(c)) return whitespace(f, max_ws);
            if (f.phase == 1 && c == ']') return n.min_items == 0 ? Step::done : Step::reject;
            if (n.max_items == 0) return Step::reject;
            set_phase(f, 8);
            child = n.items;
            return Step::delegate;
        case 5:
            if (is_ws(c)) return whitespace(f, max_ws);
            if (c == ']') return f.a >= n.min_items ? Step::done : Step::reject;
            if (c == ',' && (n.max_items < 0 || f.a < n.max_items)) {
                set_phase(f, 6);
                return Step::consumed;
            }
            return Step::reject;
    }
    return Step::reject;
}

}  // namespace

int32_t append_grammar(Grammar& g, const Grammar& other) {
    const int32_t off = static_cast<int32_t>(g.nodes.size());
    auto shift = [off](int32_t id) { return id < 0 ? id : id + off; };
    for (GrammarNode n : other.nodes) {
        for (int32_t& c : n.children) c = shift(c);
        for (GrammarProperty& p : n.properties) p.value = shift(p.value);
        n.any_value = shift(n.any_value);
        n.items = shift(n.items);
        g.nodes.push_back(std::move(n));
    }
    return shift(other.root);
}

void GrammarState::key(std::string& out) const {
    out.resize(frames.size() * sizeof(GrammarFrame) + ends.size() * sizeof(uint32_t));
    if (!frames.empty()) std::memcpy(out.data(), frames.data(), frames.size() * sizeof(GrammarFrame));
    if (!ends.empty())
        std::memcpy(out.data() + frames.size() * sizeof(GrammarFrame), ends.data(), ends.size() * sizeof(uint32_t));
}

void GrammarRunner::push_out(const Stack& st, GrammarState& out) {
    // Skip a stack the state already holds (alternatives that converge).
    uint32_t begin = 0;
    for (uint32_t end : out.ends) {
        if (end - begin == st.size() && std::equal(st.begin(), st.end(), out.frames.begin() + begin)) return;
        begin = end;
    }
    if (out.ends.size() >= kMaxStacks) return;  // every stack kept is a valid parse, so dropping one is safe
    out.frames.insert(out.frames.end(), st.begin(), st.end());
    out.ends.push_back(static_cast<uint32_t>(out.frames.size()));
}

GrammarRunner::GrammarRunner(const Grammar& g) : g_(g), first_(g.nodes.size()) {
    // The bytes each node may start with, as a fixed point over the alternatives and sequences (a node that
    // may be skipped, or has nothing to say, may start with any byte).
    const std::array<uint64_t, 4> all = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
    auto add = [](std::array<uint64_t, 4>& s, uint8_t c) { s[c >> 6] |= uint64_t{1} << (c & 63); };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const GrammarNode& n = g.nodes[i];
        std::array<uint64_t, 4>& s = first_[i];
        switch (n.kind) {
            case GrammarNodeKind::literal:
                if (n.text.empty()) s = all;
                else add(s, static_cast<uint8_t>(n.text[0]));
                break;
            case GrammarNodeKind::string: add(s, '"'); break;
            case GrammarNodeKind::object: add(s, '{'); break;
            case GrammarNodeKind::array: add(s, '['); break;
            case GrammarNodeKind::integer:
            case GrammarNodeKind::number:
                add(s, '-');
                for (uint8_t c = '0'; c <= '9'; ++c) add(s, c);
                break;
            case GrammarNodeKind::byte_set: std::copy(std::begin(n.bytes), std::end(n.bytes), s.begin()); break;
            case GrammarNodeKind::repeat:
                if (n.min_items == 0) s = all;
                break;
            case GrammarNodeKind::sequence:
                if (n.children.empty()) s = all;
                break;
            case GrammarNodeKind::raw_text: s = all; break;
            case GrammarNodeKind::any_of: break;
        }
    }
    // Then each any_of takes its alternatives' bytes, a sequence its first child's, a repeat its items'.
    bool changed = true;
    auto take = [&](size_t i, int32_t from) {
        for (size_t w = 0; w < 4; ++w) {
            const uint64_t u = first_[i][w] | first_[static_cast<size_t>(from)][w];
            changed = changed || u != first_[i][w];
            first_[i][w] = u;
        }
    };
    while (changed) {
        changed = false;
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            const GrammarNode& n = g.nodes[i];
            if (n.kind == GrammarNodeKind::any_of)
                for (int32_t c : n.children) take(i, c);
            else if (n.kind == GrammarNodeKind::sequence && !n.children.empty())
                take(i, n.children[0]);
            else if (n.kind == GrammarNodeKind::repeat && n.items >= 0)
                take(i, n.items);
        }
    }
}

void GrammarRunner::normalize(Stack& st, GrammarState& out, int depth, int next) {
    if (depth > kMaxDepth) return;
    if (st.empty()) {
        push_out(st, out);
        return;
    }
    GrammarFrame& f = st.back();
    const GrammarNode& n = g_.nodes[static_cast<size_t>(f.node)];
    if (n.kind == GrammarNodeKind::any_of) {
        for (int32_t alt : n.children) {
            if (next >= 0 && !may_start(alt, static_cast<uint8_t>(next))) continue;
            Stack s = st;
            s.back() = GrammarFrame{alt};
            normalize(s, out, depth + 1, next);
        }
        return;
    }
    if (n.kind == GrammarNodeKind::sequence && f.phase == 0) {
        f.phase = 1;
        const int32_t child = n.children[static_cast<size_t>(f.a)];
        st.push_back(GrammarFrame{child});
        normalize(st, out, depth + 1, next);
        return;
    }
    push_out(st, out);
}

void GrammarRunner::child_done(Stack& st) {
    while (!st.empty()) {
        GrammarFrame& f = st.back();
        const GrammarNode& n = g_.nodes[static_cast<size_t>(f.node)];
        switch (n.kind) {
            case GrammarNodeKind::object:
                if (f.phase == 7) {
                    set_phase(f, 3);
                } else {
                    if (n.any_value < 0) f.a = f.b;
                    set_phase(f, 5);
                }
                return;
            case GrammarNodeKind::array:
                ++f.a;
                set_phase(f, 5);
                return;
            case GrammarNodeKind::repeat:
                if (n.max_items >= 0 || f.a < n.min_items) ++f.a;
                return;
            case GrammarNodeKind::sequence:
                if (++f.a < static_cast<int32_t>(n.children.size())) {
                    f.phase = 0;
                    return;
                }
                st.pop_back();
                continue;
            default: return;  // only containers have children
        }
    }
}

// True when the top frame is ready to read a byte as it is (no alternatives or pending sequence child).
static bool concrete(const Grammar& g, const std::vector<GrammarFrame>& st) {
    if (st.empty()) return true;
    const GrammarNode& n = g.nodes[static_cast<size_t>(st.back().node)];
    return n.kind != GrammarNodeKind::any_of && !(n.kind == GrammarNodeKind::sequence && st.back().phase == 0);
}

void GrammarRunner::step(Stack& st, uint8_t c, GrammarState& out, int depth) {
    if (depth > kMaxDepth || st.empty()) return;
    GrammarFrame& f = st.back();
    const GrammarNode& n = g_.nodes[static_cast<size_t>(f.node)];
    Step r = Step::reject;
    int32_t child = -1;
    switch (n.kind) {
        case GrammarNodeKind::literal:
            if (static_cast<uint8_t>(n.text[static_cast<size_t>(f.a)]) != c) return;
            r = ++f.a == static_cast<int32_t>(n.text.size()) ? Step::done : Step::consumed;
            break;
        case GrammarNodeKind::string: r = string_step(f, n, c); break;
        case GrammarNodeKind::raw_text:
            if (c == '<') {
                r = (f.phase == 1 && f.c == 0) ? Step::pass : Step::reject;
            } else {
                const int u = utf8_next(f.c, c);
                if (u < 0) return;
                f.c = u;
                f.phase = 1;
                r = Step::consumed;
            }
            break;
        case GrammarNodeKind::byte_set:
            if (!((n.bytes[c >> 6] >> (c & 63)) & 1)) return;
            r = Step::done;
            break;
        case GrammarNodeKind::integer: r = number_step(f, c, false); break;
        case GrammarNodeKind::number: r = number_step(f, c, true); break;
        case GrammarNodeKind::object: r = object_step(f, n, c, g_.max_whitespace, child); break;
        case GrammarNodeKind::array: r = array_step(f, n, c, g_.max_whitespace, child); break;
        case GrammarNodeKind::repeat: {
            // Both ways at once: one more repetition, and (when enough were read) past the repeat.
            if (n.max_items < 0 || f.a < n.max_items) {
                Stack more = st;
                more.push_back(GrammarFrame{n.items});
                feed(more, c, out, depth + 1);
            }
            if (f.a >= n.min_items) {
                st.pop_back();
                child_done(st);
                feed(st, c, out, depth + 1);
            }
            return;
        }
        case GrammarNodeKind::any_of:
        case GrammarNodeKind::sequence: return;  // normalized away before a byte is read
    }
    switch (r) {
        case Step::reject: return;
        case Step::consumed: push_out(st, out); return;
        case Step::done:
            st.pop_back();
            child_done(st);
            normalize(st, out, 0);
            return;
        case Step::pass:
        case Step::delegate:
            if (r == Step::pass) {
                st.pop_back();
                child_done(st);
            } else {
                st.push_back(GrammarFrame{child});
            }
            feed(st, c, out, depth + 1);
            return;
    }
}

// Gives byte `c` to the stack's top frame, resolving alternatives and pending sequence children first.
void GrammarRunner::feed(Stack& st, uint8_t c, GrammarState& out, int depth) {
    if (concrete(g_, st)) {
        step(st, c, out, depth);
        return;
    }
    GrammarState alts;
    normalize(st, alts, 0, c);
    uint32_t begin = 0;
    for (uint32_t end : alts.ends) {
        Stack s(alts.frames.begin() + begin, alts.frames.begin() + end);
        step(s, c, out, depth);
        begin = end;
    }
}

GrammarState GrammarRunner::initial() {
    GrammarState s;
    Stack st{GrammarFrame{g_.root}};
    normalize(st, s, 0);
    return s;
}

void GrammarRunner::advance(const GrammarState& in, uint8_t c, GrammarState& out) {
    out.clear();
    Stack st;
    uint32_t begin = 0;
    for (uint32_t end : in.ends) {
        st.assign(in.frames.begin() + begin, in.frames.begin() + end);
        step(st, c, out, 0);
        begin = end;
    }
}

bool GrammarRunner::advance(GrammarState& s, std::string_view bytes) {
    GrammarState next;
    for (char ch : bytes) {
        advance(s, static_cast<uint8_t>(ch), next);
        std::swap(s, next);
        if (s.dead()) return false;
    }
    return true;
}

bool GrammarRunner::accepting(const GrammarState& s) const {
    uint32_t begin = 0;
    for (uint32_t end : s.ends) {
        if (end == begin) return true;
        if (end - begin == 1) {
            const GrammarFrame& f = s.frames[begin];
            const GrammarNodeKind k = g_.nodes[static_cast<size_t>(f.node)].kind;
            if ((k == GrammarNodeKind::integer || k == GrammarNodeKind::number) && number_accepting(f.phase)) return true;
        }
        begin = end;
    }
    return false;
}

bool GrammarRunner::finished(const GrammarState& s) const {
    uint32_t begin = 0;
    for (uint32_t end : s.ends) {
        if (end != begin) return false;
        begin = end;
    }
    return !s.ends.empty();
}

bool GrammarRunner::matches(std::string_view text) {
    GrammarState s = initial();
    return advance(s, text) && accepting(s);
}

}  // namespace dsv4
