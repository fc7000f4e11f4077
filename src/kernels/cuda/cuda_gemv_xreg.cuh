// Shared pieces of the decode kernels that hold their one activation row in registers (cuda_gemv_q8_xreg.cu,
// cuda_moe_gate_up_xreg.cu). A block of W warps covers the K inputs, lane l of warp w owning values
// [512 H w + 16 H l, + 16 H) as digits (cuda_gemv_digits.cuh) that it computes itself; the block streams its
// rows' slices through per-warp cp.async rings, a stage of 4 rows at a time, and each row's 32 lane sums are
// folded by a butterfly, then the W warp sums are added in warp order in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"

namespace dsv4::cuda::xreg {

constexpr int kRows = 4;       // rows per stage (butterfly4 is written for 4)
constexpr int kChunk = 32;     // rows between two flushes of the warps' sums (a row per lane of warp 0)
constexpr int kMaxWarps = 32;  // a block of at most 1024 threads: K <= 512 H * 32
static_assert(kChunk % kRows == 0 && kChunk <= kWarp, "a chunk is whole stages, a row per lane");

// Shared memory of a block of w warps: the warps' rings (ring_bytes each), then the two buffers of warp sums
// (of `rows` activation rows each).
constexpr size_t block_smem(int w, size_t ring_bytes, int rows = 1) {
    return (size_t)w * ring_bytes + 2 * (size_t)w * kChunk * sizeof(float) * (size_t)rows;
}

// This lane's 16 H values x[0 .. 16 H) (16-byte aligned), as 4 H float4s.
template <int H>
__device__ __forceinline__ void lane_load(const float* x, float (&v)[4 * H][4]) {
#pragma unroll
    for (int i = 0; i < 4 * H; ++i) {
        const float4 q = *reinterpret_cast<const float4*>(x + 4 * i);
        v[i][0] = q.x, v[i][1] = q.y, v[i][2] = q.z, v[i][3] = q.w;
    }
}

// The digits of this lane's values v and the scale of their 32-value block (H = 1: the other half is on
// lane ^ 1): the same digits quantize_digits_kernel writes for the block (P = 2: two planes, digits2_of4, and a2
// zero); with sum16 (not null), also the f32 sums of each 16 of the values, in the order of XDigits::sum16.
template <int H, int P = 3>
__device__ __forceinline__ float lane_quantize(const float (&v)[4 * H][4], uint32_t (&a0)[4 * H],
                                               uint32_t (&a1)[4 * H], uint32_t (&a2)[4 * H], float* sum16 = nullptr) {
    constexpr int kW = 4 * H;
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < kW; ++i) m = fmaxf(m, gemv::abs_max4(v[i]));
    if (sum16 != nullptr)
#pragma unroll
        for (int h = 0; h < H; ++h)
            sum16[h] = (gemv::sum4(v[4 * h]) + gemv::sum4(v[4 * h + 1])) +
                       (gemv::sum4(v[4 * h + 2]) + gemv::sum4(v[4 * h + 3]));
    if constexpr (H == 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    float scale, inv;
    const bool ok = gemv::digit_scale(m, scale, inv);
#pragma unroll
    for (int i = 0; i < kW; ++i) {
        a0[i] = a1[i] = a2[i] = 0;
        if (!ok) continue;
        if constexpr (P == 3)
            gemv::digits_of4(v[i], inv, a0[i], a1[i], a2[i]);
        else
            gemv::digits2_of4(v[i], inv, a0[i], a1[i]);
    }
    return scale;
}

// f(std::integral_constant<int, P>{}) for a call's activation digit planes P (3 or 2; moe_xreg_planes): the
// kernels' template argument from the launcher's value.
template <class F>
void with_planes(int planes, F&& f) {
    DSV4_CHECK(planes == 2 || planes == 3);
    if (planes == 3)
        f(std::integral_constant<int, 3>{});
    else
        f(std::integral_constant<int, 2>{});
}

// lane_load, then lane_quantize.
template <int H, int P = 3>
__device__ __forceinline__ float lane_digits(const float* x, uint32_t (&a0)[4 * H], uint32_t (&a1)[4 * H],
                                             uint32_t (&a2)[4 * H], float* sum16 = nullptr) {
    float v[4 * H][4];
    lane_load<H>(x, v);
    return lane_quantize<H, P>(v, a0, a1, a2, sum16);
}

// Shared-memory loads by 32-bit shared address (the rings' slices are addressed as integers: the compiler
// otherwise carries 64-bit generic pointers through the row loop). Volatile: they stay after the ring's waits.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t lds16(uint32_t a) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t lds8(uint32_t a) {
    unsigned short v;
    asm volatile("ld.shared.u8 %0, [%1];" : "=h"(v) : "r"(a));
    return v;
}
// 4N bytes at any shared address: N + 1 aligned words and N funnel shifts.
template <int N>
__device__ __forceinline__ void lds_words_any(uint32_t a, uint32_t (&q)[N]) {
    const uint32_t w = a & ~3u, sh = 8 * (a & 3);
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i <= N; ++i) v[i] = lds32(w + 4 * i);
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = gemv::fshr(v[i], v[i + 1], sh);
}

