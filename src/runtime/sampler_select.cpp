// Vocabulary passes of the sampler. The loops over the whole vocabulary are written in lanes of 16 (fixed
// order, so sums are the same on every platform) that the compiler turns into vector code; everything that
// needs an order works on the few tokens left after a threshold, never on the vocabulary.
#include "runtime/sampler_select.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace dsv4::sampling {
namespace {

constexpr size_t kLanes = 16;

struct Member {
    int32_t id;
    float logit;
    float q;
};

Prefix least_likely(const std::vector<Member>& m) {
    Member worst = m[0];
    for (const Member& x : m)
        if (more_likely({worst.id, worst.logit}, {x.id, x.logit})) worst = x;
    return {worst.logit, worst.id};
}

// The shortest prefix of `m` (ids ascending) reaching `need`, by histograms of its logit range until few
// tokens (or only ties) are left, which are ordered and walked.
Prefix refine(std::vector<Member> m, double need) {
    constexpr size_t kFew = 64, kFine = 256;
    std::vector<double> mass(kFine);
    std::vector<Member> sub;
    for (;;) {
        float hi = m[0].logit, lo = m[0].logit;
        for (const Member& x : m) {
            hi = std::max(hi, x.logit);
            lo = std::min(lo, x.logit);
        }
        const double scale = static_cast<double>(kFine) / (static_cast<double>(hi) - lo);
        auto bucket = [&](float x) {
            return std::min(static_cast<size_t>((static_cast<double>(hi) - x) * scale), kFine - 1);
        };
        bool walk = m.size() <= kFew || hi == lo;
        size_t b = 0;
        double before = 0.0;
        if (!walk) {
            std::fill(mass.begin(), mass.end(), 0.0);
            for (const Member& x : m) mass[bucket(x.logit)] += x.q;
            for (b = 0; b < kFine; ++b) {
                if (mass[b] == 0.0) continue;
                if (before + mass[b] >= need) break;
                before += mass[b];
            }
            if (b == kFine) return least_likely(m);  // rounding left `need` above the total: keep all
            sub.clear();
            for (const Member& x : m)
                if (bucket(x.logit) == b) sub.push_back(x);
            walk = sub.size() == m.size();  // floats too close to split: order what is left
        }
        if (walk) {
            if (hi != lo)
                std::sort(m.begin(), m.end(), [](const Member& a, const Member& c) {
                    return more_likely({a.id, a.logit}, {c.id, c.logit});
                });
            double cum = 0.0;
            for (const Member& x : m) {
                cum += x.q;
                if (cum >= need) return {x.logit, x.id};
            }
            return {m.back().logit, m.back().id};
        }
        need -= before;
        m.swap(sub);
    }
}

// idx[i] = the bucket of x[i] (0 at hi, `kBuckets - 1` and below at the bottom), or kBuckets outside `within`.
// Token ids are first + i. Plain pointers and 32-bit ids, so that the loop is vector code.
constexpr size_t kBuckets = 2048;
void bucket_numbers(const float* __restrict x, size_t n, int32_t first, const Prefix& within, float hi, float scale,
                    uint16_t* __restrict idx) {
    const float tau = within.tau;
    const int32_t last = static_cast<int32_t>(std::clamp<int64_t>(within.last_id, -1, INT32_MAX));
    for (size_t i = 0; i < n; ++i) {
        const float v = x[i];
        const int32_t id = first + static_cast<int32_t>(i);
        const bool in = v > tau || (v == tau && id <= last);
        const float d = std::min((hi - v) * scale, static_cast<float>(kBuckets - 1));
        idx[i] = static_cast<uint16_t>(in ? static_cast<int32_t>(d) : static_cast<int32_t>(kBuckets));
    }
}

}  // namespace

