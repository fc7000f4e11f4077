// A lane's share of one weight row in the register kernels (cuda_moe_gate_up_xreg.cu, cuda_moe_down_xreg.cu), per
// weight format: LaneCodec<T>::dot<H, P>(blk, v0, lut, a0, a1, a2, sx, xsum) is the dot product of the lane's
// 16 H values v0 .. v0 + 16 H of the 256-value block at shared address blk (a ring slot's copy of the row, with the
// address it has in global memory mod 16) with its activation digits (lane_quantize: 4 H words per plane, one
// 32-value digit block of scale sx; xsum, with kSums, the f32 sums of each 16 values). The lane's values never
// straddle two blocks (16 H divides 256).
//
// The formats: Q2_K (its block minimum through xsum), the grid formats whose weights are signed integers times a
// scale of 32 or 16 values (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: the same words as their DigitCodec in
// cuda_gemv_digits.cuh) and IQ1_S / IQ1_M, whose weights dl (g + delta), g in {-1, 0, 1} and delta = +-1/8,
// are (dl / 8) (8 g +- 1): int8 words too, so no activation sums are needed for the shift.
//
// A grid format reads its unit's fields (load: the 32 values of sub-block u), then each half's 4 weight words
// (half_words) and the scale of the unit (scale(un, 0)) or of each half (kHalfScales).
#pragma once

#include <cstdint>

#include "format/ggml_type.h"
#include "kernels/cuda/cuda_gemv_digits.cuh"
#include "kernels/cuda/cuda_gemv_xreg.cuh"

namespace dsv4::cuda::xreg {

template <GgmlType T>
struct LaneCodec;

template <int H>
using Words = uint32_t[4 * H];

// q[i] of a unit's two words for an index known only at run time (H = 1 lanes take the half of their lane):
// a select, where indexing would put the unit in local memory.
__device__ __forceinline__ uint32_t word_of(const uint32_t (&q)[2], int i) { return i ? q[1] : q[0]; }

// The grid formats' dot: C::load(blk, u) -> unit, C::half_words(unit, h, lut, w) writes half h's 4 signed
// weight words at w, C::scale(unit, h) its scale (h ignored without kHalfScales).
template <class C>
struct GridLane {
    static constexpr bool kSums = false;
    template <int H, int P>
    __device__ __forceinline__ static float dot(uint32_t blk, int v0, const gemv::Lut& lut, const Words<H>& a0,
                                                const Words<H>& a1, const Words<H>& a2, float sx, const float*) {
        const int u = v0 >> 5, h0 = (v0 & 31) >> 4;
        const auto un = C::load(blk, u);
        uint32_t w[4 * H];
#pragma unroll
        for (int hh = 0; hh < H; ++hh) C::half_words(un, h0 + hh, lut, w + 4 * hh);
        if constexpr (!C::kHalfScales) {
            gemv::DigitSums ds;
            gemv::digit_dot<true, 4 * H, P>(w, a0, a1, a2, ds);
            return (C::scale(un, 0) * sx) * gemv::digit_value(ds);
        } else {
            float y = 0.0f;
#pragma unroll
            for (int hh = 0; hh < H; ++hh) {
                uint32_t b0[4], b1[4], b2[4], wh[4];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    wh[i] = w[4 * hh + i], b0[i] = a0[4 * hh + i], b1[i] = a1[4 * hh + i], b2[i] = a2[4 * hh + i];
                gemv::DigitSums ds;
                gemv::digit_dot<true, 4, P>(wh, b0, b1, b2, ds);
                y = fmaf(C::scale(un, h0 + hh) * sx, gemv::digit_value(ds), y);
            }
            return y;
        }
    }
};

// IQ2_XXS: d qs[64] (per sub-block: 4 grid indices, then 4 x 7 sign bits and a 4-bit scale); the Lut's shared
// selectors pick the signed grid values (DigitCodec<IQ2_XXS>).
template <>
struct LaneCodec<GgmlType::IQ2_XXS> : GridLane<LaneCodec<GgmlType::IQ2_XXS>> {
    static constexpr int kBytes = 66, kAlign = 2;
    static constexpr bool kHalfScales = false;
    using Digits = gemv::DigitCodec<GgmlType::IQ2_XXS>;
    struct Unit {
        uint32_t q[2];
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        lds_words_any(blk + 2 + 8 * u, un.q);
        un.d = gemv::half_bits(lds16(blk));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int) {
        return gemv::mul_rn(gemv::mul_rn(un.d, 0.5f + gemv::small_to_float(un.q[1] >> 28)), 0.25f);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t sel = lut.grid[(un.q[0] >> (8 * l)) & 255] + lut.sign[(un.q[1] >> (7 * l)) & 127];
            w[2 * i] = gemv::prmt(Digits::kSignedLo, Digits::kSignedHi, sel);
            w[2 * i + 1] = gemv::prmt(Digits::kSignedLo, Digits::kSignedHi, sel >> 16);
        }
    }
};

