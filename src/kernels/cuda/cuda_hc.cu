// CUDA hyper-connection ops (mHC): hc_pre (RMS-scaled mix projection, Sinkhorn split, stream collapse),
// hc_post (expand the sublayer output into the streams) and hc_head (final collapse).
//
// hc_pre and hc_head spread over many blocks even for one decode token (a block per token is latency-bound:
// one SM walking 16384 values several times took ~50 us per call):
//   1. the sums over each token's flattened streams, in chunks: with a plain or Q8_0 weight one kernel whose
//      block (p, q) computes chunk p's square sums (double, as the CPU) and partial mix dots H_i . fn_m for
//      tokens 8q..8q+7 and every mix (fn has only hc*(2+hc) rows: a GEMV over it keeps few warps busy, and
//      as a matmul its 24 rows left the f32 tile kernel at ~1.5 ms per 4096-token V4-Flash call, where this
//      kernel reads H once); other formats: square sums over chunks, then the mix projection as a matmul;
//   2. per (token, slice of D): the RMS factor from the partials (fixed order) and the collapse of the slice,
//      and on a branch (ops/backend.h: a step graph runs it beside the sublayer, since only hc_post reads it)
//      a warp per token for post and the Sinkhorn split of comb. It keeps
//      comb in registers, a lane per element, when hc * hc <= 32 (row and column sums gathered by shuffles in
//      the serial order: bit for bit numerics.h); larger hc use the shared-memory lane-per-row steps.
#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_select.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxHc = 16;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

// ss[i, p] = sum of H_i[j]^2 over chunk p of P (double). Grid (n, P).
__global__ void __launch_bounds__(kThreads) hc_ss_kernel(double* ss, const float* H, int64_t flat, int P) {
    pdl_begin();
    __shared__ double scratch[32];
    const int64_t i = blockIdx.x;
    const int p = blockIdx.y;
    const int64_t chunk = (flat + P - 1) / P, lo = p * chunk, hi = min(flat, lo + chunk);
    const float* Hi = H + i * flat;
    double a0 = 0, a1 = 0;
    int64_t j = lo + threadIdx.x;
    for (; j + kThreads < hi; j += 2 * kThreads) {
        const float u = Hi[j], v = Hi[j + kThreads];
        a0 += (double)u * u;
        a1 += (double)v * v;
    }
    if (j < hi) a0 += (double)Hi[j] * Hi[j];
    const double t = block_sum(a0 + a1, scratch);
    if (threadIdx.x == 0) ss[i * P + p] = t;
}

// Stream k of hc_post at one position: pk x + sum_j c[j, k] r(j), the j-sum first, then the post term (the
// reference order and roundings). c: the token's hc x hc comb; r(j): residual stream j at the position.
template <class R>
__device__ __forceinline__ float hc_post_value(const float* c, int hc, int k, R r, float pk, float x) {
    float s = 0;
    for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(c[j * hc + k], r(j)));
    return __fadd_rn(__fmul_rn(pk, x), s);
}

// hc_post's x at flat index e of [n, D]: x + x2 rounded once to f32 (what `add` stores), or x alone.
__device__ __forceinline__ float hc_post_input(const HcPostArgs& a, int64_t e) {
    return a.x2 ? __fadd_rn(a.x[e], a.x2[e]) : a.x[e];
}

// Element f (stream f / D, position f % D) of token i's streams after the hc_post `a`: written to a.H_out and
// returned. hc == 4 is inlined with the stream count known, so the residual loads go out together; hc * D
// < 2^31 (checked by the caller), so the index division is a 32-bit one.
__device__ __forceinline__ float hc_post_element_n(const HcPostArgs& a, int64_t i, int f, int hc, int D) {
    const int k = (int)((unsigned)f / (unsigned)D), d = f - k * D;
    const float* R = a.H_res + i * hc * (int64_t)D + d;
    const float v = hc_post_value(
        a.comb + i * hc * hc, hc, k, [&](int j) { return R[(int64_t)j * D]; }, a.post[i * hc + k],
        hc_post_input(a, i * D + d));
    a.H_out[i * hc * (int64_t)D + f] = v;
    return v;
}
__device__ __forceinline__ float hc_post_element(const HcPostArgs& a, int64_t i, int f, int hc, int D) {
    return hc == 4 ? hc_post_element_n(a, i, f, 4, D) : hc_post_element_n(a, i, f, hc, D);
}

// Columns of one chunk of the fused dots kernel, the tokens a block takes, and the formats it decodes (those
// fn is stored in).
constexpr int kDotCols = 256;
constexpr int kDotTokens = 8;
constexpr int kEarlyMixes = 3;  // fn rows per warp the kernel loads before its wait
constexpr bool dots_format(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0;
}

