// K-quant encoders (Q2_K..Q6_K) following llama.cpp's reference, non-imatrix algorithms
// (quantize_row_*_ref): per sub-block a scale (and min) is searched to minimise a weighted error, the
// sub-block scales are quantized against one f16 super-scale, and the values are re-quantized with the
// scales as they will be decoded. With importance weights (an imatrix) the same searches minimise the
// squared error weighted by importance_weights. tests/test_quant_k.cpp pins the unweighted bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "format/quant_codecs.h"
#include "format/quant_k_scales.h"

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // a sub-block below this magnitude counts as all zero

// Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves the rounded integer in the
// low mantissa bits.
inline int nearest_int(float f) {
    const float v = f + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &v, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Eight lanes of float / int32 (GCC/Clang vector extensions: plain vector instructions where the target
// has them, scalar code where it does not). Each lane does exactly what the scalar helpers above do.
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

// Lane-wise (float)clamp_int(nearest_int(f), lo, hi). Vectors travel by reference: passing 32-byte
// vectors by value has a different ABI with and without AVX, which GCC warns about.
inline void round_clamp(const F8& f, int lo, int hi, F8& out) {
    const F8 v = f + 12582912.0f;
    I8 l = ((I8)v & 0x007fffff) - 0x00400000;
    l = l < lo ? I8{} + lo : l;
    l = l > hi ? I8{} + hi : l;
    out = __builtin_convertvector(l, F8);
}

// Symmetric codes l in [-nmax, nmax-1] with weights w (x^2 in the reference); starting from the scale that
// maps the extreme value to -nmax, try 18 nearby scales and keep the one maximising
// (sum w x l)^2 / sum w l^2, i.e. the weighted least-squares optimum. Codes come back offset by +nmax.
// Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, const float* weights, int8_t* L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        std::memset(L, 0, (size_t)n);
        return 0.0f;
    }
    auto fit = [&](float iscale, float* sumlx, float* suml2, bool store) {
        *sumlx = 0.0f;
        *suml2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            if (store) L[i] = (int8_t)(l + nmax);
            const float w = weights[i];
            *sumlx += w * x[i] * (float)l;
            *suml2 += w * (float)l * (float)l;
        }
    };
    float sumlx, suml2;
    fit(-(float)nmax / max, &sumlx, &suml2, true);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float iscale = -((float)nmax + 0.1f * (float)is) / max;
        fit(iscale, &sumlx, &suml2, false);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            fit(iscale, &sumlx, &suml2, true);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q3_K's symmetric search: start from the extreme-value scale, then up to 5 rounds of coordinate
// descent, moving one code at a time when that raises (sum w x l)^2 / sum w l^2 (w = x^2 in the
// reference). Codes come back offset by +nmax. Returns the weighted least-squares scale.
float make_q3_quants(int n, int nmax, const float* x, const float* weights, int8_t* L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        std::memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -(float)nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = weights[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int round = 0; round < 5; ++round) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = weights[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx <= 0) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * (float)new_l;
            sl2 += w * (float)new_l * (float)new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Affine codes l in [0, nmax] for x ~ scale * l - the_min (min <= 0). Starts from the min/max mapping,
// then for nstep+1 stretched candidate scales solves the weighted least-squares (scale, min) for the
// codes they induce, keeping the one of least weighted error (|diff| if kMad, else diff^2). As in the
// reference, an accepted candidate's min replaces the data min for the candidates after it.
//
// Until a candidate is accepted the candidates are independent, so eight at a time share one pass over the
// values, one per vector lane; after an acceptance the lanes past it are evaluated again with the new min
// (about 2.5 acceptances per search on Gaussian data). Each lane runs the sequential search's float
// operations in the same order, so the result is bit for bit the one of trying the candidates one after
// another.
constexpr int kMaxGroup = 32;  // values per sub-block: 16 (Q2_K) or 32 (Q4_K, Q5_K)

template <bool kMad>
float weighted_error(int n, const float* x, const float* weights, float scale, float mn, const uint8_t* codes) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        float diff = scale * (float)codes[i] + mn - x[i];
        diff = kMad ? std::fabs(diff) : diff * diff;
        err += weights[i] * diff;
    }
    return err;
}