// IQ2_XS: d qs[32] (u16: 9-bit grid index, 7-bit sign index) scales[8]; a scale per half (iq2_scale).
template <>
struct LaneCodec<GgmlType::IQ2_XS> : GridLane<LaneCodec<GgmlType::IQ2_XS>> {
    static constexpr int kBytes = 74, kAlign = 2;
    static constexpr bool kHalfScales = true;
    struct Unit {
        uint32_t q[2], sc;
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        lds_words_any(blk + 2 + 8 * u, un.q);
        un.sc = lds8(blk + 66 + u);
        un.d = gemv::half_bits(lds16(blk));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int h) {
        return gemv::iq2_scale(un.d, (un.sc >> (4 * h)) & 15);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t qi = (word_of(un.q, l >> 1) >> (16 * (l & 1))) & 0xFFFFu;
            const uint64_t e = gemv::ld_table(lut.grid64, qi & 511);
            gemv::signed_group(w + 2 * i, (uint32_t)e, (uint32_t)(e >> 32), gemv::ld_table(lut.signs, qi >> 9));
        }
    }
};

// IQ2_S: d qs[32] signs[32] qh[8] scales[8]; a 10-bit grid index per group (qs and 2 bits of qh), an explicit
// sign byte, a scale per half as IQ2_XS.
template <>
struct LaneCodec<GgmlType::IQ2_S> : GridLane<LaneCodec<GgmlType::IQ2_S>> {
    static constexpr int kBytes = 82, kAlign = 2;
    static constexpr bool kHalfScales = true;
    struct Unit {
        uint32_t qs, sg, qh, sc;
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        uint32_t q[1], s[1];
        lds_words_any(blk + 2 + 4 * u, q);
        lds_words_any(blk + 34 + 4 * u, s);
        un.qs = q[0], un.sg = s[0];
        un.qh = lds8(blk + 66 + u);
        un.sc = lds8(blk + 74 + u);
        un.d = gemv::half_bits(lds16(blk));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int h) {
        return gemv::iq2_scale(un.d, (un.sc >> (4 * h)) & 15);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t idx = ((un.qs >> (8 * l)) & 255) | ((un.qh << (8 - 2 * l)) & 0x300u);
            const uint64_t e = gemv::ld_table(lut.grid64, idx);
            gemv::signed_group(w + 2 * i, (uint32_t)e, (uint32_t)(e >> 32), un.sg >> (8 * l));
        }
    }
};

// IQ3_XXS: d qs[64] aux[8] (u32: 4 x 7 sign bits, a 4-bit scale); two 4-value grid entries per group.
template <>
struct LaneCodec<GgmlType::IQ3_XXS> : GridLane<LaneCodec<GgmlType::IQ3_XXS>> {
    static constexpr int kBytes = 98, kAlign = 2;
    static constexpr bool kHalfScales = false;
    struct Unit {
        uint32_t qs[2], aux;
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        uint32_t a[1];
        lds_words_any(blk + 2 + 8 * u, un.qs);
        lds_words_any(blk + 66 + 4 * u, a);
        un.aux = a[0];
        un.d = gemv::half_bits(lds16(blk));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int) {
        return gemv::mul_rn(gemv::mul_rn(un.d, 0.5f + gemv::small_to_float(un.aux >> 28)), 0.5f);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t sg = gemv::ld_table(lut.signs, (un.aux >> (7 * l)) & 127);
            const uint32_t i2 = word_of(un.qs, l >> 1) >> (16 * (l & 1));
            w[2 * i] = gemv::signed_bytes(gemv::ld_table(lut.grid32, i2 & 255), sg);
            w[2 * i + 1] = gemv::signed_bytes(gemv::ld_table(lut.grid32, (i2 >> 8) & 255), sg >> 4);
        }
    }
};