// Block (p, q): chunk p (kDotCols columns) of the flattened streams H_i of tokens i in [kDotTokens q, +
// kDotTokens): ss[i, p] = its square sum (double) and part[i, p, m] = its dot with fn row m. With a fused
// hc_post (first.H_out == H, else null), the block first computes its chunk of H from first's inputs, writes
// it and works on those values (the chunks of all blocks cover H once).
template <GgmlType T>
__global__ void __launch_bounds__(kThreads)
    hc_dots_kernel(float* part, double* ss, const float* H, HcPostArgs first, int hc, int dim, const uint8_t* fn,
                   size_t row_bytes, int n_mix, int64_t flat, int64_t n_all, int P, QuantTables tables) {
    using D = Dq<T>;
    __shared__ float hs[kDotTokens][kDotCols];
    const int p = blockIdx.x;
    const int64_t c0 = (int64_t)p * kDotCols;
    const int cols = (int)(flat - c0 < kDotCols ? flat - c0 : kDotCols);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    constexpr int kWarps = kThreads / kWarp;
    constexpr int kPerLane = kDotCols / kWarp;  // consecutive columns of each lane: their loads go out together
    // Values lane * kPerLane + j of this chunk of fn row m (zeros past flat).
    auto load_fn = [&](int m, float (&w)[kPerLane]) {
        const uint8_t* row = fn + (size_t)m * row_bytes;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int c = lane * kPerLane + j;
            const int64_t k = c0 + c;
            w[j] = c < cols ? D::value(row + (k / D::kElems) * D::kBytes, (int)(k % D::kElems), tables) : 0.0f;
        }
    };
    // The warp's first kEarlyMixes rows of fn are weights: loaded before the wait, so their latency overlaps the
    // kernel before (three rows per warp cover hc = 4's 24 mixes).
    float early[kEarlyMixes][kPerLane];
#pragma unroll
    for (int r = 0; r < kEarlyMixes; ++r)
        if (warp + r * kWarps < n_mix) load_fn(warp + r * kWarps, early[r]);
    pdl_begin();
    const int64_t i0 = (int64_t)blockIdx.y * kDotTokens;
    const int n = (int)min((int64_t)kDotTokens, n_all - i0);
    H += i0 * flat;
    ss += i0 * P;
    part += i0 * P * n_mix;
    for (int t = threadIdx.x; t < n * kDotCols; t += kThreads) {
        const int i = t / kDotCols, c = t % kDotCols;
        float v = 0.0f;
        if (c < cols) v = first.H_out ? hc_post_element(first, i0 + i, (int)(c0 + c), hc, dim) : H[i * flat + c0 + c];
        hs[i][c] = v;
    }
    __syncthreads();
    for (int i = warp; i < n; i += kWarps) {
        double a = 0;
        for (int c = lane; c < cols; c += kWarp) a += (double)hs[i][c] * hs[i][c];
        a = warp_sum(a);
        if (lane == 0) ss[(int64_t)i * P + p] = a;
    }
    auto dots = [&](int m, const float (&w)[kPerLane]) {
        float acc[kDotTokens];
#pragma unroll
        for (int i = 0; i < kDotTokens; ++i) {
            acc[i] = 0.0f;
            if (i < n)
#pragma unroll
                for (int j = 0; j < kPerLane; ++j) acc[i] = fmaf(w[j], hs[i][lane * kPerLane + j], acc[i]);
        }
#pragma unroll
        for (int i = 0; i < kDotTokens; ++i) {
            if (i >= n) break;
            const float v = warp_sum(acc[i]);
            if (lane == 0) part[((int64_t)i * P + p) * n_mix + m] = v;
        }
    };
#pragma unroll
    for (int r = 0; r < kEarlyMixes; ++r)
        if (warp + r * kWarps < n_mix) dots(warp + r * kWarps, early[r]);
    for (int m = warp + kEarlyMixes * kWarps; m < n_mix; m += kWarps) {
        float w[kPerLane];
        load_fn(m, w);
        dots(m, w);
    }
}

// The fused dots kernel for prefill-sized calls (n_all >= kTileMinTokens, at most kTileMixes mixes: hc <= 4):
// block (p, q) takes chunk p (kDotCols columns) of tokens [kTileTokens q, + kTileTokens). The chunk's H rows
// and fn rows are staged in shared memory (rows padded to kTileLd floats: a warp's fn rows hit distinct
// banks); thread t computes a register tile of 4 tokens x 3 mixes over a quarter of the columns, and the
// quarters are summed in order through shared memory. The kDotTokens kernel above spends most of its time in
// warp reductions (one per token and mix) when thousands of tokens come; this one has none in its loop.
constexpr int kTileTokens = 32, kTileMixes = 24, kTileMinTokens = 64;
constexpr int kTileLd = kDotCols + 4;
constexpr int kTileSplits = 4;  // column quarters
constexpr size_t kTileSmem = (size_t)(kTileTokens + kTileMixes) * kTileLd * sizeof(float);
static_assert(kThreads == kTileSplits * (kTileTokens / 4) * (kTileMixes / 3));

