// The previous decode GEMV, kept for A/B timing (DSV4_GEMV=staged; cuda_gemv.cu is the current one). Formats
// Q8_0, MXFP4, Q2_K, Q3_K, Q4_K, Q6_K, IQ2_XXS: one warp per weight row. The warp copies the row chunk by
// chunk (2048 values at a time) into shared memory with 16-byte loads, prefetching the next chunk into
// registers while it decodes the current one. Each lane then decodes groups of 8 consecutive values from
// shared memory (Group8: the group's scale once, then the values, each bit-identical to the exact decoders
// of cuda_dequant.cuh) and multiplies them with 16-byte loads of the activation rows, accumulating in f32
// and reducing with warp shuffles.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kWarps = 8;          // weight rows per block (one warp each)
constexpr int kTokens = 8;         // activation rows per pass
constexpr int kChunkValues = 2048; // values of a row staged at once: 8 groups of 8 per lane

template <GgmlType T>
struct Stage {
    using D = Dq<T>;
    static constexpr int kGroupsPerBlock = D::kElems / 8;
    static constexpr int kBlocks = kChunkValues / D::kElems;
    static constexpr int kBytes = kBlocks * D::kBytes;
    static constexpr int kWords = (kBytes + 15 + 15) / 16;  // 16-byte words, the chunk may start mid-word
    static constexpr int kVec = (kWords + kWarp - 1) / kWarp; // words per lane
};

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    // Weights are read once per pass: keep them out of L1 so the activation rows stay there.
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Loads the 16-byte words covering blocks [b0, b0 + nblk) of the row. Words are 16-byte aligned, so a word
// holding any byte of the row lies in the same allocation (no fault past either end).
template <GgmlType T>
__device__ __forceinline__ void load_chunk(const uint8_t* wrow, int64_t b0, int nblk, int lane, uint4* buf) {
    using S = Stage<T>;
    const uintptr_t a = (uintptr_t)(wrow + b0 * Dq<T>::kBytes);
    const uint4* a0 = reinterpret_cast<const uint4*>(a & ~(uintptr_t)15);
    const int words = (int)((a & 15) + (uintptr_t)nblk * Dq<T>::kBytes + 15) / 16;
#pragma unroll
    for (int v = 0; v < S::kVec; ++v) {
        const int w = lane + kWarp * v;
        if (w < words) buf[v] = ld_stream(a0 + w);
    }
}

