// The backend's token draw (Backend::sample): what one row of logits needs to become a token on the device,
// so that only the chosen id and its logprobs cross to the host. runtime/device_draw.h builds these from a
// Sampler's parameters; the CPU backend's body is the oracle the CUDA kernel is held to bit for bit.
//
// The draw, for one row of logits l (after logit bias and penalties, given as sparse adjustments):
//   greedy (temperature 0): the first token holding the maximum.
//   otherwise the weights are w_i = 2^((l_i - max) * log2(e) / T) (sample_weight below: fixed FMA polynomial, so
//   host and device get the same float), held as integers W_i = floor(w_i * 2^40) (sums are exact and the same
//   in any order; the maximum weighs 2^40, a token below 2^-40 of it cannot be drawn). The kept set is the
//   intersection of: top-k (the k first in the order "higher logit, then lower id"), top-p (the shortest prefix
//   of that order, within top-k, whose weight reaches ceil(top_p * the top-k weight)), min-p (W_i >=
//   ceil(min_p * 2^40)). The draw picks, with t = min(floor(u * K), K - 1) for the kept total K, the first token in
//   id order whose running kept weight exceeds t.
// Logprobs are the model's own (log-softmax of the raw logits, before adjustments): lse = max + log(S * 2^-40)
// with S the integer weights at temperature 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/numerics.h"

namespace dsv4 {

constexpr int kSampleMaxTop = 20;      // logprob alternatives per row at most (OpenAI's limit)
constexpr double kSampleFixedOne = 1099511627776.0;  // 2^40: the weight of the maximum

// One row's draw, in backend memory.
struct SampleArgs {
    int64_t row = 0;            // row of the logits buffer
    double u = 0;               // uniform in [0, 1) for the draw
    float temperature = 0;      // 0 = greedy
    float top_p = 1;            // 1 = off
    uint64_t min_p_fixed = 0;   // ceil(min_p * 2^40); 0 = off
    int32_t top_k = 0;          // 0 = off
    int32_t n_top = 0;          // alternatives to report (<= kSampleMaxTop)
    int32_t adjust_begin = 0;   // this row's entries of the adjustment list
    int32_t adjust_count = 0;
};

// A token whose logit changes before the draw: l = l + bias; then, when rep != 1, l = l > 0 ? l / rep : l * rep;
// then l -= sub (the presence and frequency penalties, computed by the host). One entry per distinct token.
struct SampleAdjust {
    int32_t token = 0;
    float bias = 0;
    float rep = 1;
    float sub = 0;
};

enum SampleStatus : int32_t {
    kSampleOk = 0,
    kSampleBadLogit = 1,     // a raw logit is NaN or +inf (`bad_token` names it)
    kSampleBadAdjusted = 2,  // an adjusted logit is NaN or +inf
    kSampleAllBanned = 3,    // every adjusted logit is -inf
};

struct SampleOut {
    int32_t token = -1;
    int32_t status = kSampleOk;
    int32_t bad_token = -1;
    int32_t n_top = 0;
    float logprob = 0;
    int32_t top_ids[kSampleMaxTop] = {};
    float top_logprobs[kSampleMaxTop] = {};
};

// One row's draw as a caller asks for it: the model sets args.row and args.adjust_begin / adjust_count when it
// uploads the step's requests.
struct DrawRequest {
    SampleArgs args;
    std::vector<SampleAdjust> adjust;
};

// Order-preserving key of a float: a larger logit has a larger key (-inf lowest of the non-NaN values).
DSV4_HD uint32_t sample_key(float x) {
    const uint32_t b = nm_bits(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

DSV4_HD float sample_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

// 2^x for x <= 0: a degree-7 polynomial of the fraction after rounding x to an integer, every step one fused
// multiply-add (the same bits on the host and the device); 0 below 2^-126, exactly 1 at 0.
DSV4_HD float sample_exp2(float x) {
    if (!(x >= -126.0f)) return 0.0f;
    const float n = (x + 12582912.0f) - 12582912.0f;  // round to nearest integer (1.5 * 2^23 shifter)
    const float f = x - n;                             // [-0.5, 0.5]
    float p = 1.525273380405984e-05f;
    p = sample_fma(p, f, 1.540353039338161e-04f);
    p = sample_fma(p, f, 1.333355814642844e-03f);
    p = sample_fma(p, f, 9.618129107628477e-03f);
    p = sample_fma(p, f, 5.550410866482158e-02f);
    p = sample_fma(p, f, 2.402265069591007e-01f);
    p = sample_fma(p, f, 6.931471805599453e-01f);
    p = sample_fma(p, f, 1.0f);
    return p * nm_from_bits((uint32_t)((int32_t)n + 127) << 23);
}

// The integer weight of logit x (max: the row's maximum, scale: log2(e) / T as a float).
DSV4_HD uint64_t sample_weight(float x, float max, float scale) {
    const float w = sample_exp2((x - max) * scale);
    return (uint64_t)(w * 1099511627776.0f);  // exact: a power-of-two scale, truncated
}

DSV4_HD float sample_scale(float temperature) { return (float)(1.4426950408889634 / (double)temperature); }

// The adjusted logit of one SampleAdjust entry.
DSV4_HD float sample_adjust(float l, const SampleAdjust& a) {
    l = l + a.bias;
    if (a.rep != 1.0f) l = l > 0.0f ? l / a.rep : l * a.rep;
    return l - a.sub;
}

}  // namespace dsv4