// IQ3_S: d qs[64] qh[8] signs[32] scales[4]; 9-bit grid indices (qs and a bit of qh), explicit sign bytes, a
// scale d (1 + 2 s) per sub-block.
template <>
struct LaneCodec<GgmlType::IQ3_S> : GridLane<LaneCodec<GgmlType::IQ3_S>> {
    static constexpr int kBytes = 110, kAlign = 2;
    static constexpr bool kHalfScales = false;
    struct Unit {
        uint32_t qs[2], sg, qh;
        float db;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        uint32_t s[1];
        lds_words_any(blk + 2 + 8 * u, un.qs);
        lds_words_any(blk + 74 + 4 * u, s);
        un.sg = s[0];
        un.qh = lds8(blk + 66 + u);
        const uint32_t sc = lds8(blk + 106 + u / 2);
        un.db = gemv::mul_rn(gemv::half_bits(lds16(blk)), gemv::small_to_float(1 + 2 * ((sc >> (4 * (u & 1))) & 15)));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int) { return un.db; }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t i12 = word_of(un.qs, l >> 1) >> (16 * (l & 1));
            const uint32_t i1 = (i12 & 255) | ((un.qh << (8 - 2 * l)) & 256);
            const uint32_t i2 = ((i12 >> 8) & 255) | ((un.qh << (7 - 2 * l)) & 256);
            gemv::signed_group(w + 2 * i, gemv::ld_table(lut.grid32, i1), gemv::ld_table(lut.grid32, i2),
                               un.sg >> (8 * l));
        }
    }
};

__device__ __forceinline__ void iq1_group(uint32_t* w, uint64_t e, bool neg) {
    w[0] = gemv::iq1_word((uint32_t)e, neg);
    w[1] = gemv::iq1_word((uint32_t)(e >> 32), neg);
}

// IQ1_S: d qs[32] qh[8] (u16: four 3-bit index tops, a 3-bit scale s, the shift's sign); one scale d (2 s + 1) / 8
// and one shift per sub-block.
template <>
struct LaneCodec<GgmlType::IQ1_S> : GridLane<LaneCodec<GgmlType::IQ1_S>> {
    static constexpr int kBytes = 50, kAlign = 2;
    static constexpr bool kHalfScales = false;
    struct Unit {
        uint32_t qs, qh;
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        uint32_t q[1];
        lds_words_any(blk + 2 + 4 * u, q);
        un.qs = q[0];
        un.qh = lds16(blk + 34 + 2 * u);
        un.d = gemv::half_bits(lds16(blk));
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int) {
        return gemv::mul_rn(gemv::mul_rn(un.d, gemv::small_to_float(2 * ((un.qh >> 12) & 7) + 1)), 0.125f);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint64_t e = gemv::ld_table(lut.grid64, ((un.qs >> (8 * l)) & 255) | (((un.qh >> (3 * l)) & 7) << 8));
            iq1_group(w + 2 * i, e, un.qh & 0x8000u);
        }
    }
};