Scan scan_logits(std::span<const float> l) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float mx[kLanes], mn[kLanes];
    int32_t cnt[kLanes] = {}, bad[kLanes] = {};
    std::fill(mx, mx + kLanes, kNegInf);
    std::fill(mn, mn + kLanes, kInf);
    const size_t n = l.size(), body = n - n % kLanes;
    for (size_t i = 0; i < body; i += kLanes) {
        for (size_t j = 0; j < kLanes; ++j) {
            const float x = l[i + j];
            bad[j] |= !(x < kInf);
            mx[j] = x > mx[j] ? x : mx[j];
            mn[j] = (x < mn[j] && x > kNegInf) ? x : mn[j];
            cnt[j] += x > kNegInf;
        }
    }
    for (size_t i = body; i < n; ++i) {
        const float x = l[i];
        bad[0] |= !(x < kInf);
        mx[0] = x > mx[0] ? x : mx[0];
        mn[0] = (x < mn[0] && x > kNegInf) ? x : mn[0];
        cnt[0] += x > kNegInf;
    }
    Scan s;
    bool any_bad = false;
    for (size_t j = 0; j < kLanes; ++j) {
        s.max = std::max(s.max, mx[j]);
        s.min_finite = std::min(s.min_finite, mn[j]);
        s.n_finite += cnt[j];
        any_bad |= bad[j] != 0;
    }
    if (any_bad)
        for (size_t i = 0; i < n && s.first_bad < 0; ++i)
            if (!(l[i] < kInf)) s.first_bad = static_cast<int64_t>(i);
    return s;
}

int64_t first_index_of(std::span<const float> l, float v) {
    const size_t n = l.size(), body = n - n % kLanes;
    size_t i = 0;
    for (; i < body; i += kLanes) {
        int32_t hits = 0;  // a count, not a bool, so that the compiler vectorizes it
        for (size_t j = 0; j < kLanes; ++j) hits += l[i + j] == v;
        if (hits) break;
    }
    for (; i < n; ++i)
        if (l[i] == v) return static_cast<int64_t>(i);
    return -1;
}

double exp_weights(std::span<const float> l, float max, float scale, float floor, float* w,
                   std::vector<double>& block_sums) {
    const size_t n = l.size();
    block_sums.clear();
    double total = 0.0;
    for (size_t b0 = 0; b0 < n; b0 += kBlock) {
        const size_t e = std::min(n, b0 + kBlock);
        float all[kLanes] = {}, kept[kLanes] = {};
        size_t i = b0;
        for (; i + kLanes <= e; i += kLanes) {
            for (size_t j = 0; j < kLanes; ++j) {
                const float x = l[i + j];
                const float v = exp2_nonpos((x - max) * scale);
                const float k = x >= floor ? v : 0.0f;
                w[i + j] = k;
                all[j] += v;
                kept[j] += k;
            }
        }
        for (; i < e; ++i) {
            const float v = exp2_nonpos((l[i] - max) * scale);
            w[i] = l[i] >= floor ? v : 0.0f;
            all[0] += v;
            kept[0] += w[i];
        }
        double s = 0.0;
        for (size_t j = 0; j < kLanes; ++j) {
            total += all[j];
            s += kept[j];
        }
        block_sums.push_back(s);
    }
    return total;
}

double exp_sum(std::span<const float> l, float max, float scale) {
    const size_t n = l.size();
    double total = 0.0;
    for (size_t b0 = 0; b0 < n; b0 += kBlock) {
        const size_t e = std::min(n, b0 + kBlock);
        float acc[kLanes] = {};
        size_t i = b0;
        for (; i + kLanes <= e; i += kLanes)
            for (size_t j = 0; j < kLanes; ++j) acc[j] += exp2_nonpos((l[i + j] - max) * scale);
        for (; i < e; ++i) acc[0] += exp2_nonpos((l[i] - max) * scale);
        for (float a : acc) total += a;
    }
    return total;
}