// NT: activation rows per pass (1 for single-token decode, so it carries one accumulator; else kTokens).
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kWarps * kWarp) gemv_staged_kernel(MatmulParams p, QuantTables tb) {
    using D = Dq<T>;
    using S = Stage<T>;
    __shared__ uint4 stage[kWarps][S::kWords];
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int e = blockIdx.z;
    const int64_t m = (int64_t)blockIdx.x * kWarps + warp;
    int64_t r0 = 0, r1 = p.n;
    if (p.offsets) {
        r0 = p.offsets[e];
        r1 = p.offsets[e + 1];
    }
    if (m >= p.M || r0 >= r1) return;  // warp-uniform; only warp-level syncs below
    const uint8_t* wrow = p.w + (size_t)e * p.expert_bytes + (size_t)m * p.row_bytes;
    const int64_t nb = p.K / D::kElems;
    const int64_t n_chunks = (nb + S::kBlocks - 1) / S::kBlocks;
    uint8_t* st = reinterpret_cast<uint8_t*>(stage[warp]);
    for (int64_t c0 = r0 + (int64_t)blockIdx.y * NT; c0 < r1; c0 += (int64_t)gridDim.y * NT) {
        const int nt = (int)(r1 - c0 < NT ? r1 - c0 : NT);
        const float* xr[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int64_t r = c0 + (t < nt ? t : 0);
            xr[t] = p.x + (p.x_rows ? (int64_t)p.x_rows[r] : r) * p.x_stride;
        }
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        uint4 buf[S::kVec];
        load_chunk<T>(wrow, 0, (int)(nb < S::kBlocks ? nb : S::kBlocks), lane, buf);
        for (int64_t c = 0; c < n_chunks; ++c) {
            const int64_t b0 = c * S::kBlocks;
            const int nblk = (int)(nb - b0 < S::kBlocks ? nb - b0 : S::kBlocks);
            const int shift = (int)((uintptr_t)(wrow + b0 * D::kBytes) & 15);
            const int words = (shift + nblk * D::kBytes + 15) / 16;
            __syncwarp();  // every lane is done reading the previous chunk
#pragma unroll
            for (int v = 0; v < S::kVec; ++v) {
                const int w = lane + kWarp * v;
                if (w < words) stage[warp][w] = buf[v];
            }
            __syncwarp();
            if (c + 1 < n_chunks) {
                const int64_t nb0 = b0 + S::kBlocks;
                load_chunk<T>(wrow, nb0, (int)(nb - nb0 < S::kBlocks ? nb - nb0 : S::kBlocks), lane, buf);
            }
            const int n_groups = nblk * S::kGroupsPerBlock;
            const uint8_t* cb = st + shift;
#pragma unroll 2
            for (int q = 0; q < kChunkValues / 8 / kWarp; ++q) {
                const int g = lane + kWarp * q;
                if (g >= n_groups) break;
                const uint8_t* blk = cb + (g / S::kGroupsPerBlock) * D::kBytes;
                float v[8];
                Group8<T>::decode(blk, g % S::kGroupsPerBlock, v, tb);
                const int64_t k = b0 * D::kElems + 8 * (int64_t)g;
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (t >= nt) break;
                    const float4 a = __ldg(reinterpret_cast<const float4*>(xr[t] + k));
                    const float4 b = __ldg(reinterpret_cast<const float4*>(xr[t] + k + 4));
                    float s = acc[t];
                    s = fmaf(v[0], a.x, s);
                    s = fmaf(v[1], a.y, s);
                    s = fmaf(v[2], a.z, s);
                    s = fmaf(v[3], a.w, s);
                    s = fmaf(v[4], b.x, s);
                    s = fmaf(v[5], b.y, s);
                    s = fmaf(v[6], b.z, s);
                    s = fmaf(v[7], b.w, s);
                    acc[t] = s;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
        if (lane == 0)
            for (int t = 0; t < nt; ++t) p.y[(c0 + t) * p.y_stride + m] = acc[t];
    }
}

template <GgmlType T>
void launch(const MatmulParams& p, const QuantTables& t, cudaStream_t s) {
    const int n_experts = p.offsets ? p.n_experts : 1;
    const dim3 grid(ceil_div(p.M, kWarps), 1, n_experts);
    if (p.n == 1)  // grouped too: with one row in all, every expert sees at most one
        gemv_staged_kernel<T, 1><<<grid, kWarps * kWarp, 0, s>>>(p, t);
    else
        gemv_staged_kernel<T, kTokens><<<grid, kWarps * kWarp, 0, s>>>(p, t);
}

}  // namespace

bool launch_gemv_warp_staged(const MatmulParams& p, const QuantTables& t, cudaStream_t s) {
    // float4 activation loads need 16-byte aligned rows; K is a whole number of blocks (checked by callers).
    if (!aligned16(p.x) || p.x_stride % 4 != 0) return false;
    switch (p.type) {
        case GgmlType::Q8_0: launch<GgmlType::Q8_0>(p, t, s); return true;
        case GgmlType::MXFP4: launch<GgmlType::MXFP4>(p, t, s); return true;
        case GgmlType::Q2_K: launch<GgmlType::Q2_K>(p, t, s); return true;
        case GgmlType::Q3_K: launch<GgmlType::Q3_K>(p, t, s); return true;
        case GgmlType::Q4_K: launch<GgmlType::Q4_K>(p, t, s); return true;
        case GgmlType::Q6_K: launch<GgmlType::Q6_K>(p, t, s); return true;
        case GgmlType::IQ2_XXS: launch<GgmlType::IQ2_XXS>(p, t, s); return true;
        default: return false;
    }
}

}  // namespace dsv4::cuda