// IQ1_M: qs[32] qh[16] scales[8] (4 u16: 3-bit scales, 6 bits per sub-block, one nibble of the f16 super-scale in
// the top of each); group l of sub-block u: nibble l % 2 of qh[2 u + l / 2] holds its index bits 8..10 and the
// shift's sign; the scale d (2 s + 1) / 8 per half (groups 0-1, 2-3).
template <>
struct LaneCodec<GgmlType::IQ1_M> : GridLane<LaneCodec<GgmlType::IQ1_M>> {
    static constexpr int kBytes = 56, kAlign = 4;
    static constexpr bool kHalfScales = true;
    struct Unit {
        uint32_t qs, qh, s6;
        float d;
    };
    __device__ __forceinline__ static Unit load(uint32_t blk, int u) {
        Unit un;
        un.qs = lds32(blk + 4 * u);
        un.qh = lds16(blk + 32 + 2 * u);
        const uint32_t sw0 = lds32(blk + 48), sw1 = lds32(blk + 52);
        const uint32_t d16 = ((sw0 >> 12) & 0x000Fu) | ((sw0 >> 24) & 0x00F0u) | ((sw1 >> 4) & 0x0F00u) |
                             ((sw1 >> 16) & 0xF000u);
        un.d = gemv::half_bits(d16);
        un.s6 = ((u >> 2 ? sw1 : sw0) >> (16 * ((u >> 1) & 1) + 6 * (u & 1))) & 63;
        return un;
    }
    __device__ __forceinline__ static float scale(const Unit& un, int h) {
        return gemv::mul_rn(gemv::mul_rn(un.d, gemv::small_to_float(2 * ((un.s6 >> (3 * h)) & 7) + 1)), 0.125f);
    }
    __device__ __forceinline__ static void half_words(const Unit& un, int h, const gemv::Lut& lut, uint32_t* w) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int l = 2 * h + i;
            const uint32_t nib = (un.qh >> (4 * l)) & 15;
            const uint64_t e = gemv::ld_table(lut.grid64, ((un.qs >> (8 * l)) & 255) | ((nib & 7) << 8));
            iq1_group(w + 2 * i, e, nib & 8);
        }
    }
};

// Q2_K: d dmin scales[16] qs[64]: 16-value units with a scale and a minimum each (DigitCodec<Q2_K>): w x summed
// as dl (q . x) - ml (sum of x), the sums from xsum.
template <>
struct LaneCodec<GgmlType::Q2_K> {
    static constexpr int kBytes = 84, kAlign = 4;
    static constexpr bool kSums = true;
    template <int H, int P>
    __device__ __forceinline__ static float dot(uint32_t blk, int v0, const gemv::Lut&, const Words<H>& a0,
                                                const Words<H>& a1, const Words<H>& a2, float sx, const float* xsum) {
        // The lane's 16 H values lie in one 256-value block: its d and dmin once per row.
        const uint32_t dd = lds32(blk + 80);
        const float d_all = gemv::half_bits(dd), d_min = gemv::half_bits(dd >> 16);
        const uint32_t sc2 = H == 2 ? lds16(blk + (v0 >> 4)) : 0;
        float y = 0.0f;
#pragma unroll
        for (int hh = 0; hh < H; ++hh) {
            // Unit u of the block (DigitCodec<Q2_K>): values 128 n + 32 g + 16 h + l.
            const int u = (v0 + 16 * hh) >> 4;
            const int n = u >> 3, g = (u >> 1) & 3, h = u & 1;
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = (lds32(blk + 16 + 32 * n + 16 * h + 4 * i) >> (2 * g)) & 0x03030303u;
            // The scale byte of unit u: units 2 m and 2 m + 1 of H = 2 lanes as one 16-bit load.
            const uint32_t sc = H == 2 ? (sc2 >> (8 * hh)) & 255 : lds8(blk + u);
            const float dl = gemv::mul_rn(d_all, gemv::small_to_float(sc & 15));
            const float ml = gemv::mul_rn(d_min, gemv::small_to_float(sc >> 4));
            uint32_t b0[4], b1[4], b2[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) b0[i] = a0[4 * hh + i], b1[i] = a1[4 * hh + i], b2[i] = a2[4 * hh + i];
            gemv::DigitSums ds;
            gemv::digit_dot<false, 4, P>(w, b0, b1, b2, ds);
            y = fmaf(dl * sx, gemv::digit_value(ds), fmaf(-ml, xsum[hh], y));
        }
        return y;
    }
};

// A warp's share of a row in the register kernels of these formats, and a block's shared memory: lanes of 16 H
// values, so a warp's slice of a row is 2 H blocks of 256 values; a ring slot holds the 16-byte words covering a
// slice from any kAlign-aligned start, plus, for the formats read at any alignment, one spare word that the last
// lane's aligned over-read (lds_words_any) may touch; kStages slots of kRows rows per warp.
template <GgmlType T, int H, int kStages>
struct LaneGeom {
    using C = LaneCodec<T>;
    static constexpr int kValues = 16 * H;                              // per lane
    static constexpr int kWords = 4 * H;                                // digit words per plane
    static constexpr int kSliceValues = kWarp * kValues;                // per warp: 512 H
    static constexpr int kSliceBytes = kSliceValues / 256 * C::kBytes;  // 2 H blocks
    static constexpr int kSlotWords = (16 - C::kAlign + kSliceBytes + 15) / 16 + (C::kAlign < 4 ? 1 : 0);
    static constexpr size_t smem(int w) { return block_smem(w, kStages * kRows * kSlotWords * 16); }
};