void top_n(std::span<const float> l, size_t n, std::vector<Ranked>& out) {
    out.clear();
    const size_t sz = l.size();
    n = std::min(n, sz);
    if (n == 0) return;
    // The n-th largest of the spans' maxima is a floor: at least n tokens (those maxima) reach it, so the n
    // most likely all do, and only the spans whose maximum reaches it need a look.
    constexpr size_t kSpan = 64;
    const size_t n_spans = (sz + kSpan - 1) / kSpan;
    float floor = kNegInf;
    thread_local std::vector<float> span_max, tmp;
    if (n_spans > n) {
        span_max.resize(n_spans);
        for (size_t s = 0; s < n_spans; ++s) {
            const size_t b = s * kSpan, e = std::min(sz, b + kSpan);
            float m[kLanes];
            std::fill(m, m + kLanes, kNegInf);
            size_t i = b;
            for (; i + kLanes <= e; i += kLanes)
                for (size_t j = 0; j < kLanes; ++j) m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
            for (; i < e; ++i) m[0] = l[i] > m[0] ? l[i] : m[0];
            float mx = m[0];
            for (float x : m) mx = x > mx ? x : mx;
            span_max[s] = mx;
        }
        tmp = span_max;
        std::nth_element(tmp.begin(), tmp.begin() + static_cast<long>(n - 1), tmp.end(), std::greater<float>());
        floor = tmp[n - 1];
        for (size_t s = 0; s < n_spans; ++s) {
            if (!(span_max[s] >= floor)) continue;
            for (size_t i = s * kSpan; i < std::min(sz, (s + 1) * kSpan); ++i)
                if (l[i] >= floor) out.push_back({static_cast<int32_t>(i), l[i]});
        }
    } else {
        for (size_t i = 0; i < sz; ++i) out.push_back({static_cast<int32_t>(i), l[i]});
    }
    if (out.size() > n) {
        std::nth_element(out.begin(), out.begin() + static_cast<long>(n - 1), out.end(), more_likely);
        out.resize(n);
    }
    std::sort(out.begin(), out.end(), more_likely);
}

size_t gather_allowed(std::span<const float> l, std::span<const uint64_t> mask, int32_t* ids, float* logits) {
    size_t k = 0;
    const size_t n = l.size();
    const size_t n_words = std::min(mask.size(), (n + 63) / 64);
    for (size_t w = 0; w < n_words; ++w) {
        const size_t base = w * 64;
        const uint64_t bits = mask[w];
        if (bits == ~uint64_t{0} && base + 64 <= n) {  // a whole word: one copy
            std::copy(l.begin() + static_cast<std::ptrdiff_t>(base), l.begin() + static_cast<std::ptrdiff_t>(base + 64), logits + k);
            for (size_t j = 0; j < 64; ++j) ids[k + j] = static_cast<int32_t>(base + j);
            k += 64;
            continue;
        }
        for (uint64_t b = bits; b != 0; b &= b - 1) {
            const size_t i = base + static_cast<size_t>(std::countr_zero(b));
            if (i >= n) break;
            ids[k] = static_cast<int32_t>(i);
            logits[k++] = l[i];
        }
    }
    return k;
}

size_t count_allowed(std::span<const uint64_t> mask, size_t n) {
    size_t c = 0;
    const size_t n_words = std::min(mask.size(), (n + 63) / 64);
    for (size_t w = 0; w < n_words; ++w) {
        uint64_t bits = mask[w];
        if (w * 64 + 64 > n) bits &= (uint64_t{1} << (n - w * 64)) - 1;
        c += static_cast<size_t>(std::popcount(bits));
    }
    return c;
}

void keep_prefix(std::span<const float> l, const Prefix& keep, float* w, std::vector<double>& block_sums) {
    const size_t n = l.size();
    const float tau = keep.tau;
    const int32_t last = static_cast<int32_t>(std::clamp<int64_t>(keep.last_id, -1, INT32_MAX));
    const float* __restrict x = l.data();
    float* __restrict wp = w;
    for (size_t b = 0; b < block_sums.size(); ++b) {
        const size_t b0 = b * kBlock, e = std::min(n, b0 + kBlock);
        float acc[kLanes] = {};
        size_t i = b0;
        for (; i + kLanes <= e; i += kLanes) {
            for (size_t j = 0; j < kLanes; ++j) {
                const float v = x[i + j];
                const int32_t id = static_cast<int32_t>(i + j);
                const float kept = (v > tau || (v == tau && id <= last)) ? wp[i + j] : 0.0f;
                wp[i + j] = kept;
                acc[j] += kept;
            }
        }
        for (; i < e; ++i) {
            const float v = x[i];
            if (!(v > tau || (v == tau && static_cast<int32_t>(i) <= last))) wp[i] = 0.0f;
            acc[0] += wp[i];
        }
        double s = 0.0;
        for (float a : acc) s += a;
        block_sums[b] = s;
    }
}

