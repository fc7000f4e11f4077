// Tensor-core matmuls of the bf16 GEMM mode. The weight is decoded with the exact decoders of
// cuda_dequant.cuh and rounded to bf16 into a scratch matrix, the activation rows are rounded to bf16, and
// cuBLAS multiplies the two on the tensor cores with f32 accumulation, writing f32 straight into the op's
// strided output. K is padded with zeros to a multiple of 8 so that every bf16 row starts 16-byte aligned
// (what the tensor-core kernels want); the zeros add nothing to the sums.
//
// Dense matmuls decode the weight a slab of rows at a time, so the scratch stays bounded whatever the matrix
// (the LM head is 129280 x 4096). The MoE runs the grouped kernels of cuda_moe_tc.cu, which decode the weights
// as they load them; for formats those do not take it reads the per-expert row counts on the host once per
// call: an expert with kTcMinRows rows or more gets its own GEMMs (gate and up stacked into one), the others
// run together through the f32 grouped kernels, as in the f32 mode, on a compacted grouping of their rows.
// Nothing is cached across calls: the scratch comes from the backend's caching allocator.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"

#define CUBLAS_CHECK(expr)                                                                                    \
    do {                                                                                                      \
        const cublasStatus_t dsv4_cublas_st_ = (expr);                                                        \
        if (dsv4_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            std::fprintf(stderr, "dsv4: %s:%d: cuBLAS error %s in %s\n", __FILE__, __LINE__,                   \
                         cublasGetStatusName(dsv4_cublas_st_), #expr);                                        \
            std::abort();                                                                                     \
        }                                                                                                     \
    } while (0)

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

namespace {

// Weight values decoded per dense slab: 32 Mi values, 64 MiB of bf16 scratch. Big enough that each slab's
// GEMM fills the GPU (V4's LM head, 129280 x 4096, is 16 slabs of up to 8192 rows), small next to the
// weights themselves.
constexpr int64_t kSlabValues = int64_t(1) << 25;
// cuBLAS's recommended workspace on Hopper; owned by the backend so cuBLAS never allocates on its own.
constexpr size_t kCublasWorkspace = size_t(32) << 20;

int64_t pad8(int64_t k) { return (k + 7) / 8 * 8; }

// out[r, 0:ld] = bf16(weight row r) for r < rows, zeros in [K, ld): a thread per 8 consecutive values.
template <GgmlType T>
__global__ void dequant_bf16_kernel(bf16* out, int64_t ld, const uint8_t* w, size_t row_bytes, int64_t K,
                                    int64_t rows, QuantTables tb) {
    const int64_t groups = ld / 8;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * groups;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / groups, g = t % groups;
        *reinterpret_cast<uint4*>(out + r * ld + 8 * g) =
            8 * g < K ? decode8_bf16<T>(w + (size_t)r * row_bytes, g, K, tb) : make_uint4(0, 0, 0, 0);
    }
}

// out[i, 0:ld] = bf16(x row rows[i] (row i when rows is null)), zeros in [K, ld). VEC: the rows are 16-byte
// aligned and K % 8 == 0, so a thread's 8 values are two float4 loads.
template <bool VEC>
__global__ void rows_to_bf16_kernel(bf16* out, int64_t ld, const float* x, int64_t x_stride, const int32_t* rows,
                                    int64_t n, int64_t K) {
    const int64_t groups = ld / 8;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * groups;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / groups, g = t % groups;
        const float* xr = x + (rows ? (int64_t)rows[i] : i) * x_stride;
        float v[8];
        if (VEC && 8 * g < K) {
            const float4 a = *reinterpret_cast<const float4*>(xr + 8 * g);
            const float4 b = *reinterpret_cast<const float4*>(xr + 8 * g + 4);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = 8 * g + j < K ? xr[8 * g + j] : 0.0f;
        }
        *reinterpret_cast<uint4*>(out + i * ld + 8 * g) = pack_bf16x8(v);
    }
}