// The part every lane-codec register kernel shares once its ring is started and its input is ready: the lane's
// 16 H values of the warp's input slice x_slice as digits (lane_digits; P planes), then for each of n_stages stages
// (issue: the ring's copies, as ring_wait takes them) the 4 rows' products (row i's slice at its slot plus row_sh(i),
// its address mod 16), their warp sums by butterfly4, and flush (as stash_sums calls it) at the end of every kChunk
// rows and after the last stage.
template <GgmlType T, int H, int P, int kStages, class Issue, class RowSh, class Flush>
__device__ __forceinline__ void lane_stages(const float* x_slice, const uint4* ring, int n_stages, Issue&& issue,
                                            RowSh&& row_sh, const gemv::Lut& lut, float* sums, int n_warps,
                                            Flush&& flush) {
    using G = LaneGeom<T, H, kStages>;
    using C = LaneCodec<T>;
    const int lane = threadIdx.x % kWarp;
    uint32_t a0[G::kWords], a1[G::kWords], a2[G::kWords];
    float xsum[H];
    const int vo = G::kValues * lane;  // the lane's first value in the slice
    const float sx = lane_digits<H, P>(x_slice + vo, a0, a1, a2, C::kSums ? xsum : nullptr);
    const int block_at = C::kBytes * (vo >> 8), v0 = vo & 255;  // the lane's block in the slice, its first value

    constexpr uint32_t kSlotBytes = G::kSlotWords * 16;
    RingCursor<kStages, kRows * kSlotBytes> stage(ring);
    for (int s = 0; s < n_stages; ++s, stage.next()) {
        ring_wait<kStages>(s, n_stages, issue);
        const uint32_t stage_at = stage.at();
        float acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const uint32_t p = stage_at + r * kSlotBytes + row_sh(kRows * s + r);  // row(kRows s + r)'s slice
            acc[r] = C::template dot<H, P>(p + block_at, v0, lut, a0, a1, a2, sx, xsum);
        }
        __syncwarp();                           // every lane is done with this slot before a later issue() refills it
        const float k = butterfly4(acc, lane);  // lane 8 r: row r's warp sum
        stash_sums(k, s, n_stages, sums, n_warps, flush);
    }
    cp_async_wait<0>();
}

// Whether the register kernels have a LaneCodec for format t.
constexpr bool has_lane_codec(GgmlType t) {
    return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ2_S || t == GgmlType::IQ3_XXS ||
           t == GgmlType::IQ3_S || t == GgmlType::IQ1_S || t == GgmlType::IQ1_M || t == GgmlType::Q2_K;
}

// f(std::integral_constant<GgmlType, T>{}) for a format with a LaneCodec (has_lane_codec(t)).
template <class F>
void with_lane_codec(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::IQ2_XXS: return f(std::integral_constant<GgmlType, GgmlType::IQ2_XXS>{});
        case GgmlType::IQ2_XS: return f(std::integral_constant<GgmlType, GgmlType::IQ2_XS>{});
        case GgmlType::IQ2_S: return f(std::integral_constant<GgmlType, GgmlType::IQ2_S>{});
        case GgmlType::IQ3_XXS: return f(std::integral_constant<GgmlType, GgmlType::IQ3_XXS>{});
        case GgmlType::IQ3_S: return f(std::integral_constant<GgmlType, GgmlType::IQ3_S>{});
        case GgmlType::IQ1_S: return f(std::integral_constant<GgmlType, GgmlType::IQ1_S>{});
        case GgmlType::IQ1_M: return f(std::integral_constant<GgmlType, GgmlType::IQ1_M>{});
        case GgmlType::Q2_K: return f(std::integral_constant<GgmlType, GgmlType::Q2_K>{});
        default: DSV4_CHECK(has_lane_codec(t));
    }
}

}  // namespace dsv4::cuda::xreg