Prefix shortest_prefix(std::span<const float> l, const float* w, const Prefix& within, float hi, float lo,
                       double target) {
    const size_t n = l.size();
    auto q = [&](size_t i) { return w ? w[i] : 1.0f; };
    if (hi == lo) {  // one distinct logit: the order is the id order
        double cum = 0.0;
        int64_t last = -1;
        for (size_t i = 0; i < n; ++i) {
            if (!in_prefix(within, l[i], static_cast<int64_t>(i))) continue;
            last = static_cast<int64_t>(i);
            cum += q(i);
            if (cum >= target) break;
        }
        return {hi, last};
    }
    // Linear buckets over [lo, hi], bucket 0 at the top. Only monotonicity matters for correctness: the
    // float map below never puts a lower logit in a higher bucket.
    const float scale = static_cast<float>(
        std::min(static_cast<double>(kBuckets) / (static_cast<double>(hi) - lo), 1e30));
    // Bucket numbers a block at a time (vector code; out of `within` -> kBuckets, a bucket never scanned),
    // then the scattered adds.
    std::vector<double> mass(kBuckets + 1, 0.0);
    thread_local std::vector<uint16_t> idx;  // kept for the collection below
    idx.resize(n);
    for (size_t b0 = 0; b0 < n; b0 += kBlock) {
        const size_t e = std::min(n, b0 + kBlock);
        bucket_numbers(l.data() + b0, e - b0, static_cast<int32_t>(b0), within, hi, scale, idx.data() + b0);
        if (w) {
            for (size_t i = b0; i < e; ++i) mass[idx[i]] += w[i];
        } else {
            for (size_t i = b0; i < e; ++i) mass[idx[i]] += 1.0;
        }
    }
    double before = 0.0;
    size_t b = 0;
    for (; b < kBuckets; ++b) {
        if (mass[b] == 0.0) continue;
        if (before + mass[b] >= target) break;
        before += mass[b];
    }
    std::vector<Member> m;
    if (b == kBuckets) {  // nothing reaches the target (rounding, or a count past the set): all of `within`
        Ranked worst{-1, kNegInf};
        for (size_t i = 0; i < n; ++i) {
            const Ranked r{static_cast<int32_t>(i), l[i]};
            if (in_prefix(within, r.logit, r.id) && (worst.id < 0 || more_likely(worst, r))) worst = r;
        }
        return {worst.logit, worst.id};
    }
    const auto bb = static_cast<uint16_t>(b);
    for (size_t i0 = 0; i0 < n; i0 += kLanes) {
        const size_t e = std::min(n, i0 + kLanes);
        int32_t hits = 0;
        for (size_t i = i0; i < e; ++i) hits += idx[i] == bb;
        if (hits == 0) continue;
        for (size_t i = i0; i < e; ++i)
            if (idx[i] == bb) m.push_back({static_cast<int32_t>(i), l[i], q(i)});
    }
    return refine(std::move(m), target - before);
}

float min_p_logit(float max, float temperature, float min_p) {
    const double c = std::log(static_cast<double>(min_p));
    auto keeps = [&](float x) { return (static_cast<double>(x) - max) / temperature >= c; };
    float x = static_cast<float>(static_cast<double>(max) + static_cast<double>(temperature) * c);
    if (x > max) x = max;
    while (!keeps(x)) x = std::nextafter(x, max);
    while (x > kNegInf && keeps(std::nextafter(x, kNegInf))) x = std::nextafter(x, kNegInf);
    return x;
}

}  // namespace dsv4::sampling