template <GgmlType T>
__global__ void __launch_bounds__(kThreads)
    hc_dots_tile_kernel(float* part, double* ss, const float* H, const uint8_t* fn, size_t row_bytes, int n_mix,
                        int64_t flat, int64_t n_all, int P, QuantTables tables) {
    pdl_begin();
    extern __shared__ float4 tile_smem[];
    float* hs = reinterpret_cast<float*>(tile_smem);  // [kTileTokens][kTileLd]
    float* ws = hs + kTileTokens * kTileLd;           // [kTileMixes][kTileLd]
    const int64_t i0 = (int64_t)blockIdx.y * kTileTokens;
    const int n = (int)min((int64_t)kTileTokens, n_all - i0);
    const int p = blockIdx.x;
    const int64_t c0 = (int64_t)p * kDotCols;
    const int cols = (int)(flat - c0 < kDotCols ? flat - c0 : kDotCols);
    for (int t = threadIdx.x; t < kTileTokens * kDotCols; t += kThreads) {
        const int i = t / kDotCols, c = t % kDotCols;
        hs[i * kTileLd + c] = i < n && c < cols ? H[(i0 + i) * flat + c0 + c] : 0.0f;
    }
    for (int t = threadIdx.x; t < kTileMixes * (kDotCols / 8); t += kThreads) {
        const int m = t / (kDotCols / 8), g = t % (kDotCols / 8);
        float v[8] = {};
        // Values c0 + 8 g .. + 7 of fn row m (c0 is a multiple of 8; zeros past flat).
        if (m < n_mix && 8 * g < cols) decode8<T>(fn + (size_t)m * row_bytes, c0 / 8 + g, flat, v, tables);
#pragma unroll
        for (int j = 0; j < 8; ++j) ws[m * kTileLd + 8 * g + j] = v[j];
    }
    __syncthreads();

    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    // Square sums: warp w takes tokens 4w .. 4w + 3, lanes 8 columns each (double, as the CPU).
    for (int r = 0; r < kTileTokens / (kThreads / kWarp); ++r) {
        const int i = (kTileTokens / (kThreads / kWarp)) * warp + r;
        double a = 0;
#pragma unroll
        for (int j = 0; j < kDotCols / kWarp; ++j) {
            const double v = hs[i * kTileLd + lane + kWarp * j];
            a += v * v;
        }
        a = warp_sum(a);
        if (lane == 0 && i < n) ss[(i0 + i) * P + p] = a;
    }

    // Dots: thread t -> column quarter q = t / 64, tokens 4 tg .. + 3, mixes 3 mg .. + 2.
    const int q = threadIdx.x / 64, tg = (threadIdx.x % 64) / 8, mg = threadIdx.x % 8;
    float acc[4][3];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b) acc[a][b] = 0.0f;
    constexpr int kQuarter = kDotCols / kTileSplits;
#pragma unroll 4
    for (int c = q * kQuarter; c < (q + 1) * kQuarter; c += 4) {
        float4 h[4], w[3];
#pragma unroll
        for (int a = 0; a < 4; ++a) h[a] = *reinterpret_cast<const float4*>(hs + (4 * tg + a) * kTileLd + c);
#pragma unroll
        for (int b = 0; b < 3; ++b) w[b] = *reinterpret_cast<const float4*>(ws + (3 * mg + b) * kTileLd + c);
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 3; ++b) {
                acc[a][b] = fmaf(h[a].x, w[b].x, acc[a][b]);
                acc[a][b] = fmaf(h[a].y, w[b].y, acc[a][b]);
                acc[a][b] = fmaf(h[a].z, w[b].z, acc[a][b]);
                acc[a][b] = fmaf(h[a].w, w[b].w, acc[a][b]);
            }
    }
    __syncthreads();  // hs is reused for the quarters' sums
    float* red = hs;  // [kTileSplits][kTileTokens][kTileMixes]
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b) red[(q * kTileTokens + 4 * tg + a) * kTileMixes + 3 * mg + b] = acc[a][b];
    __syncthreads();
    for (int t = threadIdx.x; t < kTileTokens * kTileMixes; t += kThreads) {
        const int i = t / kTileMixes, m = t % kTileMixes;
        if (i >= n || m >= n_mix) continue;
        float v = 0.0f;
#pragma unroll
        for (int s = 0; s < kTileSplits; ++s) v += red[s * kTileTokens * kTileMixes + t];
        part[((i0 + i) * P + p) * n_mix + m] = v;
    }
}

