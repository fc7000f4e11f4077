// Decimal ranges as digit automata: [a, b] splits by digit count, and a same-length range by its first digit
// into a lower edge, a middle of free digits and an upper edge.
#include "runtime/number_grammar.h"

#include <cmath>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

class Builder {
public:
    explicit Builder(Grammar& g) : g_(g) {}

    int32_t literal(std::string text) {
        GrammarNode n;
        n.kind = GrammarNodeKind::literal;
        n.text = std::move(text);
        return g_.add(std::move(n));
    }
    int32_t digits(char lo, char hi) {
        GrammarNode n;
        n.kind = GrammarNodeKind::byte_set;
        for (int c = lo; c <= hi; ++c) n.bytes[c >> 6] |= uint64_t{1} << (c & 63);
        return g_.add(std::move(n));
    }
    int32_t seq(std::vector<int32_t> kids) {
        if (kids.size() == 1) return kids[0];
        GrammarNode n;
        n.kind = GrammarNodeKind::sequence;
        n.children = std::move(kids);
        return g_.add(std::move(n));
    }
    int32_t alt(std::vector<int32_t> kids) {
        if (kids.size() == 1) return kids[0];
        GrammarNode n;
        n.kind = GrammarNodeKind::any_of;
        n.children = std::move(kids);
        return g_.add(std::move(n));
    }
    int32_t any_digit() {
        if (any_digit_ < 0) any_digit_ = digits('0', '9');
        return any_digit_;
    }

    // Digit strings s of a's length with a <= s <= b (same length, so the order is the string order).
    int32_t same_length(const std::string& a, const std::string& b) {
        if (a.size() == 1) return digits(a[0], b[0]);
        const std::string ra = a.substr(1), rb = b.substr(1);
        if (a[0] == b[0]) return seq({literal(std::string(1, a[0])), same_length(ra, rb)});
        const std::string zeros(ra.size(), '0'), nines(ra.size(), '9');
        std::vector<int32_t> alts;
        char mid_lo = a[0], mid_hi = b[0];
        if (ra != zeros) {
            alts.push_back(seq({literal(std::string(1, a[0])), same_length(ra, nines)}));
            ++mid_lo;
        }
        if (rb != nines) --mid_hi;
        if (mid_lo <= mid_hi) {
            std::vector<int32_t> kids = {digits(mid_lo, mid_hi)};
            for (size_t k = 0; k < ra.size(); ++k) kids.push_back(any_digit());
            alts.push_back(seq(std::move(kids)));
        }
        if (rb != nines) alts.push_back(seq({literal(std::string(1, b[0])), same_length(zeros, rb)}));
        return alt(std::move(alts));
    }

    // Non-negative integers in [a, b] (a <= b), no leading zeros.
    int32_t non_negative(int64_t a, int64_t b) {
        std::vector<int32_t> alts;
        if (a == 0) {
            alts.push_back(literal("0"));
            a = 1;
        }
        int64_t low = 1;  // 10^(L-1)
        for (int len = 1; len <= 15 && a <= b; ++len, low *= 10) {
            const int64_t high = low * 10 - 1;
            if (a > high) continue;
            const int64_t x = std::max(a, low), y = std::min(b, high);
            if (x <= y) alts.push_back(same_length(std::to_string(x), std::to_string(y)));
        }
        return alt(std::move(alts));
    }

    // Integers in [lo, hi] (lo <= hi).
    int32_t integers(int64_t lo, int64_t hi) {
        std::vector<int32_t> alts;
        if (lo < 0) alts.push_back(seq({literal("-"), non_negative(std::max<int64_t>(1, -hi), -lo)}));
        if (hi >= 0) alts.push_back(non_negative(std::max<int64_t>(0, lo), hi));
        return alt(std::move(alts));
    }

    // ".F": 1 to 15 digits, the last one not 0.
    int32_t fraction() {
        GrammarNode rep;
        rep.kind = GrammarNodeKind::repeat;
        rep.items = any_digit();
        rep.min_items = 0;
        rep.max_items = 14;
        return seq({literal("."), g_.add(std::move(rep)), digits('1', '9')});
    }

private:
    Grammar& g_;
    int32_t any_digit_ = -1;
};

// The integer range [A, B] inside a bound pair, clamped to the engine's integers.
bool integer_range(const NumberBounds& b, int64_t& lo, int64_t& hi) {
    const double max = static_cast<double>(kMaxGrammarInteger);
    double l = std::ceil(b.lo), h = std::floor(b.hi);
    if (b.lo_exclusive && l == b.lo) l += 1;
    if (b.hi_exclusive && h == b.hi) h -= 1;
    l = std::max(l, -max);
    h = std::min(h, max);
    if (l > h) return false;
    lo = static_cast<int64_t>(l);
    hi = static_cast<int64_t>(h);
    return true;
}

std::string bounds_text(const NumberBounds& b) {
    auto num = [](double v) {
        std::string s = std::to_string(v);
        while (s.size() > 1 && s.back() == '0') s.pop_back();
        if (!s.empty() && s.back() == '.') s.pop_back();
        return s;
    };
    std::string t = b.lo_exclusive ? "(" : "[";
    t += b.lo <= -1e300 ? "-inf" : num(b.lo);
    t += ", ";
    t += b.hi >= 1e300 ? "inf" : num(b.hi);
    t += b.hi_exclusive ? ")" : "]";
    return t;
}

}  // namespace

Result<int32_t> add_bounded_integer(Grammar& g, const NumberBounds& b) {
    int64_t lo, hi;
    if (!integer_range(b, lo, hi)) return make_error("the range " + bounds_text(b) + " holds no integer of at most 15 digits");
    Builder nb(g);
    return nb.integers(lo, hi);
}

Result<int32_t> add_bounded_number(Grammar& g, const NumberBounds& b) {
    // Integer bounds, exclusive or not, rounded inward when they are not integers.
    NumberBounds inward = b;
    if (std::ceil(b.lo) != b.lo) inward.lo = std::ceil(b.lo), inward.lo_exclusive = false;
    if (std::floor(b.hi) != b.hi) inward.hi = std::floor(b.hi), inward.hi_exclusive = false;
    inward.lo = std::max(inward.lo, -static_cast<double>(kMaxGrammarInteger));
    inward.hi = std::min(inward.hi, static_cast<double>(kMaxGrammarInteger));
    if (inward.lo > inward.hi || (inward.lo == inward.hi && (inward.lo_exclusive || inward.hi_exclusive)))
        return make_error("the range " + bounds_text(b) + " is narrower than the integer steps the grammar bounds numbers by");
    const auto A = static_cast<int64_t>(inward.lo), B = static_cast<int64_t>(inward.hi);
    Builder nb(g);
    std::vector<int32_t> alts;
    int64_t lo, hi;
    if (integer_range(inward, lo, hi)) alts.push_back(nb.integers(lo, hi));
    // I.F with F > 0: in (I, I + 1) for I >= 0, in (-(I + 1), -I) for "-I.F"; both ends inside [A, B].
    if (std::max<int64_t>(A, 0) <= B - 1) alts.push_back(nb.seq({nb.non_negative(std::max<int64_t>(A, 0), B - 1), nb.fraction()}));
    if (std::max<int64_t>(0, -B) <= -A - 1)
        alts.push_back(nb.seq({nb.literal("-"), nb.non_negative(std::max<int64_t>(0, -B), -A - 1), nb.fraction()}));
    if (alts.empty()) return make_error("the range " + bounds_text(b) + " holds no number the grammar can write");
    return nb.alt(std::move(alts));
}

}  // namespace dsv4
