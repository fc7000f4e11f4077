// The matmul ops and the two kernels that take every weight format, exact f32 accumulation: gemv_warp (a warp
// per weight row, up to 8 activation rows at a time) and tiled (64x64 shared-memory tiles). Both read the
// weight in its block format and decode it with cuda_dequant.cuh, so the products are those of the exactly
// dequantized weight. The other kernels (the decode GEMVs of cuda_gemv.cu and cuda_gemv_q8_xreg.cu, the
// tensor cores of cuda_gemm_tc.cu) take the formats and shapes they specialize; cuda_select.cu chooses.
// Also embedding lookup.
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_select.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kGemvRows = 8;     // weight rows per block (one warp each)
constexpr int kGemvTokens = 8;   // activation rows per pass
constexpr int kTileM = 64, kTileN = 64, kTileK = 32;

__device__ __forceinline__ void row_range(const MatmulParams& p, int e, int64_t* r0, int64_t* r1) {
    if (p.offsets) {
        *r0 = p.offsets[e];
        *r1 = p.offsets[e + 1];
    } else {
        *r0 = 0;
        *r1 = p.n;
    }
}

__device__ __forceinline__ const float* x_row(const MatmulParams& p, int64_t r) {
    return p.x + (p.x_rows ? (int64_t)p.x_rows[r] : r) * p.x_stride;
}