// The mixes of token i (the raw dots summed over their P_raw partials in order, times the RMS factor from the
// P_ss partial square sums) into shared memory.
__device__ void load_mixes(float* mixes, const float* raw, int P_raw, const double* ss, int P_ss, int64_t i, int n_mix,
                           int64_t flat, float eps) {
    // A warp per sum: lanes take partials lane, lane + 32, ... and the warp adds them in a fixed tree order, so
    // the P partials cost one dependent load per lane trip, not P.
    __shared__ float rms_s;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
    if (warp == 0) {
        double t = 0;
        for (int p = lane; p < P_ss; p += kWarp) t += ss[i * P_ss + p];
        t = warp_sum(t);
        if (lane == 0) rms_s = 1.0f / sqrtf((float)(t / (double)flat) + eps);
    }
    for (int m = warp; m < n_mix; m += n_warps) {
        float v = 0.0f;
        for (int p = lane; p < P_raw; p += kWarp) v += raw[(i * P_raw + p) * n_mix + m];
        v = warp_sum(v);
        if (lane == 0) mixes[m] = v;
    }
    __syncthreads();
    for (int m = threadIdx.x; m < n_mix; m += blockDim.x) mixes[m] *= rms_s;
    __syncthreads();
}

// Sum over t < hc of lane (base + t * stride)'s v, in t order (all 32 lanes call it). HC > 0: hc known at
// compile time, so the shuffles go out together and only the adds wait on each other (the Sinkhorn is a
// chain of these: ~40 per iteration).
template <int HC = 0>
__device__ __forceinline__ float ordered_sum(float v, int base, int stride, int hc) {
    if constexpr (HC > 0) {
        float t[HC];
#pragma unroll
        for (int k = 0; k < HC; ++k) t[k] = __shfl_sync(0xffffffffu, v, (base + k * stride) & (kWarp - 1));
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < HC; ++k) s += t[k];
        return s;
    } else {
        float s = 0.0f;
        for (int t = 0; t < hc; ++t) s += __shfl_sync(0xffffffffu, v, (base + t * stride) & (kWarp - 1));
        return s;
    }
}

// The Sinkhorn with a lane per comb element (hc * hc <= 32); HC as in ordered_sum.
template <int HC>
__device__ float sinkhorn_lanes(const float* mixes, const float* scale, const float* base, int hc, int iters,
                                float eps, int l) {
    const bool own = l < hc * hc;
    const int j = own ? l / hc : 0, k = own ? l % hc : 0;
    // hc_comb_init: row softmax plus eps.
    float v = own ? mixes[2 * hc + l] * scale[2] + base[2 * hc + l] : 0.0f;
    float m = -INFINITY;
    for (int t = 0; t < hc; ++t) m = fmaxf(m, __shfl_sync(0xffffffffu, v, (j * hc + t) & (kWarp - 1)));
    const float e = expf(v - m);
    v = e / ordered_sum<HC>(e, j * hc, 1, hc) + eps;
    v /= (ordered_sum<HC>(v, k, hc, hc) + eps);  // hc_comb_col_norm
    for (int it = 1; it < iters; ++it) {
        v /= (ordered_sum<HC>(v, j * hc, 1, hc) + eps);  // hc_comb_row_norm
        v /= (ordered_sum<HC>(v, k, hc, hc) + eps);      // hc_comb_col_norm
    }
    return v;
}

// The Sinkhorn-normalized comb into comb_s (and pre/post), on the first warp: register path when hc*hc <= 32.
// (One thread holding all of comb in registers, the serial steps unrolled, measured 2.3x slower for hc = 4:
// 27.6 vs 11.9 us per call.)
__device__ void hc_sinkhorn(const float* mixes, const float* scale, const float* base, const HcParams& p, float* pre_s,
                            float* post_s, float* comb_s) {
    if (threadIdx.x >= kWarp) return;
    const int l = threadIdx.x, hc = p.hc;
    const float eps = p.hc_eps;
    if (l < hc) hc_pre_post(mixes, scale, base, hc, eps, l, pre_s, post_s);
    if (hc * hc <= kWarp) {
        const float v = hc == 4 ? sinkhorn_lanes<4>(mixes, scale, base, hc, p.sinkhorn_iters, eps, l)
                                : sinkhorn_lanes<0>(mixes, scale, base, hc, p.sinkhorn_iters, eps, l);
        if (l < hc * hc) comb_s[l] = v;
        return;
    }
    if (l < hc) hc_comb_init(comb_s, mixes, scale, base, hc, eps, l);
    __syncwarp();
    if (l < hc) hc_comb_col_norm(comb_s, hc, eps, l);
    __syncwarp();
    for (int it = 1; it < p.sinkhorn_iters; ++it) {
        if (l < hc) hc_comb_row_norm(comb_s, hc, eps, l);
        __syncwarp();
        if (l < hc) hc_comb_col_norm(comb_s, hc, eps, l);
        __syncwarp();
    }
}

