// The sampler's vocabulary-scale selection, without sorting the vocabulary: one pass for the max, one pass of
// float weights, top-k and top_logprobs by a threshold-pruned partial selection, top-p by a mass histogram
// over the logits refined inside the one bucket that holds the boundary (after a probe of the 64 most likely,
// which holds the nucleus of a peaked distribution), min-p as a logit threshold. A large kept set is drawn
// from in id order over per-block sums, not in likelihood order; top-p alone draws from all the weights and
// draws again when the token falls outside the nucleus (exactly the renormalised distribution). Internal
// to runtime/sampler.cpp (and its tests through the public API); nothing here allocates per token once the
// scratch vectors have grown.
//
// Numerics: the weights are exp((logit - max) / T) computed in float as 2^x with x = (logit - max) * log2(e)/T,
// a fixed degree-7 polynomial after rounding x to an integer (no libm, so the same bits on every platform that
// rounds IEEE float ops the same way; a build that contracts the polynomial into FMAs may differ in the last
// bit). Each weight is within ~2e-7 relative of the exact exp for x in [-1, 0], growing with |x| as the
// float rounding of (logit - max) does (~1e-6 at a weight of 2^-20); weights below 2^-126 are 0. Sums are
// float within 16 lanes of at most 64 terms, then double. Order and ties always come from the logits, never
// the weights, so an inexact weight can move a top-p boundary only when the cumulative mass lands within
// rounding of top_p * total.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace dsv4::sampling {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kBlock = 1024;  // tokens per partial sum, so that a draw walks one block, not the vocabulary

struct Ranked {
    int32_t id;
    float logit;
};

// A strict total order: higher logit first, then lower id. Every selection uses it, so the kept set (and the
// token a given random number picks) never depends on the standard library.
inline bool more_likely(const Ranked& a, const Ranked& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// 2^x for x <= 0 (x may be -inf): 0 below 2^-126. Exact 1 at x = 0, so the max and its ties weigh exactly 1.
inline float exp2_nonpos(float x) {
    const float xc = x < -126.0f ? -126.0f : x;
    constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: x + it rounds x to an integer (round to nearest)
    const float n = (xc + kShifter) - kShifter;
    const float f = xc - n;  // [-0.5, 0.5]; >= 0 when n = -126, so the result is never subnormal
    float p = 1.525273380405984e-05f;  // ln(2)^k / k!, k = 7 .. 1: 2^f to ~1e-8 on [-0.5, 0.5]
    p = p * f + 1.540353039338161e-04f;
    p = p * f + 1.333355814642844e-03f;
    p = p * f + 9.618129107628477e-03f;
    p = p * f + 5.550410866482158e-02f;
    p = p * f + 2.402265069591007e-01f;
    p = p * f + 6.931471805599453e-01f;
    p = p * f + 1.0f;
    const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
    return x < -126.0f ? 0.0f : p * scale;
}

struct Scan {
    float max = kNegInf;                                     // over all tokens (-inf if all are banned)
    float min_finite = std::numeric_limits<float>::infinity();  // smallest logit that is not -inf
    int64_t n_finite = 0;                                    // tokens that are not -inf
    int64_t first_bad = -1;                                  // first NaN or +inf, -1 if none
};
Scan scan_logits(std::span<const float> l);

// First index holding exactly `v` (which must occur).
int64_t first_index_of(std::span<const float> l, float v);

// w[i] = 2^((l[i] - max) * scale) where l[i] >= floor, else 0; block_sums[b] = sum of w over block b of kBlock
// tokens. Returns the total over every token, floor or not (for the log-sum-exp).
double exp_weights(std::span<const float> l, float max, float scale, float floor, float* w,
                   std::vector<double>& block_sums);
// The same total without storing anything.
double exp_sum(std::span<const float> l, float max, float scale);

// The min(n, l.size()) most likely tokens, most likely first (-inf logits rank last, by id).
void top_n(std::span<const float> l, size_t n, std::vector<Ranked>& out);

// A prefix of the more_likely order: token i belongs iff l[i] > tau, or l[i] == tau and i <= last_id.
struct Prefix {
    float tau;
    int64_t last_id;
};
constexpr Prefix kAllFinite{kNegInf, -1};
inline bool in_prefix(const Prefix& p, float l, int64_t id) { return l > p.tau || (l == p.tau && id <= p.last_id); }
inline bool shorter(const Prefix& a, const Prefix& b) {
    return a.tau > b.tau || (a.tau == b.tau && a.last_id < b.last_id);
}

// The tokens whose bit is set in `mask` (bit i of word i / 64; tokens past its end are not allowed), in id
// order, and their logits, into ids[0, n) and logits[0, n) (each room for l.size()); returns n.
size_t gather_allowed(std::span<const float> l, std::span<const uint64_t> mask, int32_t* ids, float* logits);
// How many tokens of a row of n the mask allows.
size_t count_allowed(std::span<const uint64_t> mask, size_t n);

// Zeroes w outside `keep` and sums the blocks again.
void keep_prefix(std::span<const float> l, const Prefix& keep, float* w, std::vector<double>& block_sums);

// The shortest prefix inside `within` whose summed weight (w[i], or 1 per token when w is null) reaches
// `target`; all of `within` when nothing does. hi / lo: the largest and smallest finite logit.
Prefix shortest_prefix(std::span<const float> l, const float* w, const Prefix& within, float hi, float lo,
                       double target);

// The smallest logit L with (L - max) / T >= log(min_p) in double: min-p keeps exactly the tokens l >= L
// (p >= min_p * p_max), a prefix, so it composes with top-k and top-p by taking the shortest.
float min_p_logit(float max, float temperature, float min_p);

}  // namespace dsv4::sampling