template <GgmlType T>
__global__ void __launch_bounds__(kGemvRows * kWarp) gemv_kernel(MatmulParams p, QuantTables tb) {
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int e = blockIdx.z;
    const int64_t m = (int64_t)blockIdx.x * kGemvRows + warp;
    int64_t r0, r1;
    row_range(p, e, &r0, &r1);
    if (m >= p.M || r0 >= r1) return;  // warp-uniform; no block-level sync below
    const uint8_t* wrow = p.w + (size_t)e * p.expert_bytes + (size_t)m * p.row_bytes;
    const int64_t n_groups = (p.K + 7) / 8;
    for (int64_t c0 = r0 + (int64_t)blockIdx.y * kGemvTokens; c0 < r1; c0 += (int64_t)gridDim.y * kGemvTokens) {
        const int nt = (int)(r1 - c0 < kGemvTokens ? r1 - c0 : kGemvTokens);
        const float* xr[kGemvTokens];
#pragma unroll
        for (int t = 0; t < kGemvTokens; ++t) xr[t] = x_row(p, c0 + (t < nt ? t : 0));
        float acc[kGemvTokens];
#pragma unroll
        for (int t = 0; t < kGemvTokens; ++t) acc[t] = 0.0f;
        for (int64_t g = lane; g < n_groups; g += kWarp) {
            float v[8];
            decode8<T>(wrow, g, p.K, v, tb);
            const int64_t k0 = 8 * g;
#pragma unroll
            for (int t = 0; t < kGemvTokens; ++t) {
                if (t >= nt) break;
                const float* xp = xr[t] + k0;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if constexpr (Dq<T>::kElems == 1) {
                        if (k0 + j >= p.K) break;  // plain types: K need not be a multiple of 8
                    }
                    acc[t] = fmaf(v[j], xp[j], acc[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < kGemvTokens; ++t) acc[t] = warp_sum(acc[t]);
        if (lane == 0)
            for (int t = 0; t < nt; ++t) p.y[(c0 + t) * p.y_stride + m] = acc[t];
    }
}

template <GgmlType T>
__global__ void __launch_bounds__(256) tiled_kernel(MatmulParams p, QuantTables tb) {
    __shared__ float ws[kTileK][kTileM + 1];  // [k][m]: dequantized weight tile
    __shared__ float xs[kTileK][kTileN + 1];  // [k][row]: activation tile
    const int e = blockIdx.z;
    int64_t r0, r1;
    row_range(p, e, &r0, &r1);
    if (r0 >= r1) return;  // block-uniform
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.x * kTileM;
    const uint8_t* wbase = p.w + (size_t)e * p.expert_bytes;
    // Each thread loads 8 consecutive k of one weight row and of one activation row per K step.
    const int load_row = tid / 4, load_k = 8 * (tid % 4);
    for (int64_t c0 = r0 + (int64_t)blockIdx.y * kTileN; c0 < r1; c0 += (int64_t)gridDim.y * kTileN) {
        float acc[4][4] = {};
        const int64_t xr = c0 + load_row;
        const float* xp = xr < r1 ? x_row(p, xr) : nullptr;
        const int64_t wm = m0 + load_row;
        const uint8_t* wrow = wm < p.M ? wbase + (size_t)wm * p.row_bytes : nullptr;
        for (int64_t k0 = 0; k0 < p.K; k0 += kTileK) {
            const int64_t kk = k0 + load_k;
            float v[8];
            if (wrow && kk < p.K) {
                decode8<T>(wrow, kk / 8, p.K, v, tb);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) ws[load_k + j][load_row] = v[j];
#pragma unroll
            for (int j = 0; j < 8; ++j) xs[load_k + j][load_row] = (xp && kk + j < p.K) ? xp[kk + j] : 0.0f;
            __syncthreads();
#pragma unroll 8
            for (int k = 0; k < kTileK; ++k) {
                float a[4], b[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) a[i] = ws[k][tx + 16 * i];
#pragma unroll
                for (int j = 0; j < 4; ++j) b[j] = xs[k][ty + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t m = m0 + tx + 16 * i, r = c0 + ty + 16 * j;
                if (m < p.M && r < r1) p.y[r * p.y_stride + m] = acc[i][j];
            }
    }
}

template <GgmlType T>
__global__ void dequant_rows_kernel(float* out, int64_t out_stride, const uint8_t* w, size_t row_bytes, int64_t K,
                                    int64_t rows, const int32_t* ids, QuantTables tb) {
    const int64_t i = blockIdx.x;
    const int64_t r = ids ? (int64_t)ids[i] : i;
    if (r < 0 || r >= rows) {
        if (threadIdx.x == 0) printf("dsv4: CUDA embed: row id %lld is out of range [0, %lld)\n", (long long)r, (long long)rows);
        __trap();
    }
    const uint8_t* wrow = w + (size_t)r * row_bytes;
    float* o = out + i * out_stride;
    for (int64_t g = threadIdx.x; g < (K + 7) / 8; g += blockDim.x) {
        float v[8];
        decode8<T>(wrow, g, K, v, tb);
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (8 * g + j < K) o[8 * g + j] = v[j];
    }
}

void check_weight_shape(const Weight& w) {
    const GgmlTypeTraits& tr = ggml_traits(w.type);
    DSV4_CHECK_MSG(w.cols % tr.block_elems == 0, "weight '%s': %lld columns is not a whole number of %s blocks", w.name,
                   (long long)w.cols, tr.name);
}

}  // namespace

MatmulParams plain_matmul(const Weight& w, float* y, int64_t y_stride, const float* x, int64_t x_stride, int64_t n) {
    MatmulParams p;
    p.w = w.data;
    p.type = w.type;
    p.K = w.cols;
    p.M = w.rows;
    p.row_bytes = w.row_bytes;
    p.x = x;
    p.x_stride = x_stride;
    p.y = y;
    p.y_stride = y_stride;
    p.n = n;
    return p;
}

void launch_matmul(const MatmulParams& p, MatmulKernel k, const QuantTables& t, cudaStream_t s, DigitAlloc* digits) {
    if (p.n == 0 || p.M == 0) return;
    switch (k) {
        case MatmulKernel::q8_xreg:
            launch_gemv_q8_xreg(&p, 1, s);
            break;
        case MatmulKernel::lane_xreg:
            launch_gemv_lane_xreg(&p, 1, t, s);
            break;
        case MatmulKernel::gemv_digits:
        case MatmulKernel::gemv_f32:
            launch_gemv_pipelined(&p, 1, k == MatmulKernel::gemv_digits, t, s, digits);
            break;
        case MatmulKernel::gemv_warp:
        case MatmulKernel::tiled: {
            const bool grouped = p.offsets != nullptr;
            const int n_experts = grouped ? p.n_experts : 1;
            // Grouped rows per expert are unknown on the host (they live on the device), so the grid covers the
            // total and empty experts exit at once.
            dispatch_weight_type(p.type, [&](auto tag) {
                constexpr GgmlType T = decltype(tag)::type;
                if (k == MatmulKernel::gemv_warp) {
                    const dim3 grid(ceil_div(p.M, kGemvRows), 1, n_experts);
                    gemv_kernel<T><<<grid, kGemvRows * kWarp, 0, s>>>(p, t);
                } else {
                    const unsigned tiles_n = ceil_div(p.n, kTileN);
                    const dim3 grid(ceil_div(p.M, kTileM), grouped ? std::min(tiles_n, 4u) : tiles_n, n_experts);
                    tiled_kernel<T><<<grid, 256, 0, s>>>(p, t);
                }
            });
            break;
        }
        case MatmulKernel::tc_bf16:
        case MatmulKernel::tc_blocks:
            DSV4_CHECK_MSG(false, "launch_matmul: the tensor-core matmuls run through the backend (matmul_tc*)");
    }
    CUDA_CHECK_LAUNCH();
}

void launch_grouped_matmul(CudaBackend& b, const Weight& w, const float* x, int64_t x_stride, const int32_t* x_rows,
                           float* y, int64_t n, const int32_t* offsets, int n_experts) {
    DSV4_CHECK(w.n_experts == n_experts);
    MatmulParams p = plain_matmul(w, y, w.rows, x, x_stride, n);
    p.expert_bytes = (size_t)w.rows * w.row_bytes;
    p.offsets = offsets;
    p.x_rows = x_rows;
    p.n_experts = n_experts;
    const MatmulKernel k = *select_matmul(b, MatmulCall{&p, 1, false});
    launch_matmul(p, k, b.tables(), b.stream());
    b.ran(kernel_name(k));
}

void launch_dequant_rows(float* out, int64_t out_stride, const Weight& w, const int32_t* ids, int64_t n,
                         const QuantTables& t, cudaStream_t s) {
    if (n == 0 || w.cols == 0) return;
    check_weight_shape(w);
    dispatch_weight_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        dequant_rows_kernel<T><<<(unsigned)n, 128, 0, s>>>(out, out_stride, w.data, w.row_bytes, w.cols, w.rows, ids, t);
    });
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::embed(float* out, const Weight& w, const int32_t* ids, int64_t n) {
    launch_dequant_rows(out, w.cols, w, ids, n, tables_, stream_);
}

void CudaBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) {
    if (skipped("matmul")) return;
    if (n == 0 || w.rows == 0) return;
    check_weight_shape(w);
    const MatmulParams p = plain_matmul(w, y, y_stride, x, x_stride, n);
    const MatmulKernel k = *select_matmul(*this, MatmulCall{&p, 1, true, true});
    if (k == MatmulKernel::tc_bf16) {
        matmul_tc(*this, y, y_stride, x, x_stride, w, n);
    } else if (k == MatmulKernel::tc_blocks) {
        matmul_tc_blocks(*this, &p, 1);
    } else {
        Scratch scratch(*this);  // the decode GEMV's activation digits, if it takes them
        DigitAlloc digits = [&](int64_t count) { return scratch.get<gemv::XDigits>(count); };
        launch_matmul(p, k, tables_, stream_, &digits);
    }
    ran(kernel_name(k));
}

void CudaBackend::matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm,
                              float eps, const Weight& w, int64_t n) {
    if (skipped("matmul")) return;
    if (n == 0 || w.rows == 0) return;
    check_weight_shape(w);
    // The norm inside the register GEMV where it is chosen (one row, the row held by every block); else
    // rms_norm into scratch, then the matmul.
    const MatmulParams p = plain_matmul(w, y, y_stride, x, x_stride, n);
    const std::optional<MatmulKernel> k = select_matmul(*this, MatmulCall{&p, 1, true, true, true, norm});
    if (k) {
        launch_gemv_q8_xreg_norm(p, norm, eps, stream_);
        CUDA_CHECK_LAUNCH();
        ran(kernel_name(*k));
        return;
    }
    Scratch s(*this);
    float* t = s.get<float>(n * w.cols);
    norm_rows(t, x, x_stride, norm, n, w.cols, eps);
    matmul(y, y_stride, t, w.cols, w, n);
}

void CudaBackend::matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
    if (skipped("matmul_batch")) return;
    if (n == 0 || jobs.empty()) return;
    // The jobs of each weight type as one launch of a batch kernel (up to 16 per launch) where one is chosen;
    // any other job runs as its own matmul.
    std::vector<bool> done(jobs.size(), false);
    Scratch scratch(*this);
    DigitAlloc digits = [&](int64_t count) { return scratch.get<gemv::XDigits>(count); };
    const char* kernel = nullptr;
    for (size_t a = 0; a < jobs.size(); ++a) {
        if (done[a]) continue;
        std::vector<MatmulParams> ps;
        std::vector<size_t> which;
        for (size_t b = a; b < jobs.size() && ps.size() < (size_t)kGemvMaxJobs; ++b) {
            if (done[b] || jobs[b].w->type != jobs[a].w->type || jobs[b].w->rows == 0) continue;
            const Weight& w = *jobs[b].w;
            check_weight_shape(w);
            ps.push_back(plain_matmul(w, jobs[b].y, jobs[b].y_stride, jobs[b].x, jobs[b].x_stride, n));
            which.push_back(b);
        }
        if (ps.size() < 2) continue;
        const std::optional<MatmulKernel> k = select_matmul(*this, MatmulCall{ps.data(), (int)ps.size(), true, true});
        if (!k) continue;
        if (*k == MatmulKernel::tc_blocks)
            matmul_tc_blocks(*this, ps.data(), (int)ps.size());
        else if (*k == MatmulKernel::q8_xreg)
            launch_gemv_q8_xreg(ps.data(), (int)ps.size(), stream_);
        else if (*k == MatmulKernel::lane_xreg)
            launch_gemv_lane_xreg(ps.data(), (int)ps.size(), tables_, stream_);
        else
            launch_gemv_pipelined(ps.data(), (int)ps.size(), *k == MatmulKernel::gemv_digits, tables_, stream_, &digits);
        CUDA_CHECK_LAUNCH();
        kernel = kernel_name(*k);
        for (size_t b : which) done[b] = true;
    }
    for (size_t a = 0; a < jobs.size(); ++a)
        if (!done[a]) {
            matmul(jobs[a].y, jobs[a].y_stride, jobs[a].x, jobs[a].x_stride, *jobs[a].w, n);
            kernel = last_kernel();
        }
    ran(kernel);
}

}  // namespace dsv4::cuda