// x[d] = sum_j pre[j] H_j[d] over this block's slice of D, summed in the CPU's order with its roundings.
__device__ void hc_collapse(float* x, const float* Hi, const float* pre, int hc, int64_t D) {
    const int64_t chunk = (D + gridDim.y - 1) / gridDim.y, lo = blockIdx.y * chunk, hi = min(D, lo + chunk);
    for (int64_t d = lo + threadIdx.x; d < hi; d += blockDim.x) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s = __fadd_rn(s, __fmul_rn(pre[j], Hi[j * D + d]));
        x[d] = s;
    }
}

// Grid (n, slices of D): the collapse x of each slice with the pre
// weights (the mixes' first hc). Post and comb come from hc_pre_comb_kernel, issued as a branch: only hc_post
// needs them, so in a step graph the Sinkhorn's dependent chain stays off the path to the attention and the MoE.
__global__ void __launch_bounds__(kThreads) hc_pre_x_kernel(float* x, const float* H, CudaBackend::HcDots dots,
                                                            const float* scale, const float* base, HcParams p) {
    pdl_begin();
    __shared__ float mixes[kMaxMix];
    __shared__ float pre_s[kMaxHc], post_s[kMaxHc];
    const int hc = p.hc, n_mix = (2 + hc) * hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, dots.raw, dots.P_raw, dots.ss, dots.P_ss, i, n_mix, hc * D, p.norm_eps);
    if (threadIdx.x < hc) hc_pre_post(mixes, scale, base, hc, p.hc_eps, threadIdx.x, pre_s, post_s);
    __syncthreads();
    hc_collapse(x + i * D, H + i * hc * D, pre_s, hc, D);
}

// hc_pre_x_kernel and the RMS norm of its x in one: a block per token holds the collapsed row in registers (a
// float4 per kNormXThreads columns, at most kNormXVecs each), so the norm's sum needs no second pass and the
// step one kernel less. The collapse rounds as hc_collapse, the norm as rms_norm's kernels (a double sum, then
// w * (x * r)). HC > 0: hc known at compile time, every stream's loads in flight at once. Needs D % 4 == 0,
// 16-byte aligned rows and D <= 4 kNormXVecs kNormXThreads.
constexpr int kNormXThreads = 512;
constexpr int kNormXVecs = 8;
constexpr size_t kNormXStageMax = 160 * 1024;  // bytes of streams staged in shared memory, at most

template <int HC>
__global__ void __launch_bounds__(kNormXThreads)
    hc_pre_x_norm_kernel(float* x, const float* H, CudaBackend::HcDots dots, const float* scale, const float* base,
                         const float* norm, float eps, HcParams p, bool staged) {
    extern __shared__ float4 h_stage[];  // [hc][D / 4]: the token's streams when staged
    __shared__ float mixes[kMaxMix];
    __shared__ float pre_s[kMaxHc], post_s[kMaxHc], scale_s[2], base_s[2 * kMaxHc];
    __shared__ double scratch[32];
    const int hc = HC > 0 ? HC : p.hc, n_mix = (2 + hc) * hc;
    const int64_t i = blockIdx.x, D = p.dim;
    const int nv = (int)(D / 4), t = threadIdx.x;
    // The weights (pre's scale and base, the norm's) are read before the wait: their latency overlaps the
    // kernel before, and after it the chain is one round trip for the dots and (staged) the streams together.
    if (t < 2) scale_s[t] = scale[t];
    if (t < 2 * hc) base_s[t] = base[t];
    float4 nw[kNormXVecs];
#pragma unroll
    for (int k = 0; k < kNormXVecs; ++k) {
        const int c = t + k * kNormXThreads;
        nw[k] = rms_weight4(norm, c, nv);
    }
    pdl_begin();
    const float4* Hi = reinterpret_cast<const float4*>(H + i * hc * D);
    if (staged) {  // each thread copies the values it reads below: its own wait covers them
#pragma unroll
        for (int k = 0; k < kNormXVecs; ++k) {
            const int c = t + k * kNormXThreads;
            if (c >= nv) break;
            for (int j = 0; j < hc; ++j) cp_async16(&h_stage[(int64_t)j * nv + c], &Hi[(int64_t)j * nv + c]);
        }
        cp_async_commit();
    }
    load_mixes(mixes, dots.raw, dots.P_raw, dots.ss, dots.P_ss, i, n_mix, hc * D, p.norm_eps);
    if (t < hc) hc_pre_post(mixes, scale_s, base_s, hc, p.hc_eps, t, pre_s, post_s);
    if (staged) cp_async_wait_all();
    __syncthreads();
    const float4* src = staged ? h_stage : Hi;
    float4 v[kNormXVecs];
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kNormXVecs; ++k) {
        const int c = t + k * kNormXThreads;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < nv) {
#pragma unroll
            for (int j = 0; j < (HC > 0 ? HC : kMaxHc); ++j) {
                if (HC == 0 && j >= hc) break;
                const float4 h = src[(int64_t)j * nv + c];
                const float w = pre_s[j];
                s = make_float4(__fadd_rn(s.x, __fmul_rn(w, h.x)), __fadd_rn(s.y, __fmul_rn(w, h.y)),
                                __fadd_rn(s.z, __fmul_rn(w, h.z)), __fadd_rn(s.w, __fmul_rn(w, h.w)));
            }
        }
        v[k] = s;
        ss += sum_sq4(s);
    }
    ss = block_sum(ss, scratch);
    const float r = rms_factor(ss, D, eps);
    float4* xi = reinterpret_cast<float4*>(x + i * D);