// One tensor-core expert's SwiGLU: gu [m, 2F] holds gate | up per row; h [m, ld] = bf16(swiglu * routing
// weight), zeros in [F, ld).
__global__ void swiglu_bf16_kernel(bf16* h, int64_t ld, const float* gu, int64_t m, int64_t F, float clamp,
                                   const float* weights, const int32_t* pair_of_row) {
    const int64_t groups = ld / 8;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < m * groups;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / groups, g = t % groups;
        const float* row = gu + i * 2 * F;
        const float wgt = weights[pair_of_row[i]];
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int64_t f = 8 * g + j;
            v[j] = f < F ? swiglu_value(row[f], row[F + f], clamp) * wgt : 0.0f;
        }
        *reinterpret_cast<uint4*>(h + i * ld + 8 * g) = pack_bf16x8(v);
    }
}

// The f32 experts' SwiGLU, as moe_experts computes it in the f32 mode: h [rows, F] = swiglu * weight.
__global__ void swiglu_f32_kernel(float* h, const float* g, const float* u, int64_t rows, int64_t F, float clamp,
                                  const float* weights, const int32_t* pair_of_row) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * F;
         t += (int64_t)gridDim.x * blockDim.x)
        h[t] = swiglu_value(g[t], u[t], clamp) * weights[pair_of_row[t / F]];
}

// For compacted row j of the f32 experts: its token and pair, read through the grouped row map[j].
__global__ void compose_rows_kernel(int32_t* x_rows_out, int32_t* pair_out, const int32_t* map, const int32_t* x_rows,
                                    const int32_t* pair_of_row, int64_t n) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        x_rows_out[j] = x_rows[map[j]];
        pair_out[j] = pair_of_row[map[j]];
    }
}

// y[map[j], :] = src[j, :] for the n compacted rows of `cols` floats.
__global__ void scatter_rows_kernel(float* y, const float* src, const int32_t* map, int64_t n, int64_t cols) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * cols;
         t += (int64_t)gridDim.x * blockDim.x)
        y[(int64_t)map[t / cols] * cols + t % cols] = src[t];
}

void launch_dequant_bf16(bf16* out, int64_t ld, const Weight& w, const QuantTables& t, cudaStream_t s) {
    dispatch_weight_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        dequant_bf16_kernel<T>
            <<<grid_for(w.rows * (ld / 8), 256), 256, 0, s>>>(out, ld, w.data, w.row_bytes, w.cols, w.rows, t);
    });
    CUDA_CHECK_LAUNCH();
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// y[i, m] = sum_k a[i, k] w[m, k] for i < n, m < M, k < K: w and a are bf16 rows ldw and lda elements apart,
// y is f32 rows y_stride floats apart (y_stride >= M). f32 accumulation on the tensor cores.
void gemm_bf16(cublasHandle_t h, float* y, int64_t y_stride, const bf16* w, int64_t ldw, int64_t M, const bf16* a,
               int64_t lda, int64_t n, int64_t K) {
    DSV4_CHECK_MSG(fits_int(M) && fits_int(n) && fits_int(K) && fits_int(ldw) && fits_int(lda) && fits_int(y_stride),
                   "tensor-core GEMM: sizes M %lld n %lld K %lld exceed cuBLAS's int range", (long long)M,
                   (long long)n, (long long)K);
    DSV4_CHECK(y_stride >= M && ldw >= K && lda >= K);
    // cuBLAS is column-major: y viewed as [M, n] with leading dimension y_stride is op(A) B, where A is the
    // weight read as a [K, M] column-major matrix (transposed by the op) and B the activations as [K, n].
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)n, (int)K, &one, w, CUDA_R_16BF, (int)ldw, a,
                              CUDA_R_16BF, (int)lda, &zero, y, CUDA_R_32F, (int)y_stride, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

