// The lightning indexer's scores over packed FP4 keys (ops/fp4_rows.h: quant-sim mode's cache) on int8 tensor
// cores. In that mode the queries and keys are E2M1 values times a power-of-two scale per block of 32 dims, so
// twice each value is an integer in [-12, 12]: a block's q . k is an exact int32 dot (mma.sync m16n8k32 s8,
// 16 heads x 8 keys x 32 dims a tile) times 2^(eq + ek) / 4, and the head's dot is the sum of its blocks'
// exact products, in block order, in f32. The f32 dot of the same floats (the CPU's) differs from it only by
// where the rounding of that sum falls, and not at all while the sum fits in 24 bits.
//
// A warp scores one or two n-tiles of 8 keys against every head: for each block the keys' nibbles become the B
// fragments (four nibbles to four int8 by two byte permutes), the queries' int8 rows in shared memory the A
// fragments (read once for both n-tiles), and each head's block products meet in an f32 register; relu times the
// head weight, summed over the warp's lanes of a key, gives the key's score. The int32 products become floats
// without a conversion instruction (a quarter-rate one on Hopper, 4 of them per mma): the accumulators start
// at the bits of the float 1.5 * 2^23, so the mma's integer sum is the bits of 1.5 * 2^23 + dot (|dot| <=
// 32 * 12 * 12 < 2^22), and one FMA takes that times the query's scale, less 1.5 * 2^23 times it, to the dot
// times the scale, exactly as the conversion and a multiply would.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "ops/fp4_rows.h"

namespace dsv4::cuda::fp4_index {

constexpr int kMaxTileKeys = 16;  // keys a warp scores at a time: one or two n-tiles of 8
constexpr int kHeadTile = 16;  // heads of an m-tile
constexpr int kHeadGroup = 64; // heads a pass holds in registers (4 m-tiles)

// Four nibbles (value i in bits 4i .. 4i + 3) to four int8 (byte i): twice their E2M1 values. The magnitude
// picks a byte of {0, 1, 2, 3, 4, 6, 8, 12} and of its negation; the sign bit then picks which.
__device__ __forceinline__ uint32_t fp4x4_to_s8(uint32_t x) {
    const uint32_t mag = x & 0x7777u;
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, mag);
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, mag);
    return __byte_perm(pos, neg, 0x3210u | ((x >> 1) & 0x4444u));
}

// Bytes of a query's int8 row in shared memory: 16 past its values, so that the 8 rows an A fragment reads at one
// offset fall in different banks.
__host__ __device__ constexpr int q8_stride(int hd) { return hd + 16; }

// The queries of one row (H heads of hd values, FP4-simulated) as int8 rows [H_pad][q8_stride(hd)] (twice the
// E2M1 values; zero rows for the padding heads) and their block scales qscale[H_pad][hd / 32] as 2^e / 4, so
// that a block's exact int32 dot times qscale times the key's scale is the f32 product. Thread t takes the 4 values
// 4 (t + kThreads j) in round j, and the 8 threads of a block of 32 are 8 consecutive lanes, which find its amax by
// shuffles. Block-wide (blockDim.x a multiple of 8).
template <int kThreads>
__device__ void load_queries(const float* q, int H, int hd, int H_pad, int8_t* q8, float* qscale) {
    const int quads = H_pad * hd / 4, nb = hd / kFp4Block;
    for (int f0 = 0; f0 < quads; f0 += kThreads) {  // uniform over the block: every lane shuffles
        const int f = f0 + threadIdx.x;
        const bool in = f < quads && f * 4 / hd < H;
        float x[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] = in ? q[(int64_t)f * 4 + k] : 0.0f;
        float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
        for (int o = 1; o < kFp4Block / 4; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if (f >= quads) continue;
        const int c = f / (kFp4Block / 4), h = c / nb, b = c % nb;  // block c of 32 values: head h, block b
        const float sc = fake_quant_scale(amax, true);
        uint32_t word = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k)
            word |= (uint32_t)(uint8_t)(int8_t)(int)(2.0f * packed_grid_value(x[k], sc, true)) << (8 * k);
        *reinterpret_cast<uint32_t*>(q8 + (int64_t)h * q8_stride(hd) + b * kFp4Block + f % (kFp4Block / 4) * 4) =
            h < H ? word : 0u;
        if (f % (kFp4Block / 4) == 0) qscale[c] = h < H ? sc * 0.25f : 0.0f;
    }
}

constexpr int kMagicBits = 0x4B400000;  // the float 1.5 * 2^23
constexpr float kMagic = 12582912.0f;

