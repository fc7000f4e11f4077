// Weight values decoded straight to bf16 for the tensor-core paths of the bf16 mode (the decode-on-load expert
// kernels and the bf16 weight decode before cuBLAS): each value is bit-identical to rounding Dq<T>::value to
// bf16 (to nearest even), which is what decode8 followed by pack_bf16 gives.
//
// Why: in the expert kernels the decode is most of the instructions. A 2-bit format has only a few distinct
// values per scale: IQ2_XXS has +-db * {8, 25, 43} per 32 values, Q2_K has dl * q - ml, q in 0..3, per 16
// values. So the specializations round those few products to bf16 once per run and pick each value with a
// byte permute (PRMT: two bf16 pairs are eight bytes to pick from); IQ2_XXS's sign is then one XOR of the bf16
// sign bit. (Negation commutes with rounding to nearest even, so bf16(-x) = -bf16(x) bit for bit.)
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_dequant.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace dsv4::cuda {

// Four bytes at any address p of shared or global memory, little-endian, from the aligned words that hold
// them (a word holding a byte of an allocation lies inside it).
__device__ __forceinline__ uint32_t ld_u32_any(const uint8_t* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
    const uint32_t off = (uint32_t)(a & 3);
    return off ? __funnelshift_r(w[0], w[1], 8 * off) : w[0];
}

// Bytes of the pair (a, b) picked by the four selector nibbles in the low 16 bits of sel (PRMT; unlike
// __byte_perm no mask is applied: every selector here has nibbles below 8).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// PRMT selector picking, for the four 2-bit (or smaller) codes in the bytes of kk, the bf16 at byte offset
// 2 * code of the pair (lo, hi): nibbles 2k and 2k + 1 per byte. The low 16 bits select values 0 and 1, the
// high 16 bits (shifted down) values 2 and 3.
__device__ __forceinline__ uint32_t bf16_selectors(uint32_t kk) {
    return kk * 0x22u + 0x10101010u;
}

// Values [v0, v0 + V) of block b as V / 2 registers of bf16 pairs (value v0 + 2i in the low half of o[i]).
// V is a multiple of 8 and v0 a multiple of V within the block. Plain types (a value a "block"): the V values
// from b on (v0 = 0), through decode8 as the bf16 weight decode reads them.
template <GgmlType T>
struct Bf16Run {
    template <int V>
    __device__ static void decode(const uint8_t* b, int v0, uint32_t (&o)[V / 2], const QuantTables& t) {
#pragma unroll
        for (int g = 0; g < V / 8; ++g) {
            float v[8];
            if constexpr (Dq<T>::kElems == 1)
                decode8<T>(b, g, V, v, t);
            else
                Group8<T>::decode(b, v0 / 8 + g, v, t);
            const uint4 q = pack_bf16x8(v);
            o[4 * g] = q.x, o[4 * g + 1] = q.y, o[4 * g + 2] = q.z, o[4 * g + 3] = q.w;
        }
    }
};

template <>
struct Bf16Run<GgmlType::IQ2_XXS> {
    template <int V>
    __device__ static void decode(const uint8_t* b, int v0, uint32_t (&o)[V / 2], const QuantTables& t) {
        constexpr int kPiece = V < 32 ? V : 32;  // values per 32-value sub-block the run covers
        static_assert(V % 8 == 0 && 32 % kPiece == 0 && V % kPiece == 0);
        const float d = ld_f16(b);
#pragma unroll
        for (int s = 0; s < V / kPiece; ++s) {
            const int i0 = v0 + kPiece * s, ib = i0 / 32;
            const uint8_t* p = b + 2 + 8 * ib;
            const uint32_t grid_bytes = ld_u32_any(p), aux = ld_u32_any(p + 4);
            const float db = __fmul_rn(__fmul_rn(d, 0.5f + (float)(aux >> 28)), 0.25f);
            // Every grid byte is 8, 25 or 43; byte >> 4 is its code 0, 1, 2: the pool (c01, c2) holds the three
            // magnitudes and a grid entry's selectors pick them (iq2xxs_sel: shared memory where a kernel put it
            // there, so no __ldg). The 8 signs are the 7 stored bits and their parity (kSigns); pair p's sign
            // bits go to bits 15 and 31 of its XOR word by one multiply: sg * (2^(15-2p) + 2^(30-2p)) places sign
            // 2p at bit 15 and sign 2p + 1 at bit 31 (the two shifted copies of sg do not overlap, so no carry).
            const uint32_t c01 = pack_bf16(__fmul_rn(db, 8.0f), __fmul_rn(db, 25.0f));
            const uint32_t c2 = pack_bf16(__fmul_rn(db, 43.0f), 0.0f);
#pragma unroll
            for (int g = 0; g < kPiece / 8; ++g) {
                const int l = (i0 % 32) / 8 + g;
                const uint64_t sel = t.iq2xxs_sel[(grid_bytes >> (8 * l)) & 0xFF];
                const uint32_t x = aux >> (7 * l);  // bits 0-6: the stored signs (bits 7 and up: ignored)
                const uint32_t sg = (x & 0x7Fu) | ((uint32_t)__popc(x & 0x7Fu) << 7 & 0x80u);
                const uint32_t lo = (uint32_t)sel, hi = (uint32_t)(sel >> 32);
                const int w = 4 * (kPiece * s / 8 + g);
                o[w] = prmt(c01, c2, lo) ^ (sg * 0x40008000u & 0x80008000u);
                o[w + 1] = prmt(c01, c2, lo >> 16) ^ (sg * 0x10002000u & 0x80008000u);
                o[w + 2] = prmt(c01, c2, hi) ^ (sg * 0x04000800u & 0x80008000u);
                o[w + 3] = prmt(c01, c2, hi >> 16) ^ (sg * 0x01000200u & 0x80008000u);
            }
        }
    }
};

template <>
struct Bf16Run<GgmlType::Q2_K> {
    template <int V>
    __device__ static void decode(const uint8_t* b, int v0, uint32_t (&o)[V / 2], const QuantTables&) {
        constexpr int kPiece = V < 16 ? V : 16;  // values per 16-value scale group the run covers
        static_assert(V % 8 == 0 && 16 % kPiece == 0 && V % kPiece == 0);
        const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
#pragma unroll
        for (int s = 0; s < V / kPiece; ++s) {
            const int i0 = v0 + kPiece * s;
            const int n = i0 / 128, r = i0 % 128, group = r / 32, half = (r % 32) / 16, l0 = r % 16;
            const uint8_t sc = b[8 * n + 2 * group + half];
            const float dl = __fmul_rn(d, (float)(sc & 0x0F)), ml = __fmul_rn(dmin, (float)(sc >> 4));
            // The value of each code q, as Dq<Q2_K>::value computes it.
            const uint32_t c01 = pack_bf16(__fsub_rn(__fmul_rn(dl, 0.0f), ml), __fsub_rn(__fmul_rn(dl, 1.0f), ml));
            const uint32_t c23 = pack_bf16(__fsub_rn(__fmul_rn(dl, 2.0f), ml), __fsub_rn(__fmul_rn(dl, 3.0f), ml));
            const uint8_t* q = b + 16 + 32 * n + 16 * half + l0;
            // The piece's code bytes: one 16-byte load where they are aligned (a whole scale group of a block
            // whose row starts 16-byte aligned, as the expert kernels' staged rows usually do).
            uint32_t qw[kPiece / 4];
            if (kPiece == 16 && (reinterpret_cast<uintptr_t>(q) & 15) == 0) {
                const uint4 v4 = *reinterpret_cast<const uint4*>(q);
                const uint32_t all[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int w = 0; w < kPiece / 4; ++w) qw[w] = all[w];
            } else {
#pragma unroll
                for (int w = 0; w < kPiece / 4; ++w) qw[w] = ld_u32_any(q + 4 * w);
            }
#pragma unroll
            for (int w = 0; w < kPiece / 4; ++w) {
                const uint32_t z = bf16_selectors((qw[w] >> (2 * group)) & 0x03030303u);
                o[kPiece / 2 * s + 2 * w] = prmt(c01, c23, z);
                o[kPiece / 2 * s + 2 * w + 1] = prmt(c01, c23, z >> 16);
            }
        }
    }
};

// Q8_0: q * d with the byte turned into a float by the magic-number trick (the biased byte u = q + 128 in
// the low bits of 2^23 is 2^23 + u, exact; subtracting 2^23 + 128 leaves q) instead of an int-to-float
// conversion, a quarter-rate instruction on Hopper. The same product as Group8<Q8_0>, so the same bf16.
template <>
struct Bf16Run<GgmlType::Q8_0> {
    template <int V>
    __device__ static void decode(const uint8_t* b, int v0, uint32_t (&o)[V / 2], const QuantTables&) {
        static_assert(V % 4 == 0);
        const float d = ld_f16(b);
#pragma unroll
        for (int w = 0; w < V / 4; ++w) {
            const uint32_t u = ld_u32_any(b + 2 + v0 + 4 * w) ^ 0x80808080u;
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)  // bytes (u_j, 0, 0, 0x4B): the float 2^23 + u_j
                v[j] = __fmul_rn(__fsub_rn(__uint_as_float(prmt(u, 0x4Bu, 0x4550u | j)), 8388736.0f), d);
            o[2 * w] = pack_bf16(v[0], v[1]);
            o[2 * w + 1] = pack_bf16(v[2], v[3]);
        }
    }
};