template <bool kMad>
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, float rmin,
                       float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    const float iscale0 = (float)nmax / (max - min);
    float scale = 1.0f / iscale0;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)clamp_int(nearest_int(iscale0 * (x[i] - min)), 0, nmax);
    float best_error = weighted_error<kMad>(n, x, weights, scale, min, L);

    // Candidates in chunks of 8 lanes from `first`, the first one not yet tried with the current min: lane c
    // holds is = first + c (lanes past nstep are computed and never read). After an acceptance at lane c
    // the next chunk starts at is = first + c + 1.
    const F8 lane_index = {0, 1, 2, 3, 4, 5, 6, 7};
    F8 codes[kMaxGroup];
    for (int first = 0; first <= nstep;) {
        const F8 iscale = (rmin + rdelta * ((float)first + lane_index) + (float)nmax) / (max - min);
        F8 sum_l = {}, sum_l2 = {}, sum_xl = {};
        for (int i = 0; i < n; ++i) {
            const float xi = x[i], xm = x[i] - min, w = weights[i];
            F8 l;
            round_clamp(iscale * xm, 0, nmax, l);
            codes[i] = l;
            const F8 wl = w * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * xi;
        }
        const F8 D = sum_w * sum_l2 - sum_l * sum_l;
        F8 lane_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        F8 lane_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        const I8 clamped = lane_min > 0.0f;
        lane_scale = clamped ? sum_xl / sum_l2 : lane_scale;
        lane_min = clamped ? F8{} : lane_min;
        F8 err = {};
        for (int i = 0; i < n; ++i) {
            const F8 diff = lane_scale * codes[i] + lane_min - x[i];
            err += weights[i] * (kMad ? (F8)((I8)diff & 0x7fffffff) : diff * diff);
        }
        const int active = std::min(8, nstep + 1 - first);
        int accepted = -1;
        for (int c = 0; c < active; ++c) {
            if (D[c] > 0 && err[c] < best_error) {
                accepted = c;
                break;
            }
        }
        if (accepted < 0) {
            first += active;
            continue;
        }
        for (int i = 0; i < n; ++i) L[i] = (uint8_t)codes[i][accepted];
        best_error = err[accepted];
        scale = lane_scale[accepted];
        min = lane_min[accepted];
        first += accepted + 1;
    }
    *the_min = -min;
    return scale;
}

// Pack 2-bit codes: byte l of each 32-byte chunk holds codes l, l+32, l+64, l+96 of a 128-value half.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < kQKK; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

// Importance weights of one super-block from an imatrix's per-column weights qw: qw * sqrt(sigma2 + x^2)
// with sigma2 twice the block's mean square, as llama.cpp weights its K-quant searches. The imatrix says
// which columns matter to the layer's output; the data term makes large values count more while every
// value keeps a floor set by the block's spread. Returns false where the block's qw are all zero (no
// activation reached those columns), and the type's own weights are used instead.
bool importance_weights(const float* x, const float* qw, float* out) {
    float sum_x2 = 0, sum_qw = 0;
    for (int i = 0; i < kQKK; ++i) {
        sum_x2 += x[i] * x[i];
        sum_qw += std::max(qw[i], 0.0f);
    }
    if (!(sum_qw > 0)) return false;
    const float sigma2 = 2 * sum_x2 / kQKK;
    for (int i = 0; i < kQKK; ++i) out[i] = std::max(qw[i], 0.0f) * std::sqrt(sigma2 + x[i] * x[i]);
    return true;
}

// Q4_K/Q5_K share everything but the code range and the search parameters.
struct K4Params {
    int nmax;
    float rmin;
    int nstep;
};