// Scores of the 8 kN keys whose packed rows start at krow (8 kN rows of rb bytes, in shared memory) against heads
// [0, H_pad) of one query: q8 / qscale as load_queries wrote them, w[H_pad] the head weights (0 past H).
// Returns, in lanes 0..3, the scores of keys 2 l, 2 l + 1 and (kN = 2) 8 + 2 l, 9 + 2 l (other lanes: partial sums).
template <int kN>
__device__ __forceinline__ float4 warp_tile_scores(const int8_t* q8, const float* qscale, const float* w, int H_pad,
                                                   int hd, const uint8_t* krow, int rb) {
    static_assert(kN == 1 || kN == 2, "one or two n-tiles");
    constexpr int kM = kHeadGroup / kHeadTile;
    const int lane = threadIdx.x % kWarp, g = lane / 4, tig = lane % 4;
    const int nb = hd / kFp4Block;
    float part[kN][2] = {};
    for (int h0 = 0; h0 < H_pad; h0 += kHeadGroup) {
        float acc[kN][kM][4] = {};
        for (int b = 0; b < nb; ++b) {
            uint32_t b0[kN], b1[kN];
            float k0[kN], k1[kN];
#pragma unroll
            for (int n = 0; n < kN; ++n) {
                const uint8_t* mine = krow + (8 * n + g) * rb + 16 * b;  // this lane's key of the B fragment
                b0[n] = fp4x4_to_s8(*reinterpret_cast<const uint16_t*>(mine + 2 * tig));
                b1[n] = fp4x4_to_s8(*reinterpret_cast<const uint16_t*>(mine + 8 + 2 * tig));
                const uint8_t* sc = krow + (8 * n + 2 * tig) * rb + hd / 2 + b;  // its two C columns' keys' scales
                k0[n] = e8m0_scale(sc[0]);
                k1[n] = e8m0_scale(sc[rb]);
            }
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                const int r0 = h0 + m * kHeadTile + g, r1 = r0 + 8;
                const int8_t* qa = q8 + (int64_t)r0 * q8_stride(hd) + b * kFp4Block + 4 * tig;
                const int8_t* qb = q8 + (int64_t)r1 * q8_stride(hd) + b * kFp4Block + 4 * tig;
                const uint32_t a0 = *reinterpret_cast<const uint32_t*>(qa), a1 = *reinterpret_cast<const uint32_t*>(qb);
                const uint32_t a2 = *reinterpret_cast<const uint32_t*>(qa + 16);
                const uint32_t a3 = *reinterpret_cast<const uint32_t*>(qb + 16);
                const float s0 = qscale[r0 * nb + b], s1 = qscale[r1 * nb + b];
                const float m0 = -kMagic * s0, m1 = -kMagic * s1;
#pragma unroll
                for (int n = 0; n < kN; ++n) {
                    int d[4] = {kMagicBits, kMagicBits, kMagicBits, kMagicBits};
                    mma_s8(d, a0, a1, a2, a3, b0[n], b1[n]);
                    acc[n][m][0] = fmaf(fmaf(__int_as_float(d[0]), s0, m0), k0[n], acc[n][m][0]);
                    acc[n][m][1] = fmaf(fmaf(__int_as_float(d[1]), s0, m0), k1[n], acc[n][m][1]);
                    acc[n][m][2] = fmaf(fmaf(__int_as_float(d[2]), s1, m1), k0[n], acc[n][m][2]);
                    acc[n][m][3] = fmaf(fmaf(__int_as_float(d[3]), s1, m1), k1[n], acc[n][m][3]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < kM; ++m) {
            const float w0 = w[h0 + m * kHeadTile + g], w1 = w[h0 + m * kHeadTile + g + 8];
#pragma unroll
            for (int n = 0; n < kN; ++n) {
                part[n][0] += fmaxf(acc[n][m][0], 0.0f) * w0 + fmaxf(acc[n][m][2], 0.0f) * w1;
                part[n][1] += fmaxf(acc[n][m][1], 0.0f) * w0 + fmaxf(acc[n][m][3], 0.0f) * w1;
            }
        }
    }
#pragma unroll
    for (int o = 4; o < kWarp; o <<= 1)
#pragma unroll
        for (int n = 0; n < kN; ++n) {
            part[n][0] += __shfl_xor_sync(0xffffffffu, part[n][0], o);
            part[n][1] += __shfl_xor_sync(0xffffffffu, part[n][1], o);
        }
    return make_float4(part[0][0], part[0][1], part[kN - 1][0], part[kN - 1][1]);
}

}  // namespace dsv4::cuda::fp4_index