#pragma unroll
    for (int k = 0; k < kNormXVecs; ++k) {
        const int c = t + k * kNormXThreads;
        if (c >= nv) break;
        xi[c] = rms_scale4(v[k], r, nw[k], norm != nullptr);
    }
}

// A warp per token: post [hc] and the Sinkhorn-normalized comb [hc, hc].
__global__ void __launch_bounds__(kWarp) hc_pre_comb_kernel(float* post, float* comb, CudaBackend::HcDots dots,
                                                            const float* scale, const float* base, HcParams p) {
    pdl_begin();
    __shared__ float mixes[kMaxMix];
    __shared__ float pre_s[kMaxHc], post_s[kMaxHc], comb_s[kMaxHc * kMaxHc];
    const int hc = p.hc, n_mix = (2 + hc) * hc;
    const int64_t i = blockIdx.x;
    load_mixes(mixes, dots.raw, dots.P_raw, dots.ss, dots.P_ss, i, n_mix, hc * p.dim, p.norm_eps);
    hc_sinkhorn(mixes, scale, base, p, pre_s, post_s, comb_s);
    __syncwarp();
    for (int t = threadIdx.x; t < hc * hc; t += kWarp) comb[i * hc * hc + t] = comb_s[t];
    for (int t = threadIdx.x; t < hc; t += kWarp) post[i * hc + t] = post_s[t];
}

__global__ void __launch_bounds__(kThreads) hc_head_finish_kernel(float* y, const float* H, CudaBackend::HcDots dots,
                                                                  const float* scale, const float* base, HcParams p) {
    pdl_begin();
    __shared__ float mixes[kMaxHc];
    __shared__ float pre[kMaxHc];
    const int hc = p.hc;
    const int64_t i = blockIdx.x, D = p.dim;
    load_mixes(mixes, dots.raw, dots.P_raw, dots.ss, dots.P_ss, i, hc, hc * D, p.norm_eps);
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf_(mixes[threadIdx.x] * scale[0] + base[threadIdx.x]) + p.hc_eps;
    __syncthreads();
    hc_collapse(y + i * D, H + i * hc * D, pre, hc, D);
}

// Block (stream row i hc + k, slice y of D): no per-element index division (64-bit divisions made the flat
// form 4x slower than its memory traffic on prefill chunks).
__global__ void hc_post_kernel(HcPostArgs a, int hc, int64_t D) {
    pdl_begin();
    const int64_t ik = blockIdx.x, i = ik / hc;
    const int k = (int)(ik % hc);
    const float* R = a.H_res + i * hc * D;
    const float* c = a.comb + i * hc * hc;
    const float pk = a.post[ik];
    for (int64_t d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.y * blockDim.x)
        a.H_out[ik * D + d] = hc_post_value(
            c, hc, k, [&](int j) { return R[j * D + d]; }, pk, hc_post_input(a, i * D + d));
}

