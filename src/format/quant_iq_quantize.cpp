// IQ2_XXS, IQ2_XS and IQ1_S quantizers (IQ1_S: see quantize_iq1_block). Both store each group of 8 values as a point of a fixed grid (256 or 512
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
//
// With AVX2 the point search (best_points) scores eight candidates per vector and all groups of a
// sub-scale together. Each candidate's error comes from the same float operations, summed in the same
// order, as when one candidate filled a vector, and the first minimum is kept, so the bytes are those of
// scoring the candidates one at a time that way (the scalar path sums each candidate left to right).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "format/quant_codecs.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {
namespace {

constexpr int kGroup = 8;
constexpr int kCombos = 6561;  // 3^8 level combinations
constexpr float kIq2Levels[3] = {8.0f, 25.0f, 43.0f};
constexpr float kIq1Levels[3] = {-1.0f, 0.0f, 1.0f};
constexpr int kMaxCandidates = 24;
constexpr int kTiers = 3;  // distinct distances kept per combination
constexpr int kChunk = 8;  // candidates scored at once by the vector search
constexpr int kMaxChunks = (kMaxCandidates + kChunk - 1) / kChunk;
static_assert(kMaxChunks * kChunk <= 32, "chunk hits fit one 32-bit mask");

struct GridIndex {
    int n = 0;
    float cut_low = 0, cut_high = 0;    // rounding thresholds between the three levels
    std::vector<float> points;          // [n][8]
    std::vector<uint32_t> first;        // candidates of combo c: cand[first[c] .. first[c+1])
    std::vector<uint16_t> cand;
    float levels[3] = {};               // every coordinate of every point is one of these
    // The same candidates in chunks of kChunk for the vector search: chunks of combo c are
    // chunks[chunk_first[c] .. chunk_first[c+1]). A short last chunk repeats its last candidate, which
    // ties with it and so is never chosen over it.
    struct Chunk {
        // Bits 4j..4j+2 of levels[lane]: the level (0..2) of the candidate's coordinate j, plus 4 for
        // j >= 4 (best_points' table layout).
        uint32_t levels[kChunk];
        uint16_t ids[kChunk];
    };
    std::vector<uint32_t> chunk_first;
    std::vector<Chunk> chunks;
};

// Entry m: the sum of 3^j over the set bits j of m (the base-3 number with digits m's bits).
struct Pow3Sums {
    uint16_t v[256];
};
constexpr Pow3Sums make_pow3_sums() {
    Pow3Sums t{};
    for (int m = 0; m < 256; ++m)
        for (int j = 0, p = 1; j < kGroup; ++j, p *= 3)
            if ((m >> j) & 1) t.v[m] = (uint16_t)(t.v[m] + p);
    return t;
}
constexpr Pow3Sums kPow3Sums = make_pow3_sums();

// `levels`: the three coordinate values of the grid; `signed_bytes`: entries hold int8 (IQ1) or uint8 (IQ2).
GridIndex build_index(const uint64_t* grid, int n, const float* levels, bool signed_bytes) {
    GridIndex gi;
    gi.n = n;
    gi.cut_low = 0.5f * (levels[0] + levels[1]);
    gi.cut_high = 0.5f * (levels[1] + levels[2]);
    std::copy(levels, levels + 3, gi.levels);
    gi.points.resize((size_t)n * kGroup);
    for (int g = 0; g < n; ++g)
        for (int j = 0; j < kGroup; ++j) {
            const uint8_t b = (uint8_t)(grid[g] >> (8 * j));
            gi.points[(size_t)g * kGroup + j] = signed_bytes ? (float)(int8_t)b : (float)b;
        }
    gi.first.resize(kCombos + 1);
    std::vector<std::pair<float, uint16_t>> dist((size_t)n);
    for (int c = 0; c < kCombos; ++c) {
        float center[kGroup];
        for (int j = 0, r = c; j < kGroup; ++j, r /= 3) center[j] = levels[r % 3];
        for (int g = 0; g < n; ++g) {
            float d2 = 0;
            for (int j = 0; j < kGroup; ++j) {
                const float e = center[j] - gi.points[(size_t)g * kGroup + j];
                d2 += e * e;
            }
            dist[(size_t)g] = {d2, (uint16_t)g};
        }
        // Only the nearest kMaxCandidates are read; (distance, index) pairs have no ties, so their order is
        // that of a full sort.
        std::partial_sort(dist.begin(), dist.begin() + std::min(n, kMaxCandidates), dist.end());
        // The nearest few distances: the true optimum for values between levels is among them.
        gi.first[(size_t)c] = (uint32_t)gi.cand.size();
        int tiers = 0;
        for (int k = 0; k < n && k < kMaxCandidates; ++k) {
            if (k > 0 && dist[(size_t)k].first > dist[(size_t)k - 1].first && ++tiers == kTiers) break;
            gi.cand.push_back(dist[(size_t)k].second);
        }
    }
    gi.first[kCombos] = (uint32_t)gi.cand.size();
    gi.chunk_first.resize(kCombos + 1);
    for (int c = 0; c < kCombos; ++c) {
        gi.chunk_first[(size_t)c] = (uint32_t)gi.chunks.size();
        const uint32_t b = gi.first[(size_t)c], e = gi.first[(size_t)c + 1];
        for (uint32_t k0 = b; k0 < e; k0 += kChunk) {
            GridIndex::Chunk ch{};
            for (int lane = 0; lane < kChunk; ++lane) {
                const uint16_t g = gi.cand[std::min<size_t>(k0 + (uint32_t)lane, e - 1)];
                ch.ids[lane] = g;
                for (int j = 0; j < kGroup; ++j) {
                    const float p = gi.points[(size_t)g * kGroup + j];
                    const int level = p == levels[0] ? 0 : p == levels[1] ? 1 : 2;
                    DSV4_CHECK_MSG(p == levels[level], "IQ grid point %d has a coordinate off its levels", (int)g);
                    ch.levels[lane] |= (uint32_t)(level + (j >= 4 ? 4 : 0)) << (4 * j);
                }
            }
            gi.chunks.push_back(ch);
        }
        // Every combination gets kMaxChunks chunks, so the vector search runs fixed loops; the copies
        // tie with the candidates they repeat and come after them, so they are never chosen.
        while (gi.chunks.size() - gi.chunk_first[(size_t)c] < (size_t)kMaxChunks) gi.chunks.push_back(gi.chunks.back());
    }
    gi.chunk_first[kCombos] = (uint32_t)gi.chunks.size();
    return gi;
}

const GridIndex& iq2xxs_index() {
    static const GridIndex gi = build_index(kIq2xxsGrid, 256, kIq2Levels, false);
    return gi;
}
const GridIndex& iq2xs_index() {
    static const GridIndex gi = build_index(kIq2xsGrid, 512, kIq2Levels, false);
    return gi;
}
const GridIndex& iq1s_index() {
    static const GridIndex gi = build_index(kIq1sGrid, 2048, kIq1Levels, true);
    return gi;
}

#if !defined(__AVX2__)
// Best grid point for targets a at sub-scale dl, the grid shifted by `shift` (IQ1's delta; 0 for IQ2):
// minimizes sum w (a - dl (g + shift))^2 and returns it. One candidate at a time.
float best_point_scalar(const GridIndex& gi, const float* a, const float* w, float dl, uint16_t* out, float shift) {
    const float inv = 1.0f / dl;
    float best = INFINITY;
    uint16_t best_g = 0;
    int combo = 0;
    for (int j = kGroup - 1; j >= 0; --j) {
        const float t = a[j] * inv - shift;
        combo = combo * 3 + (t >= gi.cut_high ? 2 : t >= gi.cut_low ? 1 : 0);
    }
    for (uint32_t k = gi.first[(size_t)combo]; k < gi.first[(size_t)combo + 1]; ++k) {
        const uint16_t g = gi.cand[(size_t)k];
        const float* p = &gi.points[(size_t)g * kGroup];
        float e = 0;
        for (int j = 0; j < kGroup; ++j) {
            const float r = a[j] - dl * (p[j] + shift);
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
#endif

// best_point_scalar for n groups at once (the groups of one sub-scale): err[k] and idx[k] for targets a[k] with
// weights w[k]. The vector form runs every stage for all n groups together, so their independent work
// overlaps.
template <int n>
void best_points(const GridIndex& gi, const float* const* a, const float* const* w, float dl, float shift,
                 uint16_t* idx, float* err) {
#if defined(__AVX2__)
    const float inv = 1.0f / dl;
    // The level of each coordinate is the count of the two cuts it reaches, so the combination is
    // sum_j 3^j ([t_j >= cut_low] + [t_j >= cut_high]): two compares, their sign masks, two lookups.
    __m256 va[n], vw[n];
    int combo[n];
    for (int k = 0; k < n; ++k) {
        va[k] = _mm256_loadu_ps(a[k]);
        vw[k] = _mm256_loadu_ps(w[k]);
        const __m256 t = _mm256_sub_ps(_mm256_mul_ps(va[k], _mm256_set1_ps(inv)), _mm256_set1_ps(shift));
        const int low = _mm256_movemask_ps(_mm256_cmp_ps(t, _mm256_set1_ps(gi.cut_low), _CMP_GE_OQ));
        const int high = _mm256_movemask_ps(_mm256_cmp_ps(t, _mm256_set1_ps(gi.cut_high), _CMP_GE_OQ));
        combo[k] = kPow3Sums.v[low] + kPow3Sums.v[high];
    }
    // Eight candidates at a time, one per lane. Every coordinate is one of three levels, so the error
    // term w_j (a_j - dl (level + shift))^2 of coordinate j takes three values, computed once per call
    // with the same operations as the scalar search; each candidate's terms are then looked up by its
    // levels (one permute per coordinate) and summed in the order ((e0+e4)+(e2+e6))+((e1+e5)+(e3+e7)).
    // table[j % 4] holds coordinate j's three terms in lanes 0..2 (j < 4) or 4..6 (j >= 4).
    const __m256 vdl = _mm256_set1_ps(dl), vshift = _mm256_set1_ps(shift), vinf = _mm256_set1_ps(INFINITY);
    __m256 table[n][4];
    for (int k = 0; k < n; ++k) {
        __m256 term[3];
        for (int v = 0; v < 3; ++v) {
            const __m256 r =
                _mm256_sub_ps(va[k], _mm256_mul_ps(vdl, _mm256_add_ps(_mm256_set1_ps(gi.levels[v]), vshift)));
            term[v] = _mm256_mul_ps(vw[k], _mm256_mul_ps(r, r));
        }
        const __m256 lo01 = _mm256_unpacklo_ps(term[0], term[1]), hi01 = _mm256_unpackhi_ps(term[0], term[1]);
        const __m256 lo22 = _mm256_unpacklo_ps(term[2], term[2]), hi22 = _mm256_unpackhi_ps(term[2], term[2]);
        table[k][0] = _mm256_shuffle_ps(lo01, lo22, _MM_SHUFFLE(1, 0, 1, 0));
        table[k][1] = _mm256_shuffle_ps(lo01, lo22, _MM_SHUFFLE(3, 2, 3, 2));
        table[k][2] = _mm256_shuffle_ps(hi01, hi22, _MM_SHUFFLE(1, 0, 1, 0));
        table[k][3] = _mm256_shuffle_ps(hi01, hi22, _MM_SHUFFLE(3, 2, 3, 2));
    }
    // All chunks first, then one minimum over them and the first candidate holding it (the earliest, as
    // the scalar scan keeps), without a data-dependent branch.
    for (int k = 0; k < n; ++k) {
        const GridIndex::Chunk* ch = &gi.chunks[gi.chunk_first[(size_t)combo[k]]];
        __m256 sums[kMaxChunks];
        __m256 m = vinf;
        for (int c = 0; c < kMaxChunks; ++c) {
            // A permute reads the low 3 bits of each index lane, so coordinate j's levels need one shift.
            const __m256i lv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch[c].levels));
            const __m256* tk = table[k];
            const __m256 e0 = _mm256_permutevar8x32_ps(tk[0], lv);
            const __m256 e1 = _mm256_permutevar8x32_ps(tk[1], _mm256_srli_epi32(lv, 4));
            const __m256 e2 = _mm256_permutevar8x32_ps(tk[2], _mm256_srli_epi32(lv, 8));
            const __m256 e3 = _mm256_permutevar8x32_ps(tk[3], _mm256_srli_epi32(lv, 12));
            const __m256 e4 = _mm256_permutevar8x32_ps(tk[0], _mm256_srli_epi32(lv, 16));
            const __m256 e5 = _mm256_permutevar8x32_ps(tk[1], _mm256_srli_epi32(lv, 20));
            const __m256 e6 = _mm256_permutevar8x32_ps(tk[2], _mm256_srli_epi32(lv, 24));
            const __m256 e7 = _mm256_permutevar8x32_ps(tk[3], _mm256_srli_epi32(lv, 28));
            __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(e0, e4), _mm256_add_ps(e2, e6)),
                                       _mm256_add_ps(_mm256_add_ps(e1, e5), _mm256_add_ps(e3, e7)));
            sum = _mm256_blendv_ps(sum, vinf, _mm256_cmp_ps(sum, sum, _CMP_UNORD_Q));  // a NaN is never chosen
            sums[c] = sum;
            m = _mm256_min_ps(m, sum);
        }
        m = _mm256_min_ps(m, _mm256_permute2f128_ps(m, m, 1));
        m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
        m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
        err[k] = _mm256_cvtss_f32(m);
        idx[k] = 0;
        if (err[k] < INFINITY) {
            uint32_t hits = 0;
            for (int c = 0; c < kMaxChunks; ++c)
                hits |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(sums[c], m, _CMP_EQ_OQ)) << (kChunk * c);
            const int first = __builtin_ctz(hits);
            idx[k] = ch[first / kChunk].ids[first % kChunk];
        }
    }
