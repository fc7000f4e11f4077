// Decode GEMV (n <= 8 activation rows) for the formats decode reads most: Q8_0, MXFP4, Q2_K, Q3_K, Q4_K, Q6_K, IQ2_XXS
// and F16/BF16/F32. A warp takes 2 consecutive weight rows (so each activation load serves both) and streams them
// through its cp.async ring (cuda_gemv_stream.cuh); lanes decode units of the staged blocks (cuda_gemv_codecs.cuh).
// When the matrix has few rows, up to 4 warps of a block split the row's stages (split-K) and add their partial sums in
// a fixed order, so enough warps stream at once to keep HBM busy.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;

constexpr int64_t kTargetWarps = 4096;  // about 32 resident warps on each of the H200's 132 SMs

template <int R, int NT>
struct GemvSrc {
    const uint8_t* rows[R];
    const float* xs[NT];
    __device__ const uint8_t* row(int, int r) const { return rows[r]; }
    __device__ const float* x(int, int t) const { return xs[t]; }
};

// One launch serves a batch of matrices that share the activation row count (a layer's projections of the
// same input, or the groups of a grouped projection): the row groups of job j are [group0, group0 + its
// groups) of one index space, so small matrices fill the GPU together instead of each paying a launch and a
// mostly idle grid.
constexpr int kMaxJobs = 16;
struct GemvJob {
    const uint8_t* w;
    size_t row_bytes;
    int64_t M;
    int nb;  // blocks per row
    const float* x;
    int64_t x_stride;
    float* y;
    int64_t y_stride;
    int64_t group0;
};
struct GemvBatch {
    GemvJob job[kMaxJobs];
    int count;
    int n;
    int64_t groups;
};

// Grid: x covers the batch's row groups (R rows, wg warps each). The n <= NT activation rows are x rows 0..n-1.
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kThreads, min_blocks<NT>()) gemv_kernel(const __grid_constant__ GemvBatch b, int wg,
                                                                          QuantTables tb) {
    constexpr int R = kRowsPerWarp;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<T, R>()];
    __shared__ float partial[kWarpsPerBlock][R * NT];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int split = warp % wg;
    const int64_t g = (int64_t)blockIdx.x * (kWarpsPerBlock / wg) + warp / wg;
    int j = 0;
    while (j + 1 < b.count && g >= b.job[j + 1].group0) ++j;
    const GemvJob& J = b.job[j];
    const int64_t m0 = (g - J.group0) * R;
    const bool live = g < b.groups && m0 < J.M;
    const int nt = b.n;
    if (live) {
        GemvSrc<R, NT> src;
#pragma unroll
        for (int r = 0; r < R; ++r) src.rows[r] = J.w + (size_t)(m0 + r < J.M ? m0 + r : J.M - 1) * J.row_bytes;
#pragma unroll
        for (int t = 0; t < NT; ++t) src.xs[t] = J.x + (t < nt ? t : 0) * J.x_stride;
        stream_rows<T, R, NT>(src, 1, J.nb, split, wg, nt, ring[warp], lut, [&](int, const float(&acc)[R][NT]) {
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int t = 0; t < NT; ++t) partial[warp][r * NT + t] = acc[r][t];
        });
    }
    __syncthreads();
    if (live && split == 0 && lane < R * NT) {
        const int r = lane / NT, t = lane % NT;
        float s = partial[warp][lane];
        for (int w = 1; w < wg; ++w) s += partial[warp + w][lane];
        if (t < nt && m0 + r < J.M) J.y[t * J.y_stride + m0 + r] = s;
    }
}

template <GgmlType T, int NT>
void launch_nt(const GemvBatch& b, int min_stages, const QuantTables& t, cudaStream_t s) {
    int wg = 1;  // warps per row group: split-K only while the rows alone leave the GPU short of warps
    while (wg < kWarpsPerBlock && 2 * wg <= min_stages && b.groups * wg < kTargetWarps) wg *= 2;
    prefer_shared<gemv_kernel<T, NT>>();
    gemv_kernel<T, NT><<<ceil_div(b.groups * wg, kWarpsPerBlock), kThreads, 0, s>>>(b, wg, t);
}

template <GgmlType T>
bool launch(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s) {
    using C = Codec<T>;
    constexpr int R = kRowsPerWarp;
    GemvBatch b{};
    b.count = count;
    b.n = (int)ps[0].n;
    int min_stages = INT32_MAX;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        // Codec loads assume each block's alignment (kAlign) and whole blocks; float4 activation loads need
        // 16-byte aligned rows.
        if (reinterpret_cast<uintptr_t>(p.w) % C::kAlign != 0 || p.row_bytes % C::kAlign != 0) return false;
        if (p.K % C::kElems != 0 || p.n != ps[0].n || p.type != T) return false;
        if ((reinterpret_cast<uintptr_t>(p.x) & 15) != 0 || p.x_stride % 4 != 0) return false;
        const int nb = (int)(p.K / C::kElems);
        b.job[j] = GemvJob{p.w, p.row_bytes, p.M, nb, p.x, p.x_stride, p.y, p.y_stride, b.groups};
        b.groups += (p.M + R - 1) / R;
        min_stages = std::min(min_stages, (nb + Stage<T, R>::kBlocks - 1) / Stage<T, R>::kBlocks);
    }
    if (b.n <= 1) {
        launch_nt<T, 1>(b, min_stages, t, s);
    } else if (b.n <= 2) {
        launch_nt<T, 2>(b, min_stages, t, s);
    } else if (b.n <= 4) {
        launch_nt<T, 4>(b, min_stages, t, s);
    } else {
        launch_nt<T, 8>(b, min_stages, t, s);
    }
    return true;
}

}  // namespace

GemvMode gemv_mode() {
    static const GemvMode mode = [] {
        const char* v = std::getenv("DSV4_GEMV");
        if (v && std::strcmp(v, "staged") == 0) return GemvMode::Staged;
        if (v && std::strcmp(v, "legacy") == 0) return GemvMode::Legacy;
        return GemvMode::Pipelined;
    }();
    return mode;
}

bool launch_gemv_staged(const MatmulParams& p, const QuantTables& t, cudaStream_t s) {
    // Grouped mode (experts; only when the MoE decode path is off or cannot take a case) keeps the previous
    // kernel: its rows per expert are few and known only on the device, which a warp per row suits better
    // (measured: 275 vs 425 us for V4-Flash's experts at n = 1).
    if (gemv_mode() == GemvMode::Staged || p.offsets) return launch_gemv_warp_staged(p, t, s);
    return launch_gemv_batch(&p, 1, t, s);
}

bool launch_gemv_batch(const MatmulParams* ps, int count, const QuantTables& t, cudaStream_t s) {
    if (count < 1 || count > kMaxJobs || gemv_mode() != GemvMode::Pipelined) return false;
    if (ps[0].n < 1 || ps[0].n > 8) return false;
    for (int j = 0; j < count; ++j)
        if (ps[j].offsets || ps[j].M == 0) return false;
    bool ok = false;
    dispatch_codec(ps[0].type, [&](auto tag) { ok = launch<decltype(tag)::type>(ps, count, t, s); });
    return ok;
}

}  // namespace dsv4::cuda
