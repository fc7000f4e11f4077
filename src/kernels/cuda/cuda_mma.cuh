// Warp-level tensor-core helpers (Ampere/Hopper mma.sync): bf16 inputs with f32 accumulation for the prefill
// kernels of the bf16 mode (cuda_attention_tc.cu, cuda_moe_tc.cu), int8 with int32 for the indexer's packed keys
// (cuda_indexer_fp4.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsv4::cuda {

// Two floats rounded to bf16 (to nearest even) in one register: lo in the low half (the lower k index of an
// mma fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// Eight floats rounded to bf16 (to nearest even) as four pairs, value 2i in the low half of word i.
__device__ __forceinline__ uint4 pack_bf16x8(const float* v) {
    return make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

// d += A B for one m16n8k16 tile: A 16 x 16 bf16 (row-major fragments a0..a3), B 16 x 8 bf16 (b0, b1), f32 d.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A B for one m16n8k32 tile: A 16 x 32 int8 (row-major fragments a0..a3), B 32 x 8 int8 (b0, b1), int32 d.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices from shared memory: lanes 8m .. 8m + 7 give the row addresses of matrix m (s: an
// address in the shared window), and lane l receives row l / 4, columns 2 (l % 4) and + 1 of each in r[m].
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t s) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
    ldmatrix_x4(r, (uint32_t)__cvta_generic_to_shared(p));
}

}  // namespace dsv4::cuda