#else
    for (int k = 0; k < n; ++k) err[k] = best_point_scalar(gi, a[k], w[k], dl, &idx[k], shift);
#endif
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

// Error of the n groups of one sub-scale at sub-scale dl, with their points.
template <int n>
float unit_error(const GridIndex& gi, const Group* gs, float dl, uint16_t* idx) {
    float e = 0;
    if (dl <= 0) {
        for (int k = 0; k < n; ++k)
            for (int j = 0; j < kGroup; ++j) e += gs[k].w[j] * gs[k].a[j] * gs[k].a[j];
        for (int k = 0; k < n; ++k) idx[k] = 0;
        return e;
    }
    const float* a[n];
    const float* w[n];
    float err[n];
    for (int k = 0; k < n; ++k) {
        a[k] = gs[k].a;
        w[k] = gs[k].w;
    }
    best_points<n>(gi, a, w, dl, 0.0f, idx, err);
    for (int k = 0; k < n; ++k) e += err[k];
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
            const float e = unit_error<kPerUnit>(gi, ug, dl, idx);
            if (e < best) {
                best = e;
                free_dl[u] = dl;
            }
        }
        // Least-squares scale for the best candidate's points.
        unit_error<kPerUnit>(gi, ug, free_dl[u], idx);
        float num = 0, den = 0;
        for (int k = 0; k < kPerUnit; ++k)
            for (int j = 0; j < kGroup; ++j) {
                const float p = gi.points[(size_t)idx[k] * kGroup + j];
                num += ug[k].w[j] * ug[k].a[j] * p;
                den += ug[k].w[j] * p * p;
            }
        if (den > 0 && num > 0 && unit_error<kPerUnit>(gi, ug, num / den, idx) < best) free_dl[u] = num / den;
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
                const float e = unit_error<kPerUnit>(gi, gs + u * kPerUnit, d * (0.5f + (float)s) * 0.25f, idx);
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