// hc_post for HC streams known at compile time: block (token i, slice y of D), a thread per 4 consecutive d
// (D % 4 == 0, 16-byte aligned rows) computing every stream k, so token i's residual streams and x are read
// once instead of once per k. The values are hc_post_kernel's (hc_post_value).
template <int HC>
__global__ void __launch_bounds__(kThreads) hc_post_streams_kernel(HcPostArgs a, int64_t D) {
    pdl_begin();
    __shared__ float c[HC * HC], pk[HC];
    const int64_t i = blockIdx.x;
    if (threadIdx.x < HC * HC) c[threadIdx.x] = a.comb[i * HC * HC + threadIdx.x];
    if (threadIdx.x < HC) pk[threadIdx.x] = a.post[i * HC + threadIdx.x];
    __syncthreads();
    const float4* R = reinterpret_cast<const float4*>(a.H_res + i * HC * D);
    const float4* xi = reinterpret_cast<const float4*>(a.x + i * D);
    const float4* x2i = a.x2 ? reinterpret_cast<const float4*>(a.x2 + i * D) : nullptr;
    float4* out = reinterpret_cast<float4*>(a.H_out + i * HC * D);
    const int64_t D4 = D / 4;
    for (int64_t d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; d < D4; d += (int64_t)gridDim.y * blockDim.x) {
        alignas(16) float r[HC][4];
        alignas(16) float xv[4];
        alignas(16) float o[4];
#pragma unroll
        for (int j = 0; j < HC; ++j) *reinterpret_cast<float4*>(r[j]) = R[j * D4 + d];
        *reinterpret_cast<float4*>(xv) = xi[d];
        if (x2i) {  // x + x2 rounded once, as hc_post_input
            alignas(16) float x2v[4];
            *reinterpret_cast<float4*>(x2v) = x2i[d];
#pragma unroll
            for (int e = 0; e < 4; ++e) xv[e] = __fadd_rn(xv[e], x2v[e]);
        }
#pragma unroll
        for (int k = 0; k < HC; ++k) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[e] = hc_post_value(
                    c, HC, k, [&](int j) { return r[j][e]; }, pk[k], xv[e]);
            out[k * D4 + d] = *reinterpret_cast<const float4*>(o);
        }
    }
}

// Enough blocks for about two per SM when few tokens come; one per token when many do.
int64_t per_token_blocks(int64_t n, int sms) {
    return std::clamp<int64_t>((2 * (int64_t)sms + n - 1) / n, 1, 32);
}

}  // namespace

bool hc_pre_norm_fused_serves(int64_t dim, const float* x, const float* H, const float* norm) {
    // The row in the collapse kernel's registers, float4 loads.
    return dim % 4 == 0 && dim <= 4 * kNormXVecs * kNormXThreads && aligned16(x, H, norm);
}

void CudaBackend::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                         const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) {
    if (skipped("hc_pre")) return;
    hc_pre_launch(x, post, comb, H, fn, scale, base, n, p, first, nullptr);
}

void CudaBackend::hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                              const float* base, int64_t n, const HcParams& p, const HcPostArgs* first,
                              const float* norm, float eps) {
    const HcPreNormKernel k = select_hc_pre_norm(*this, p.dim, x, H, norm);
    if (k == HcPreNormKernel::split || skipped("hc_pre") || skipped("rms_norm")) {
        Backend::hc_pre_norm(x, post, comb, H, fn, scale, base, n, p, first, norm, eps);
        ran(kernel_name(HcPreNormKernel::split));
        return;
    }
    const XNorm xn{norm, eps};
    hc_pre_launch(x, post, comb, H, fn, scale, base, n, p, first, &xn);
    ran(kernel_name(k));
}