// The experts below the tensor-core threshold, through the f32 grouped kernels on a compacted grouping:
// compacted row j is grouped row map[j]; off [E+1] are the compacted offsets (empty for the other experts).
void moe_small_experts_f32(CudaBackend& b, const MoeArgs& a, const std::vector<int32_t>& off,
                           const std::vector<int32_t>& map, const int32_t* x_rows, const int32_t* pair_of_row,
                           float* y, CudaBackend::Scratch& s) {
    const int64_t D = a.gate.cols, F = a.gate.rows, n = (int64_t)map.size();
    const int E = (int)a.gate.n_experts;
    cudaStream_t st = b.stream();
    int32_t* off_d = s.get<int32_t>(E + 1);
    int32_t* map_d = s.get<int32_t>(n);
    b.upload(off_d, off.data(), off.size() * sizeof(int32_t));
    b.upload(map_d, map.data(), map.size() * sizeof(int32_t));
    int32_t* xr = s.get<int32_t>(n);
    int32_t* pr = s.get<int32_t>(n);
    compose_rows_kernel<<<grid_for(n, 256), 256, 0, st>>>(xr, pr, map_d, x_rows, pair_of_row, n);
    CUDA_CHECK_LAUNCH();
    float* g = s.get<float>(n * F);
    float* u = s.get<float>(n * F);
    float* h = s.get<float>(n * F);
    float* yc = s.get<float>(n * D);
    auto grouped = [&](const Weight& w, const float* x, int64_t x_stride, const int32_t* rows, float* out) {
        launch_grouped_matmul(b, w, x, x_stride, rows, out, n, off_d, E);
    };
    grouped(a.gate, a.x, D, xr, g);
    grouped(a.up, a.x, D, xr, u);
    swiglu_f32_kernel<<<grid_for(n * F, 256), 256, 0, st>>>(h, g, u, n, F, a.clamp, a.weights, pr);
    CUDA_CHECK_LAUNCH();
    grouped(a.down, h, F, nullptr, yc);
    scatter_rows_kernel<<<grid_for(n * D, 256), 256, 0, st>>>(y, yc, map_d, n, D);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_rows_to_bf16(bf16* out, int64_t ld, const float* x, int64_t x_stride, const int32_t* rows, int64_t n,
                         int64_t K, cudaStream_t s) {
    const bool vec = K % 8 == 0 && x_stride % 4 == 0 && aligned16(x);
    if (vec)
        rows_to_bf16_kernel<true><<<grid_for(n * (ld / 8), 256), 256, 0, s>>>(out, ld, x, x_stride, rows, n, K);
    else
        rows_to_bf16_kernel<false><<<grid_for(n * (ld / 8), 256), 256, 0, s>>>(out, ld, x, x_stride, rows, n, K);
    CUDA_CHECK_LAUNCH();
}

cublasContext* CudaBackend::cublas() {
    if (!cublas_) {
        CUDA_CHECK(cudaSetDevice(device_));
        CUBLAS_CHECK(cublasCreate(&cublas_));
        CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
        CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
    }
    // The op's current stream (a branch's side stream while a graph is captured), not the one of creation.
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    return cublas_;
}

void CudaBackend::release_cublas() {
    if (cublas_) CUBLAS_CHECK(cublasDestroy(cublas_));
    if (cublas_workspace_) CUDA_CHECK(cudaFree(cublas_workspace_));
    cublas_ = nullptr;
    cublas_workspace_ = nullptr;
}

void matmul_tc(CudaBackend& b, float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w,
               int64_t n) {
    const int64_t K = w.cols, M = w.rows, Kp = pad8(K);
    CudaBackend::Scratch s(b);
    bf16* xb = s.get<bf16>(n * Kp);
    launch_rows_to_bf16(xb, Kp, x, x_stride, nullptr, n, K, b.stream());
    const int64_t slab = std::min(M, std::max<int64_t>(1, kSlabValues / Kp));
    bf16* wb = s.get<bf16>(slab * Kp);
    cublasHandle_t h = b.cublas();
    // One scratch slab for every slab: the stream runs each GEMM before the next decode overwrites it.
    for (int64_t m0 = 0; m0 < M; m0 += slab) {
        const int64_t ms = std::min(slab, M - m0);
        launch_dequant_bf16(wb, Kp, w.row_range(m0, ms), b.tables(), b.stream());
        gemm_bf16(h, y + m0, y_stride, wb, Kp, ms, xb, Kp, n, Kp);
    }
}

bool moe_tc_wanted(const CudaBackend& b, const MoeArgs& a) {
    const int64_t pairs = a.n * a.k;
    return b.gemm_precision() == GemmPrecision::BF16 && pairs >= kTcMinRows;
}

void moe_experts_tc(CudaBackend& b, const MoeArgs& a, const int32_t* offsets, const int32_t* x_rows,
                    const int32_t* pair_of_row, float* y) {
    const int64_t D = a.gate.cols, F = a.gate.rows;
    const int E = (int)a.gate.n_experts;
    DSV4_CHECK(a.up.n_experts == E && a.down.n_experts == E);
    cudaStream_t st = b.stream();
    const int64_t Dp = pad8(D), Fp = pad8(F);
    CudaBackend::Scratch s(b);
    const int64_t rows = a.n * a.k, max_tiles = moe_tc_max_tiles(rows, E);
    if (moe_tc_kernels_fit(b, a) && max_tiles <= 65535) {  // (the tiles are the grid's y)
        // Every expert with rows in two launches, the weights decoded as they are loaded (cuda_moe_tc.cu); the
        // tiles are cut on the device, so nothing here waits for the grouping.
        MoeTcTile* tiles = s.get<MoeTcTile>(max_tiles);
        moe_tc_build_tiles(b, offsets, E, tiles, (int)max_tiles);
        bf16* xb = s.get<bf16>(rows * Dp);
        bf16* hb = s.get<bf16>(rows * Fp);
        launch_rows_to_bf16(xb, Dp, a.x, D, x_rows, rows, D, st);
        moe_tc_gate_up(b, a, tiles, (int)max_tiles, xb, Dp, hb, Fp, pair_of_row);
        moe_tc_down(b, a, tiles, (int)max_tiles, hb, Fp, y);
        return;
    }

    // Other formats: each expert with kTcMinRows rows or more is decoded to bf16 for cuBLAS, the others run
    // through the f32 grouped kernels; this reads the per-expert offsets on the host.
    std::vector<int32_t> off((size_t)E + 1);
    b.download(off.data(), offsets, off.size() * sizeof(int32_t));
    std::vector<int> big;
    std::vector<int32_t> small_off((size_t)E + 1, 0), small_map;
    int64_t max_rows = 0;
    for (int e = 0; e < E; ++e) {
        const int32_t r0 = off[e], r1 = off[e + 1];
        small_off[e + 1] = small_off[e];
        if (r1 - r0 >= kTcMinRows) {
            big.push_back(e);
            max_rows = std::max<int64_t>(max_rows, r1 - r0);
        } else {
            for (int32_t r = r0; r < r1; ++r) small_map.push_back(r);
            small_off[e + 1] += r1 - r0;
        }
    }
    if (!small_map.empty()) moe_small_experts_f32(b, a, small_off, small_map, x_rows, pair_of_row, y, s);
    if (big.empty()) return;
    bf16* xb = s.get<bf16>(max_rows * Dp);  // the expert's rows of x
    bf16* wgu = s.get<bf16>(2 * F * Dp);    // gate rows, then up rows: one GEMM gives both
    bf16* wd = s.get<bf16>(D * Fp);
    float* gu = s.get<float>(max_rows * 2 * F);
    bf16* hb = s.get<bf16>(max_rows * Fp);
    cublasHandle_t h = b.cublas();
    // The scratch is reused expert after expert: stream order runs each expert's GEMMs before the next
    // expert's decode overwrites the buffers (and keeps the just-written weight hot in L2 for its GEMM).
    for (int e : big) {
        const int64_t r0 = off[e], m = off[e + 1] - r0;
        launch_rows_to_bf16(xb, Dp, a.x, D, x_rows + r0, m, D, st);
        launch_dequant_bf16(wgu, Dp, a.gate.expert(e), b.tables(), st);
        launch_dequant_bf16(wgu + F * Dp, Dp, a.up.expert(e), b.tables(), st);
        gemm_bf16(h, gu, 2 * F, wgu, Dp, 2 * F, xb, Dp, m, Dp);
        swiglu_bf16_kernel<<<grid_for(m * (Fp / 8), 256), 256, 0, st>>>(hb, Fp, gu, m, F, a.clamp, a.weights,
                                                                         pair_of_row + r0);
        CUDA_CHECK_LAUNCH();
        launch_dequant_bf16(wd, Fp, a.down.expert(e), b.tables(), st);
        gemm_bf16(h, y + r0 * D, D, wd, Fp, D, hb, Fp, m, Fp);
    }
}

}  // namespace dsv4::cuda