// IQ1_S, per 32 values: dl = d (2 s + 1) with a 3-bit s, a shift of +-1/8 shared by the 32 values, and four
// 8-value points of the 2048-point ternary grid (11-bit indices). Same search shape as IQ2: a free scale and
// shift per sub-block, then a few block scales with the nearest 3-bit sub-scales and both shifts.
struct Iq1Unit {
    float err = INFINITY;
    float dl = 0;
    int s = 0;
    bool neg = false;
    uint16_t idx[4] = {};
};

float iq1_unit_error(const GridIndex& gi, const float* x, const float* w, float dl, bool neg, uint16_t* idx) {
    const float* a[4] = {x, x + kGroup, x + 2 * kGroup, x + 3 * kGroup};
    const float* ws[4] = {w, w + kGroup, w + 2 * kGroup, w + 3 * kGroup};
    float err[4];
    best_points<4>(gi, a, ws, dl, neg ? -kIq1Delta : kIq1Delta, idx, err);
    float e = 0;
    for (int k = 0; k < 4; ++k) e += err[k];
    return e;
}

void quantize_iq1_block(const GridIndex& gi, const float* x, const float* w_in, BlockIq1S* y) {
    constexpr int kUnits = kQKK / 32;
    float ones[kQKK];
    const float* w = w_in;
    if (!w) {
        for (float& v : ones) v = 1.0f;
        w = ones;
    }
    Iq1Unit free_u[kUnits];
    uint16_t idx[4];
    for (int u = 0; u < kUnits; ++u) {
        const float* xu = x + u * 32;
        const float* wu = w + u * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xu[j]));
        if (amax <= 0) continue;
        for (bool neg : {false, true}) {
            for (float v : {0.7f, 0.85f, 1.0f, 1.15f, 1.3f, 1.5f}) {
                const float dl = amax / v;
                const float e = iq1_unit_error(gi, xu, wu, dl, neg, idx);
                if (e < free_u[u].err) free_u[u] = {e, dl, 0, neg, {idx[0], idx[1], idx[2], idx[3]}};
            }
        }
        // Least-squares scale for the chosen points and shift.
        const float shift = free_u[u].neg ? -kIq1Delta : kIq1Delta;
        float num = 0, den = 0;
        for (int k = 0; k < 4; ++k)
            for (int j = 0; j < kGroup; ++j) {
                const float p = gi.points[(size_t)free_u[u].idx[k] * kGroup + j] + shift;
                num += wu[k * kGroup + j] * xu[k * kGroup + j] * p;
                den += wu[k * kGroup + j] * p * p;
            }
        if (den > 0 && num > 0) {
            const float e = iq1_unit_error(gi, xu, wu, num / den, free_u[u].neg, idx);
            if (e < free_u[u].err) free_u[u] = {e, num / den, 0, free_u[u].neg, {idx[0], idx[1], idx[2], idx[3]}};
        }
    }
    float dmax = 0;
    for (const Iq1Unit& u : free_u) dmax = std::max(dmax, u.dl);
    std::memset(y, 0, sizeof *y);
    if (dmax <= 0) return;
    const float d0 = dmax / 15.0f;
    float best_total = INFINITY;
    Iq1Unit chosen[kUnits], trial[kUnits];
    for (float f : {1.0f, 0.92f, 0.85f, 0.78f}) {
        const uint16_t dh = f32_to_f16(d0 * f);
        const float d = f16_to_f32(dh);
        if (d <= 0) continue;
        float total = 0;
        for (int u = 0; u < kUnits && total < best_total; ++u) {
            trial[u] = Iq1Unit{};
            const int s0 = std::clamp((int)std::lround((free_u[u].dl / d - 1.0f) * 0.5f), 0, 7);
            for (int s = std::max(0, s0 - 1); s <= std::min(7, s0 + 1); ++s)
                for (bool neg : {false, true}) {
                    const float dl = d * (float)(2 * s + 1);
                    const float e = iq1_unit_error(gi, x + u * 32, w + u * 32, dl, neg, idx);
                    if (e < trial[u].err) trial[u] = {e, dl, s, neg, {idx[0], idx[1], idx[2], idx[3]}};
                }
            total += trial[u].err;
        }
        if (total < best_total) {
            best_total = total;
            y->d = dh;
            std::memcpy(chosen, trial, sizeof chosen);
        }
    }
    for (int u = 0; u < kUnits; ++u) {
        uint16_t qh = (uint16_t)((chosen[u].s << 12) | (chosen[u].neg ? 0x8000 : 0));
        for (int l = 0; l < 4; ++l) {
            y->qs[4 * u + l] = (uint8_t)(chosen[u].idx[l] & 255);
            qh = (uint16_t)(qh | (((chosen[u].idx[l] >> 8) & 7) << (3 * l)));
        }
        y->qh[u] = qh;
    }
}

}  // namespace

void quant_iq1_s(const float* x, const float* w, BlockIq1S* y, int64_t nb) {
    const GridIndex& gi = iq1s_index();
    for (int64_t i = 0; i < nb; ++i, x += kQKK, w = w ? w + kQKK : nullptr) quantize_iq1_block(gi, x, w, &y[i]);
}

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