void CudaBackend::hc_pre_launch(float* x, float* post, float* comb, const float* H, const Weight& fn,
                                const float* scale, const float* base, int64_t n, const HcParams& p,
                                const HcPostArgs* first, const XNorm* norm) {
    DSV4_CHECK(p.hc > 0 && p.hc <= kMaxHc);
    const int n_mix = (2 + p.hc) * p.hc;
    DSV4_CHECK(fn.rows == n_mix && fn.cols == p.hc * p.dim);
    DSV4_CHECK(n <= INT32_MAX);
    DSV4_CHECK(!first || first->H_out == H);
    if (n <= 0) return;
    Scratch s(*this);
    const HcDots dots = hc_dots(s, H, fn, n, p, first);
    // The scratch of the dots outlives the branch: inside a step graph it is the graph's own memory, and
    // outside one the branch runs in order on the stream.
    branch();
    launch_pdl(hc_pre_comb_kernel, (unsigned)n, kWarp, 0, stream_, post, comb, dots, scale, base, p);
    CUDA_CHECK_LAUNCH();
    end_branch();
    if (!norm)
        launch_pdl(hc_pre_x_kernel, dim3((unsigned)n, (unsigned)hc_slices(n, p)), kThreads, 0, stream_, x, H, dots,
                   scale, base, p);
    else {
        // The token's streams staged in shared memory (their copies go out with the dots' loads) where they fit
        // beside the kernel's static shared memory.
        const size_t stage = (size_t)p.hc * p.dim * sizeof(float);
        auto launch = [&](auto kernel, size_t avail) {
            const bool staged = stage <= kNormXStageMax && stage <= avail;
            if (staged) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage));
            launch_pdl(kernel, (unsigned)n, kNormXThreads, staged ? stage : 0, stream_, x, H, dots, scale, base,
                       norm->weight, norm->eps, p, staged);
        };
        if (p.hc == 4)
            launch(hc_pre_x_norm_kernel<4>, dynamic_smem_avail<hc_pre_x_norm_kernel<4>>());
        else
            launch(hc_pre_x_norm_kernel<0>, dynamic_smem_avail<hc_pre_x_norm_kernel<0>>());
    }
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) {
    if (skipped("hc_post")) return;
    if (n <= 0 || p.hc <= 0 || p.dim <= 0) return;
    DSV4_CHECK(n * p.hc <= INT32_MAX);
    if (p.hc == 4 && p.dim % 4 == 0 && aligned16(a.H_out, a.x, a.x2, a.H_res)) {
        // A block per token and slice; a few slices per token when few tokens come, so the GPU fills.
        const unsigned slices =
            (unsigned)std::min<int64_t>(per_token_blocks(n, props_.multiProcessorCount), ceil_div(p.dim / 4, kThreads));
        launch_pdl(hc_post_streams_kernel<4>, dim3((unsigned)n, slices), kThreads, 0, stream_, a, p.dim);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const unsigned slices = (unsigned)std::min<int64_t>(ceil_div(p.dim, kThreads), 65535);
    launch_pdl(hc_post_kernel, dim3((unsigned)(n * p.hc), slices), kThreads, 0, stream_, a, p.hc, p.dim);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                          const HcParams& p) {
    DSV4_CHECK(p.hc > 0 && p.hc <= kMaxHc);
    DSV4_CHECK(fn.rows == p.hc && fn.cols == p.hc * p.dim);
    DSV4_CHECK(n <= INT32_MAX);
    if (n <= 0) return;
    Scratch s(*this);
    const HcDots dots = hc_dots(s, H, fn, n, p, nullptr);
    launch_pdl(hc_head_finish_kernel, dim3((unsigned)n, (unsigned)hc_slices(n, p)), kThreads, 0, stream_, y, H, dots,
               scale, base, p);
    CUDA_CHECK_LAUNCH();
}

int CudaBackend::hc_slices(int64_t n, const HcParams& p) const {
    return (int)std::min<int64_t>(per_token_blocks(n, props_.multiProcessorCount),
                                  std::max<int64_t>(1, p.dim / kThreads));
}

CudaBackend::HcDots CudaBackend::hc_dots(Scratch& s, const float* H, const Weight& fn, int64_t n, const HcParams& p,
                                         const HcPostArgs* first) {
    const int64_t flat = p.hc * p.dim;
    const int n_mix = (int)fn.rows;
    const bool tile = n >= kTileMinTokens && n_mix <= kTileMixes;
    // The fused hc_post rides in the per-chunk dots kernel (decode sizes; its 32-bit element index needs
    // flat < 2^31); before the tile kernel or the square sums + matmul it runs as its own kernel.
    const bool fused = first && dots_format(fn.type) && !tile && flat <= INT32_MAX;
    if (first && !fused) hc_post(*first, n, p);
    HcDots d;
    if (dots_format(fn.type)) {
        const int P = (int)((flat + kDotCols - 1) / kDotCols);
        d.P_raw = d.P_ss = P;
        d.raw = s.get<float>(n * P * n_mix);
        d.ss = s.get<double>(n * P);
        dispatch_weight_type(fn.type, [&](auto tag) {
            constexpr GgmlType T = decltype(tag)::type;
            if constexpr (dots_format(T)) {
                if (tile) {
                    CUDA_CHECK(cudaFuncSetAttribute(hc_dots_tile_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)kTileSmem));
                    launch_pdl(hc_dots_tile_kernel<T>, dim3((unsigned)P, ceil_div(n, kTileTokens)), kThreads, kTileSmem,
                               stream_, d.raw, d.ss, H, fn.data, fn.row_bytes, n_mix, flat, n, P, tables_);
                } else {
                    launch_pdl(hc_dots_kernel<T>, dim3((unsigned)P, ceil_div(n, kDotTokens)), kThreads, 0, stream_,
                               d.raw, d.ss, H, fused ? *first : HcPostArgs{}, p.hc, (int)p.dim, fn.data, fn.row_bytes,
                               n_mix, flat, n, P, tables_);
                }
            }
        });
        CUDA_CHECK_LAUNCH();
        return d;
    }
    d.P_ss = (int)std::min<int64_t>(per_token_blocks(n, props_.multiProcessorCount),
                                    std::max<int64_t>(1, flat / (2 * kThreads)));
    d.raw = s.get<float>(n * n_mix);
    d.ss = s.get<double>(n * d.P_ss);
    launch_pdl(hc_ss_kernel, dim3((unsigned)n, (unsigned)d.P_ss), kThreads, 0, stream_, d.ss, H, flat, d.P_ss);
    CUDA_CHECK_LAUNCH();
    // Always the f32 kernels (never the bf16 tensor-core mode): the mixes feed a Sinkhorn and sigmoids.
    const MatmulParams mp = plain_matmul(fn, d.raw, fn.rows, H, fn.cols, n);
    launch_matmul(mp, *select_matmul(*this, MatmulCall{&mp, 1, false}), tables_, stream_);
    return d;
}

}  // namespace dsv4::cuda