// Run i of a row of K values, values [V i, V i + V), as V / 2 bf16 pairs through the runs above; plain types
// take V = 8 through decode8 (zeros past K). The same values as decode8 then pack_bf16.
template <GgmlType T, int V>
__device__ __forceinline__ void decode_run_bf16(const uint8_t* row, int64_t i, int64_t K, uint32_t (&o)[V / 2],
                                                const QuantTables& t) {
    if constexpr (Dq<T>::kElems == 1) {
        static_assert(V == 8, "plain types decode 8 values at a time");
        float v[8];
        decode8<T>(row, i, K, v, t);
        const uint4 q = pack_bf16x8(v);
        o[0] = q.x, o[1] = q.y, o[2] = q.z, o[3] = q.w;
    } else {
        constexpr int kRuns = Dq<T>::kElems / V;
        Bf16Run<T>::template decode<V>(row + (i / kRuns) * Dq<T>::kBytes, (int)(i % kRuns) * V, o, t);
    }
}

// Values [8g, 8g + 8) of a row as one 16-byte word of bf16.
template <GgmlType T>
__device__ __forceinline__ uint4 decode8_bf16(const uint8_t* row, int64_t g, int64_t K, const QuantTables& t) {
    uint32_t o[4];
    decode_run_bf16<T, 8>(row, g, K, o, t);
    return make_uint4(o[0], o[1], o[2], o[3]);
}

}  // namespace dsv4::cuda