// The warp sums of 4 rows from each lane's acc[4]: rows {0, 1} stay on lanes 0-15 and {2, 3} on 16-31, then
// one row per 8 lanes; lanes 8 r .. 8 r + 7 return row r's sum (a fixed order: deterministic).
__device__ __forceinline__ float butterfly4(const float (&acc)[kRows], int lane) {
    const bool hi16 = lane & 16, hi8 = lane & 8;
    float k0 = hi16 ? acc[2] : acc[0], k1 = hi16 ? acc[3] : acc[1];
    k0 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[0] : acc[2], 16);
    k1 += __shfl_xor_sync(0xffffffffu, hi16 ? acc[1] : acc[3], 16);
    float k = hi8 ? k1 : k0;
    k += __shfl_xor_sync(0xffffffffu, hi8 ? k0 : k1, 8);
    k += __shfl_xor_sync(0xffffffffu, k, 4);
    k += __shfl_xor_sync(0xffffffffu, k, 2);
    k += __shfl_xor_sync(0xffffffffu, k, 1);
    return k;
}

// The per-warp ring of kStages stages: ring_start requests the first kStages - 1 (of n_stages); before stage s
// is read, ring_wait requests stage s + kStages - 1 and waits until stage s's copies, this lane's and every
// other lane's, have landed. issue(s) makes stage s's cp.async copies. Every call commits a group, possibly
// empty, so the group count stays in step with the stage index.
template <int kStages, class Issue>
__device__ __forceinline__ void ring_start(int n_stages, Issue&& issue) {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < n_stages) issue(i);
        cp_async_commit();
    }
}
template <int kStages, class Issue>
__device__ __forceinline__ void ring_wait(int s, int n_stages, Issue&& issue) {
    if (s + kStages - 1 < n_stages) issue(s + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
}

// The 16-byte words covering [src, src + bytes) into slot (at most kSlotWords of them, one per lane and pass):
// the bytes land at slot + (src & 15). A word holding any byte of the slice lies in its allocation.
template <int kSlotWords>
__device__ __forceinline__ void copy_covering(uint4* slot, const uint8_t* src, int bytes, int lane) {
    const int sh = (int)(reinterpret_cast<uintptr_t>(src) & 15);
    const int words = (sh + bytes + 15) >> 4;
#pragma unroll
    for (int v = 0; v < (kSlotWords + kWarp - 1) / kWarp; ++v) {
        const int w = lane + kWarp * v;
        if (w < words) cp_async16(slot + w, src - sh + 16 * w);
    }
}

// Stage s of a ring of kStages slots, each kRows row slices of kSlotWords words: the words covering each
// row(kRows s + r)'s slice of `bytes` (copy_covering). The slice of row r lands at slot word r * kSlotWords,
// plus the row's own offset in its first word.
template <int kStages, int kSlotWords, class Row>
__device__ __forceinline__ void issue_covering(uint4* ring, int s, int bytes, Row&& row, int lane) {
    uint4* slot = ring + (s % kStages) * kRows * kSlotWords;
#pragma unroll
    for (int r = 0; r < kRows; ++r) copy_covering<kSlotWords>(slot + r * kSlotWords, row(kRows * s + r), bytes, lane);
}

// The ring's stages by 32-bit shared address, for the stage loops (slot s % kStages without a division):
// at() is the current stage's first byte, next() moves to the following stage. Row r's slice of a stage
// issue_covering filled starts at at() + r * kSlotWords * 16 + the row's address mod 16.
template <int kStages, uint32_t kStageBytes>
struct RingCursor {
    uint32_t base;
    int slot = 0;
    __device__ explicit RingCursor(const void* ring) : base(smem_addr(ring)) {}
    __device__ uint32_t at() const { return base + (uint32_t)slot * kStageBytes; }
    __device__ void next() { slot = slot + 1 == kStages ? 0 : slot + 1; }
};

// After stage s (of n_stages): keeps this warp's sums of its 4 rows (k from butterfly4; one per activation row
// q < NR) in sums (block_smem's two buffers, NR x n_warps x kChunk each, so one barrier per chunk suffices), and
// at the end of every kChunk rows and after the last stage waits for the block, then warp 0 calls
// flush(q, buf, row0) for each q: buf[w * kChunk + i] is warp w's sum of the chunk's row i for activation row q,
// row0 the chunk's first row in the block.
template <int NR, class Flush>
__device__ __forceinline__ void stash_sums_rows(const float (&k)[NR], int s, int n_stages, float* sums, int n_warps,
                                                Flush&& flush) {
    constexpr int kStagesPerChunk = kChunk / kRows;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int chunk = s / kStagesPerChunk, at = (s % kStagesPerChunk) * kRows;
    float* buf = sums + (chunk & 1) * NR * n_warps * kChunk;
    if ((lane & 7) == 0)
#pragma unroll
        for (int q = 0; q < NR; ++q) buf[(q * n_warps + warp) * kChunk + at + (lane >> 3)] = k[q];
    if (at + kRows == kChunk || s + 1 == n_stages) {
        __syncthreads();
        if (warp == 0)
#pragma unroll
            for (int q = 0; q < NR; ++q) flush(q, static_cast<const float*>(buf + q * n_warps * kChunk), chunk * kChunk);
    }
}

// stash_sums_rows for one activation row: flush(buf, row0).
template <class Flush>
__device__ __forceinline__ void stash_sums(float k, int s, int n_stages, float* sums, int n_warps, Flush&& flush) {
    const float one[1] = {k};
    stash_sums_rows<1>(one, s, n_stages, sums, n_warps, [&](int, const float* buf, int row0) { flush(buf, row0); });
}

// Rows per block (whole stages, at least one) for a one-wave grid: blocks_per_sm blocks on every SM sharing `rows`.
inline int64_t wave_rows_per_block(int64_t rows, int blocks_per_sm) {
    const int64_t wave = (int64_t)blocks_per_sm * device_limits().sms;
    return (rows + wave * kRows - 1) / (wave * kRows) * kRows;
}

// The job of this block in a batch (Batch::job[0 .. count), each job's blocks consecutive from its block0, every
// block rows_per_block rows of its job but the last), the block's first row in it and its row count.
struct BlockRows {
    int job;
    int64_t r0;
    int rows;
};
template <class Batch>
__device__ __forceinline__ BlockRows block_rows(const Batch& b) {
    int j = 0;
    while (j + 1 < b.count && (int64_t)blockIdx.x >= b.job[j + 1].block0) ++j;
    const auto& J = b.job[j];
    const int64_t r0 = ((int64_t)blockIdx.x - J.block0) * b.rows_per_block;
    return {j, r0, (int)(J.M - r0 < b.rows_per_block ? J.M - r0 : b.rows_per_block)};
}

// Resident blocks per SM of kernel K for blocks of w = 1..kMaxWarps warps whose dynamic shared memory is
// smem(w): 0 where such a block cannot run (its static and dynamic shared memory past the device's limit, or
// more threads than the kernel's launch bounds allow).
template <auto K, class Smem>
std::array<int, kMaxWarps + 1> occupancy(Smem smem) {
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, K));
    const size_t avail = dynamic_smem_avail(attr);
    CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)avail));
    CUDA_CHECK(
        cudaFuncSetAttribute(K, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared));
    std::array<int, kMaxWarps + 1> t{};
    for (int w = 1; w <= kMaxWarps; ++w) {
        int n = 0;
        if (smem(w) <= avail && w * kWarp <= attr.maxThreadsPerBlock) CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K, w * kWarp, smem(w)));
        t[w] = n;
    }
    return t;
}

// occupancy's answer for w warps, found once per kernel (G::smem: the dynamic shared memory of a block of w).
template <auto K, class G>
int blocks_per_sm(int w) {
    static const auto table = occupancy<K>(G::smem);
    return table[w];
}

}  // namespace dsv4::cuda::xreg
