// IQ2_XXS and IQ2_XS quantizers. Both store each group of 8 values as a point of a fixed grid (256 or 512
// points with coordinates in {8, 25, 43}) times a 4-bit sub-scale of the block's f16 scale,
// dl = d * (0.5 + s) / 4, with 7 sign bits (the 8th implied by even parity): one sub-scale per 32 values for
// IQ2_XXS, per 16 for IQ2_XS.
//
// The search: signs come from the values; a group with an odd number of negatives flips the sign of its
// smallest value (its magnitude target becomes negative). For a candidate sub-scale, each group rounds its
// magnitudes to the nearest level per coordinate and tries the grid points closest to that rounded point
// (a per-grid table built once: the rounded point itself when it is on the grid, and the nearest points
// otherwise), scored by the exact squared error. Each sub-block first picks its best free scale among
// candidates (refined by least squares with the chosen points); then a few block scales d are tried, each
// sub-block taking the best of the five 4-bit sub-scales nearest its free scale. With importance weights
// (an imatrix's mean squared activation per column) every error and least-squares fit is weighted by them. tests/test_quant_iq.cpp
// compares the result with an exhaustive search.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "format/quant_codecs.h"

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {
namespace {

constexpr int kGroup = 8;
constexpr int kCombos = 6561;  // 3^8 level combinations
constexpr float kLevels[3] = {8.0f, 25.0f, 43.0f};
constexpr int kMaxCandidates = 24;
constexpr int kTiers = 3;  // distinct distances kept per combination

struct GridIndex {
    int n = 0;
    std::vector<float> points;          // [n][8]
    std::vector<uint32_t> first;        // candidates of combo c: cand[first[c] .. first[c+1])
    std::vector<uint16_t> cand;
};

GridIndex build_index(const uint64_t* grid, int n) {
    GridIndex gi;
    gi.n = n;
    gi.points.resize((size_t)n * kGroup);
    for (int g = 0; g < n; ++g)
        for (int j = 0; j < kGroup; ++j) gi.points[(size_t)g * kGroup + j] = (float)(uint8_t)(grid[g] >> (8 * j));
    gi.first.resize(kCombos + 1);
    std::vector<std::pair<float, uint16_t>> dist((size_t)n);
    for (int c = 0; c < kCombos; ++c) {
        float center[kGroup];
        for (int j = 0, r = c; j < kGroup; ++j, r /= 3) center[j] = kLevels[r % 3];
        for (int g = 0; g < n; ++g) {
            float d2 = 0;
            for (int j = 0; j < kGroup; ++j) {
                const float e = center[j] - gi.points[(size_t)g * kGroup + j];
                d2 += e * e;
            }
            dist[(size_t)g] = {d2, (uint16_t)g};
        }
        std::sort(dist.begin(), dist.end());
        // The nearest few distances: the true optimum for values between levels is among them.
        gi.first[(size_t)c] = (uint32_t)gi.cand.size();
        int tiers = 0;
        for (int k = 0; k < n && k < kMaxCandidates; ++k) {
            if (k > 0 && dist[(size_t)k].first > dist[(size_t)k - 1].first && ++tiers == kTiers) break;
            gi.cand.push_back(dist[(size_t)k].second);
        }
    }
    gi.first[kCombos] = (uint32_t)gi.cand.size();
    return gi;
}

const GridIndex& iq2xxs_index() {
    static const GridIndex gi = build_index(kIq2xxsGrid, 256);
    return gi;
}
const GridIndex& iq2xs_index() {
    static const GridIndex gi = build_index(kIq2xsGrid, 512);
    return gi;
}

// Best grid point for magnitudes a (some may be negative: parity-flipped) at sub-scale dl; returns the error.
float best_point(const GridIndex& gi, const float* a, const float* w, float dl, uint16_t* out) {
    const float inv = 1.0f / dl;
    int combo = 0;
    for (int j = kGroup - 1; j >= 0; --j) {
        const float t = a[j] * inv;
        combo = combo * 3 + (t < 16.5f ? 0 : t < 34.0f ? 1 : 2);
    }
    float best = INFINITY;
    uint16_t best_g = 0;
    for (uint32_t k = gi.first[(size_t)combo]; k < gi.first[(size_t)combo + 1]; ++k) {
        const uint16_t g = gi.cand[(size_t)k];
        const float* p = &gi.points[(size_t)g * kGroup];
        float e = 0;
        for (int j = 0; j < kGroup; ++j) {
            const float r = a[j] - dl * p[j];
            e += w[j] * r * r;
        }
        if (e < best) {
            best = e;
            best_g = g;
        }
    }
    *out = best_g;
    return best;
}

struct Group {
    float a[kGroup];
    float w[kGroup];  // importance of each value (1 without an importance matrix)
    uint8_t sign7;
};

// Signs and magnitude targets of 8 values; the flipped one is the least important w * x^2.
Group make_group(const float* x, const float* w) {
    Group g;
    uint8_t signs = 0;
    int smallest = 0;
    for (int j = 0; j < kGroup; ++j) {
        g.a[j] = std::fabs(x[j]);
        g.w[j] = w ? std::max(w[j], 0.0f) : 1.0f;
        if (x[j] < 0) signs |= (uint8_t)(1u << j);
        if (g.w[j] * g.a[j] * g.a[j] < g.w[smallest] * g.a[smallest] * g.a[smallest]) smallest = j;
    }
    if (__builtin_popcount(signs) & 1) {
        signs ^= (uint8_t)(1u << smallest);
        g.a[smallest] = -g.a[smallest];
    }
    g.sign7 = signs & 127;
    return g;
}

// Error of `n` groups at sub-scale dl, with their points.
float unit_error(const GridIndex& gi, const Group* gs, int n, float dl, uint16_t* idx) {
    if (dl <= 0) {
        float e = 0;
        for (int k = 0; k < n; ++k)
            for (int j = 0; j < kGroup; ++j) e += gs[k].w[j] * gs[k].a[j] * gs[k].a[j];
        for (int k = 0; k < n; ++k) idx[k] = 0;
        return e;
    }
    float e = 0;
    for (int k = 0; k < n; ++k) e += best_point(gi, gs[k].a, gs[k].w, dl, &idx[k]);
    return e;
}

// Quantize 256 values: groups per sub-scale `per_unit` (4 for IQ2_XXS, 2 for IQ2_XS). Outputs d (f16 bits),
// one 4-bit sub-scale per unit, and one grid index per group.
template <int kPerUnit>
void quantize_block(const GridIndex& gi, const float* x, const float* w, uint16_t* d_out, uint8_t* s_out,
                    uint16_t* idx_out, uint8_t* sign_out) {
    constexpr int kGroups = kQKK / kGroup;
    constexpr int kUnits = kGroups / kPerUnit;
    Group gs[kGroups];
    for (int k = 0; k < kGroups; ++k) {
        gs[k] = make_group(x + k * kGroup, w ? w + k * kGroup : nullptr);
        sign_out[k] = gs[k].sign7;
    }
    // Free scale per unit.
    float free_dl[kUnits];
    uint16_t idx[kPerUnit];
    for (int u = 0; u < kUnits; ++u) {
        const Group* ug = gs + u * kPerUnit;
        float amax = 0;
        for (int k = 0; k < kPerUnit; ++k)
            for (int j = 0; j < kGroup; ++j) amax = std::max(amax, ug[k].a[j]);
        free_dl[u] = 0;
        if (amax <= 0) continue;
        float best = INFINITY;
        for (float v = 14.0f; v <= 47.5f; v += 5.5f) {
            const float dl = amax / v;
            const float e = unit_error(gi, ug, kPerUnit, dl, idx);
            if (e < best) {
                best = e;
                free_dl[u] = dl;
            }
        }
        // Least-squares scale for the best candidate's points.
        unit_error(gi, ug, kPerUnit, free_dl[u], idx);
        float num = 0, den = 0;
        for (int k = 0; k < kPerUnit; ++k)
            for (int j = 0; j < kGroup; ++j) {
                const float p = gi.points[(size_t)idx[k] * kGroup + j];
                num += ug[k].w[j] * ug[k].a[j] * p;
                den += ug[k].w[j] * p * p;
            }
        if (den > 0 && num > 0 && unit_error(gi, ug, kPerUnit, num / den, idx) < best) free_dl[u] = num / den;
    }
    float dmax = 0;
    for (float dl : free_dl) dmax = std::max(dmax, dl);
    if (dmax <= 0) {
        *d_out = 0;
        std::memset(s_out, 0, kUnits);
        std::memset(idx_out, 0, kGroups * sizeof(uint16_t));
        return;
    }
    const float d0 = dmax * 4.0f / 15.5f;
    float best_total = INFINITY;
    uint8_t s_try[kUnits];
    uint16_t idx_try[kGroups];
    for (float f : {1.0f, 0.92f, 0.85f, 0.78f}) {
        const uint16_t dh = f32_to_f16(d0 * f);
        const float d = f16_to_f32(dh);
        if (d <= 0) continue;
        float total = 0;
        for (int u = 0; u < kUnits && total < best_total; ++u) {
            const int s0 = std::clamp((int)std::lround(4.0f * free_dl[u] / d - 0.5f), 0, 15);
            float best = INFINITY;
            for (int s = std::max(0, s0 - 2); s <= std::min(15, s0 + 2); ++s) {
                const float e = unit_error(gi, gs + u * kPerUnit, kPerUnit, d * (0.5f + (float)s) * 0.25f, idx);
                if (e < best) {
                    best = e;
                    s_try[u] = (uint8_t)s;
                    std::memcpy(idx_try + u * kPerUnit, idx, sizeof idx);
                }
            }
            total += best;
        }
        if (total < best_total) {
            best_total = total;
            *d_out = dh;
            std::memcpy(s_out, s_try, kUnits);
            std::memcpy(idx_out, idx_try, sizeof idx_try);
        }
    }
}

}  // namespace

void quant_iq2_xxs(const float* x, const float* w, BlockIq2Xxs* y, int64_t nb) {
    const GridIndex& gi = iq2xxs_index();
    for (int64_t i = 0; i < nb; ++i, x += kQKK, w = w ? w + kQKK : nullptr) {
        uint8_t scales[kQKK / 32], signs[kQKK / 8];
        uint16_t idx[kQKK / 8];
        quantize_block<4>(gi, x, w, &y[i].d, scales, idx, signs);
        for (int ib = 0; ib < kQKK / 32; ++ib) {
            uint8_t bytes[8];
            for (int l = 0; l < 4; ++l) bytes[l] = (uint8_t)idx[4 * ib + l];
            uint32_t aux = (uint32_t)scales[ib] << 28;
            for (int l = 0; l < 4; ++l) aux |= (uint32_t)signs[4 * ib + l] << (7 * l);
            std::memcpy(bytes + 4, &aux, 4);
            std::memcpy(y[i].qs + 4 * ib, bytes, 8);
        }
    }
}

void quant_iq2_xs(const float* x, const float* w, BlockIq2Xs* y, int64_t nb) {
    const GridIndex& gi = iq2xs_index();
    for (int64_t i = 0; i < nb; ++i, x += kQKK, w = w ? w + kQKK : nullptr) {
        uint8_t scales[kQKK / 16], signs[kQKK / 8];
        uint16_t idx[kQKK / 8];
        quantize_block<2>(gi, x, w, &y[i].d, scales, idx, signs);
        for (int k = 0; k < kQKK / 8; ++k) y[i].qs[k] = (uint16_t)(idx[k] | (signs[k] << 9));
        for (int ib = 0; ib < kQKK / 32; ++ib) y[i].scales[ib] = (uint8_t)(scales[2 * ib] | (scales[2 * ib + 1] << 4));
    }
}

}  // namespace dsv4::quant
