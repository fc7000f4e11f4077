// Decode GEMV (n <= 8 activation rows) for every format with a codec (cuda_gemv_codec_list.cuh: the legacy and K
// formats, MXFP4, the IQ formats, F16/BF16/F32). A warp takes 2 consecutive weight rows (so each activation load serves both) and streams them
// through its cp.async ring (cuda_gemv_stream.cuh); lanes decode units of the staged blocks (cuda_gemv_codecs.cuh).
// For Q8_0, Q2_K and IQ2_XXS (kernel gemv_digits) the activations are first written as 8-bit digits and the
// lanes use integer dot products (cuda_gemv_digits.cuh); the other formats (gemv_f32) read f32 activations.
// cuda_select.cu decides which of these (or another kernel) runs.
// When the matrix has few rows, up to 4 warps of a block split the row's stages (split-K) and add their partial sums in
// a fixed order, so enough warps stream at once to keep HBM busy.
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"

namespace dsv4::cuda {

namespace {

using namespace gemv;

constexpr int64_t kTargetWarps = 4096;  // about 32 resident warps on each of the H200's 132 SMs

template <int R, int NT, class X>
struct GemvSrc {
    const uint8_t* rows[R];
    const X* xs[NT];
    __device__ const uint8_t* row(int, int r) const { return rows[r]; }
    __device__ const X* x(int, int t) const { return xs[t]; }
};

// One launch serves a batch of matrices that share the activation row count (a layer's projections of the
// same input, or the groups of a grouped projection): the row groups of job j are [group0, group0 + its
// groups) of one index space, so small matrices fill the GPU together instead of each paying a launch and a
// mostly idle grid.
constexpr int kMaxJobs = kGemvMaxJobs;
struct GemvJob {
    const uint8_t* w;
    size_t row_bytes;
    int64_t M;
    int nb;            // blocks per row
    const void* x;     // activation rows of the codec's type (floats, or XDigits)
    int64_t x_stride;  // in those units
    float* y;
    int64_t y_stride;
    int64_t group0;
    // Row m (past the last row: the last, so a group's spare rows read valid memory), activation row t of the
    // codec's type X (t >= nt: row 0).
    __device__ const uint8_t* row(int64_t m) const { return w + (size_t)(m < M ? m : M - 1) * row_bytes; }
    template <class X>
    __device__ const X* x_row(int t, int nt) const {
        return static_cast<const X*>(x) + (t < nt ? t : 0) * x_stride;
    }
};
struct GemvBatch {
    GemvJob job[kMaxJobs];
    int count;
    int n;
    int64_t groups;
};

// Grid: x covers the batch's row groups (R rows, wg warps each). The n <= NT activation rows are x rows 0..n-1.
// Launched as a programmatic dependent: the first weight stages are requested before waiting for the kernel
// that wrote x.
template <GgmlType T, class C, int NT>
__global__ void __launch_bounds__(kThreads, min_blocks<C, NT>())
    gemv_kernel(const __grid_constant__ GemvBatch b, int wg, QuantTables tb) {
    constexpr int R = kRowsPerWarp;
    using X = typename XOf<C>::X;
    __shared__ uint4 ring[kWarpsPerBlock][ring_words<C, R>()];
    __shared__ float partial[kWarpsPerBlock][R * NT];
    __shared__ uint32_t lut_mem[LutStorage<T>::kWords];
    const Lut lut = build_lut<T>(lut_mem, tb);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int nt = b.n;
    const int split = warp % wg;
    const int64_t g = (int64_t)blockIdx.x * (kWarpsPerBlock / wg) + warp / wg;
    int j = 0;
    while (j + 1 < b.count && g >= b.job[j + 1].group0) ++j;
    const GemvJob& J = b.job[j];
    const int64_t m0 = (g - J.group0) * R;
    const bool live = g < b.groups && m0 < J.M;
    if (live) {
        GemvSrc<R, NT, X> src;
#pragma unroll
        for (int r = 0; r < R; ++r) src.rows[r] = J.row(m0 + r);
#pragma unroll
        for (int t = 0; t < NT; ++t) src.xs[t] = J.x_row<X>(t, nt);
        stream_rows<C, R, NT>(src, 1, J.nb, split, wg, nt, ring[warp], lut, pdl_begin,
                              [&](int, const float(&acc)[R][NT]) {
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

// Activations to digits (cuda_gemv_digits.cuh): 8 lanes per block of 32 values, 4 values each.
constexpr int kQuantLanes = 8;
__global__ void quantize_digits_kernel(XDigits* out, const float* x, int64_t x_stride, int64_t n, int64_t nbx) {
    pdl_trigger();  // the GEMV that reads the digits may launch and start its weight loads now
    pdl_wait();
    const int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t blk = gid / kQuantLanes;
    const int sub = (int)(gid % kQuantLanes);
    const bool live = blk < n * nbx;
    const int64_t row = live ? blk / nbx : 0, c = live ? blk % nbx : 0;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        const float4 a = *reinterpret_cast<const float4*>(x + row * x_stride + kDigitBlock * c + 4 * sub);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    }
    float m = abs_max4(v);
#pragma unroll
    for (int o = 1; o < kQuantLanes; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = sum4(v);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // lanes 0-3: values 0..15, lanes 4-7: 16..31
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (!live) return;
    float scale, inv;
    uint32_t w0 = 0, w1 = 0, w2 = 0;
    if (digit_scale(m, scale, inv)) digits_of4(v, inv, w0, w1, w2);
    XDigits& o = out[blk];
    reinterpret_cast<uint32_t*>(o.a0)[sub] = w0;
    reinterpret_cast<uint32_t*>(o.a1)[sub] = w1;
    reinterpret_cast<uint32_t*>(o.a2)[sub] = w2;
    if (sub == 0) o.scale = scale, o.sum16[0] = sum, o.pad = 0.0f;
    if (sub == 4) o.sum16[1] = sum;
}

template <GgmlType T, class C, int NT>
void launch_nt(const GemvBatch& b, int min_stages, const QuantTables& t, cudaStream_t s) {
    constexpr auto K = gemv_kernel<T, C, NT>;
    prefer_shared<K>();
    int wg = 1;  // warps per row group: split-K only while the rows alone leave the GPU short of warps
    while (wg < kWarpsPerBlock && 2 * wg <= min_stages && b.groups * wg < kTargetWarps) wg *= 2;
    launch_pdl(K, ceil_div(b.groups * wg, kWarpsPerBlock), kThreads, 0, s, b, wg, t);
}

template <GgmlType T, class C>
void launch_codec(const GemvBatch& b, int min_stages, const QuantTables& t, cudaStream_t s) {
    if (b.n <= 1) {
        launch_nt<T, C, 1>(b, min_stages, t, s);
    } else if (b.n <= 2) {
        launch_nt<T, C, 2>(b, min_stages, t, s);
    } else if (b.n <= 4) {
        launch_nt<T, C, 4>(b, min_stages, t, s);
    } else {
        launch_nt<T, C, 8>(b, min_stages, t, s);
    }
}

// Points the batch's jobs at digits of their inputs, each quantized once: as one span when the inputs are
// 32-aligned column ranges of the same rows (one input, or the slices of a grouped projection), else each
// distinct input alone.
void quantize_inputs(GemvBatch& b, const MatmulParams* ps, int count, DigitAlloc& digits, cudaStream_t s) {
    const float* base = ps[0].x;
    const float* end = ps[0].x + ps[0].K;
    bool span = true;
    int64_t covered = 0;  // the span may hold no more values than the jobs read (no unrelated memory)
    for (int j = 0; j < count; ++j) {
        base = std::min(base, ps[j].x);
        end = std::max(end, ps[j].x + ps[j].K);
        span = span && ps[j].x_stride == ps[0].x_stride;
        covered += ps[j].K;
    }
    for (int j = 0; j < count; ++j) span = span && (ps[j].x - base) % kDigitBlock == 0;
    span = span && end - base <= covered && (b.n == 1 || end - base <= ps[0].x_stride);
    if (span) {
        const int64_t nbx = (end - base) / kDigitBlock;
        XDigits* q = digits(b.n * nbx);
        launch_quantize_digits(q, base, ps[0].x_stride, b.n, end - base, s);
        for (int j = 0; j < count; ++j) {
            b.job[j].x = q + (ps[j].x - base) / kDigitBlock;
            b.job[j].x_stride = nbx;
        }
        return;
    }
    for (int j = 0; j < count; ++j) {
        int same = 0;
        while (same < j && (ps[same].x != ps[j].x || ps[same].x_stride != ps[j].x_stride || ps[same].K != ps[j].K))
            ++same;
        if (same == j) {
            const int64_t nbx = ps[j].K / kDigitBlock;
            XDigits* q = digits(b.n * nbx);
            launch_quantize_digits(q, ps[j].x, ps[j].x_stride, b.n, ps[j].K, s);
            b.job[j].x = q;
            b.job[j].x_stride = nbx;
        } else {
            b.job[j].x = b.job[same].x;
            b.job[j].x_stride = b.job[same].x_stride;
        }
    }
}

// Whether the codec of T takes every job: each block's alignment (kAlign) and whole blocks for its loads,
// 16-byte aligned activation rows for the float4 loads, one row count.
template <GgmlType T>
bool serves(const MatmulParams* ps, int count) {
    using C = Codec<T>;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        if (reinterpret_cast<uintptr_t>(p.w) % C::kAlign != 0 || p.row_bytes % C::kAlign != 0) return false;
        if (p.K % C::kElems != 0 || p.n != ps[0].n || p.type != T) return false;
        if (!aligned16(p.x) || p.x_stride % 4 != 0) return false;
    }
    return true;
}

template <GgmlType T>
void launch(const MatmulParams* ps, int count, bool use_digits, const QuantTables& t, cudaStream_t s,
            DigitAlloc* digits) {
    using C = Codec<T>;
    constexpr int R = kRowsPerWarp;
    GemvBatch b{};
    b.count = count;
    b.n = (int)ps[0].n;
    int min_stages = INT32_MAX;
    for (int j = 0; j < count; ++j) {
        const MatmulParams& p = ps[j];
        const int nb = (int)(p.K / C::kElems);
        b.job[j] = GemvJob{p.w, p.row_bytes, p.M, nb, p.x, p.x_stride, p.y, p.y_stride, b.groups};
        b.groups += (p.M + R - 1) / R;
        min_stages = std::min(min_stages, (nb + Stage<C, R>::kBlocks - 1) / Stage<C, R>::kBlocks);
    }
    if (use_digits) quantize_inputs(b, ps, count, *digits, s);
    with_codec<T>(use_digits, [&](auto codec) { launch_codec<T, decltype(codec)>(b, min_stages, t, s); });
}

}  // namespace

bool gemv_pipelined_serves(const MatmulParams* ps, int count) {
    if (count < 1 || count > kMaxJobs || ps[0].n < 1 || ps[0].n > kGemvMaxRows) return false;
    for (int j = 0; j < count; ++j)
        if (ps[j].offsets || ps[j].M == 0) return false;
    bool ok = false;
    dispatch_codec(ps[0].type, [&](auto tag) { ok = serves<decltype(tag)::type>(ps, count); });
    return ok;
}

void launch_quantize_digits(XDigits* out, const float* x, int64_t x_stride, int64_t n, int64_t K, cudaStream_t s) {
    const int64_t nbx = K / kDigitBlock;
    if (n * nbx == 0) return;
    launch_pdl(quantize_digits_kernel, ceil_div(n * nbx * kQuantLanes, 256), 256, 0, s, out, x, x_stride, n, nbx);
}

void launch_gemv_pipelined(const MatmulParams* ps, int count, bool use_digits, const QuantTables& t, cudaStream_t s,
                           DigitAlloc* digits) {
    DSV4_CHECK(gemv_pipelined_serves(ps, count));
    DSV4_CHECK(!use_digits || (digits != nullptr && has_digit_codec(ps[0].type)));
    dispatch_codec(ps[0].type, [&](auto tag) { launch<decltype(tag)::type>(ps, count, use_digits, t, s, digits); });
}

}  // namespace dsv4::cuda