// Fills the 6-bit scales/mins, d, dmin and the final codes L (0..nmax) of one Q4_K/Q5_K super-block.
// `qw`: the block's imatrix weights, or null.
void quant_k4_common(const float* x, const float* qw, const K4Params& p, uint8_t* packed_scales, uint16_t* d16,
                     uint16_t* dmin16, uint8_t* L) {
    float scales[8], mins[8], weights[32], importance[kQKK];
    const bool weighted = qw && importance_weights(x, qw, importance);
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        if (weighted) {
            std::memcpy(weights, importance + 32 * j, sizeof weights);
        } else {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
            const float av_x = std::sqrt(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
        }
        scales[j] = make_qkx2_quants<false>(32, p.nmax, xs, weights, L + 32 * j, &mins[j], p.rmin, 0.1f, p.nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        // The reference stores nearest_int's result in a uint8_t before clamping to 63.
        const uint8_t ls = (uint8_t)std::min<int>(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        const uint8_t lm = (uint8_t)std::min<int>(63, (uint8_t)nearest_int(inv_min * mins[j]));
        if (j < 4) {
            packed_scales[j] = ls;
            packed_scales[j + 4] = lm;
        } else {
            packed_scales[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
            packed_scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed_scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = f32_to_f16(max_scale / 63.f);
    *dmin16 = f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k4_scale_min(j, packed_scales, &sc, &m);
        const float d = f16_to_f32(*d16) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = f16_to_f32(*dmin16) * (float)m;
        for (int ii = 0; ii < 32; ++ii) L[32 * j + ii] = (uint8_t)clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, p.nmax);
    }
}

}  // namespace

// Without importance weights each K type follows its reference search; with them (qw non-null: one per
// value), every sub-block search minimises the squared error weighted by importance_weights.
void quant_q2_k(const float* x, const float* qw, BlockQ2K* y, int64_t nb) {
    constexpr float q4scale = 15.f;
    for (int64_t i = 0; i < nb; ++i, x += kQKK, qw = qw ? qw + kQKK : nullptr) {
        uint8_t L[kQKK];
        float weights[16], mins[16], scales[16], importance[kQKK];
        const bool weighted = qw && importance_weights(x, qw, importance);
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            if (weighted) {
                // Squared error, as the weights already grow with |x| (the reference's |x|-weighted
                // absolute error has no weighted least-squares counterpart).
                std::memcpy(weights, importance + 16 * j, sizeof weights);
                scales[j] = make_qkx2_quants<false>(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15);
            } else {
                for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
                scales[j] = make_qkx2_quants<true>(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15);
            }
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = f32_to_f16(max_scale / q4scale);
        } else {
            std::memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = f32_to_f16(0.f);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = f16_to_f32(y[i].d) * (float)(y[i].scales[j] & 0x0F);
            if (d == 0.0f) continue;
            const float dm = f16_to_f32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (uint8_t)clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void quant_q3_k(const float* x, const float* qw, BlockQ3K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK, qw = qw ? qw + kQKK : nullptr) {
        int8_t L[kQKK];
        float scales[16], weights[kQKK];
        if (!(qw && importance_weights(x, qw, weights))) {
            for (int l = 0; l < kQKK; ++l) weights[l] = x[l] * x[l];
        }
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, weights + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; ++j) {
                const int l = clamp_int((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    y[i].scales[j] = (uint8_t)(l & 0x0F);
                } else {
                    y[i].scales[j - 8] |= (uint8_t)((l & 0x0F) << 4);
                }
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = f32_to_f16(1 / iscale);
        } else {
            y[i].d = f32_to_f16(0.f);
        }
        int8_t sc[16];
        unpack_q3_k_scales(y[i].scales, sc);
        for (int j = 0; j < 16; ++j) {
            const float d = f16_to_f32(y[i].d) * (float)(sc[j] - 32);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        // High bit of code j goes to bit j/32 of hmask[j % 32]; the low 2 bits are packed like Q2_K.
        std::memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[kQKK];
        for (int j = 0; j < kQKK; ++j) {
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            low[j] = (uint8_t)(L[j] & 3);
        }
        pack_2bit(low, y[i].qs);
    }
}

void quant_q4_k(const float* x, const float* qw, BlockQ4K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK, qw = qw ? qw + kQKK : nullptr) {
        uint8_t L[kQKK];
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        quant_k4_common(x, qw, K4Params{15, -1.f, 20}, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int j = 0; j < kQKK; j += 64) {
            for (int l = 0; l < 32; ++l) y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void quant_q5_k(const float* x, const float* qw, BlockQ5K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK, qw = qw ? qw + kQKK : nullptr) {
        uint8_t L[kQKK];
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        quant_k4_common(x, qw, K4Params{31, -0.5f, 15}, y[i].scales, &y[i].d, &y[i].dmin, L);
        // Codes of 32-value group g: low nibbles in qs (groups paired per 32 bytes), bit 4 in qh bit g.
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 8; ++g) {
            for (int l = 0; l < 32; ++l) {
                const int v = L[32 * g + l];
                if (v > 15) y[i].qh[l] |= (uint8_t)(1 << g);
            }
        }
        for (int j = 0; j < kQKK; j += 64) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j / 2 + l] = (uint8_t)((L[j + l] & 0x0F) | ((L[j + l + 32] & 0x0F) << 4));
            }
        }
    }
}

void quant_q6_k(const float* x, const float* qw, BlockQ6K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK, qw = qw ? qw + kQKK : nullptr) {
        int8_t L[kQKK];
        float scales[16], weights[kQKK];
        if (!(qw && importance_weights(x, qw, weights))) {
            for (int l = 0; l < kQKK; ++l) weights[l] = x[l] * x[l];
        }
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, weights + 16 * ib, L + 16 * ib);
            const float a = std::fabs(scales[ib]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < kGroupMaxEps) {
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) y[i].scales[ib] = (int8_t)std::min(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < 16; ++j) {
            const float d = f16_to_f32(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        // Per 128-value half: ql[l] / ql[l+32] take the low nibbles of codes l, l+32 (low half of the
        // byte) and l+64, l+96 (high half); qh[l] takes the top 2 bits of all four.
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const int c0 = L[j + l], c1 = L[j + l + 32], c2 = L[j + l + 64], c3 = L[j + l + 96];
                ql[l] = (uint8_t)((c0 & 0x0F) | ((c2 & 0x0F) << 4));
                ql[l + 32] = (uint8_t)((c1 & 0x0F) | ((c3 & 0x0F) << 4));
                qh[l] = (uint8_t)((c0 >> 4) | ((c1 >> 4) << 2) | ((c2 >> 4) << 4) | ((c3 >> 4) << 6));
            }
        }
    }
}

}  // namespace dsv4::quant
