// y = x W^T for 16..64 activation rows in the bf16 mode (a batch of decoding streams, a short prompt's chunk)
// on the tensor cores, reading the weight in its block format once. The cuBLAS path (matmul_tc) first writes
// the weight as bf16 and reads it back: ~5 bytes of traffic per Q8_0 value where the weight itself is 1.06, and
// at these row counts the product is bound by those bytes, not by the tensor cores.
//
// A block of 4 warps owns 128 weight rows (2 m16 tiles per warp) and a range of K (split-K where the rows alone
// leave SMs idle; the partial sums are added in split order by a second kernel, so results are deterministic).
// Stages of 256 values of each row (whole blocks of every block format) stream through a 3-deep cp.async ring in
// shared memory; each lane decodes its 8 values per 32 with the exact decoders rounded to bf16 (Bf16Run: the
// values matmul_tc's bf16 weight holds) and multiplies them with mma.sync m16n8k16 (f32 accumulation) against
// the activation rows, rounded to bf16 beforehand and read through L1.
//
// The k order inside each 32 values is permuted, identically for weights and activations (a dot product does
// not depend on it): lane c of a quad holds values 8c .. 8c + 7, the first four in the first k16 tile (as its
// fragment's k 2c, 2c + 1, 2c + 8, 2c + 9), the last four in the second. So a lane decodes one run of 8
// consecutive values per row and reads its activations as one 16-byte load.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace dsv4::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kMTiles = 2;                          // m16 tiles (weight rows) per warp
constexpr int kBlockRows = kWarps * kMTiles * 16;  // 128
constexpr int kStageK = 256;                        // values of a row per stage
constexpr int kStages = 3;

// A stage: kStageK values of each of the block's rows, each row's bytes in whole 16-byte words from the word
// holding its first byte (the row keeps its offset in that word), plus one word for that offset.
template <GgmlType T>
struct BlocksStage {
    static constexpr int kBytes = kStageK / Dq<T>::kElems * Dq<T>::kBytes;
    static constexpr int kWords = (kBytes + 15) / 16 + 1;
    static constexpr size_t kSmem = (size_t)kStages * kBlockRows * kWords * 16;
};

template <GgmlType T>
constexpr bool blocks_format() {
    return Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0;
}

struct BlocksParams {
    const uint8_t* w = nullptr;
    size_t row_bytes = 0;
    int64_t M = 0;
    const bf16* xb = nullptr;  // [n, K] bf16 rows K apart
    int64_t K = 0, n = 0;
    float* y = nullptr;  // splits == 1: y rows y_stride apart
    int64_t y_stride = 0;
    float* part = nullptr;  // splits > 1: [splits, n, M]
    int steps = 0, splits = 1;
};

__device__ __forceinline__ uint4 ld_nc16(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Grid: (row blocks, splits). NT: 8-row tiles of activations (n <= 8 NT).
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kThreads, 2) gemm_blocks_kernel(BlocksParams p, QuantTables tb) {
    using S = BlocksStage<T>;
    extern __shared__ uint4 blocks_smem[];
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
    const int64_t m_block = (int64_t)blockIdx.x * kBlockRows;
    const int split = blockIdx.y;
    const int s0 = (int)((int64_t)split * p.steps / p.splits), s1 = (int)((int64_t)(split + 1) * p.steps / p.splits);
    const int n_steps = s1 - s0;

    // The first byte of stage `step` of block row r (rows past M read the last row; their sums are dropped).
    auto stage_src = [&](int r, int step) {
        const int64_t row = m_block + r < p.M ? m_block + r : p.M - 1;
        return p.w + (size_t)row * p.row_bytes + (size_t)step * S::kBytes;
    };
    auto issue = [&](int i) {
        uint4* slot = blocks_smem + (i % kStages) * kBlockRows * S::kWords;
        for (int idx = threadIdx.x; idx < kBlockRows * S::kWords; idx += kThreads) {
            const int r = idx / S::kWords, w = idx % S::kWords;
            const uint8_t* a = stage_src(r, s0 + i);
            const int shift = (int)(reinterpret_cast<uintptr_t>(a) & 15);
            if (16 * w < shift + S::kBytes) cp_async16(slot + idx, a - shift + 16 * w);
        }
    };

    // Weights do not depend on the kernels before: the first stages are requested before waiting for them.
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < n_steps) issue(i);
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();

    float acc[kMTiles][NT][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.0f;
    // This lane's activation rows, one per 8-row tile (rows past n read row n - 1; their sums are dropped).
    const bf16* xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int64_t i = nt * 8 + g < p.n ? nt * 8 + g : p.n - 1;
        xr[nt] = p.xb + i * p.K + 8 * c;
    }

    for (int i = 0; i < n_steps; ++i) {
        if (i + kStages - 1 < n_steps) issue(i + kStages - 1);
        cp_async_commit();
        cp_async_wait<kStages - 1>();
        __syncthreads();
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(blocks_smem + (i % kStages) * kBlockRows * S::kWords);
        const int64_t k0 = (int64_t)(s0 + i) * kStageK;
        // This lane's rows in the slot: g and g + 8 of each m16 tile, each at its offset in its first word.
        const uint8_t* rows[kMTiles][2];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * kMTiles * 16 + mt * 16 + g + 8 * h;
                const int shift = (int)(reinterpret_cast<uintptr_t>(stage_src(r, s0 + i)) & 15);
                rows[mt][h] = slot + (size_t)r * S::kWords * 16 + shift;
            }
#pragma unroll 2
        for (int t = 0; t < kStageK / 32; ++t) {
            const int v = 32 * t + 8 * c;  // this lane's first value in the stage
            uint32_t a[kMTiles][2][4];
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    Bf16Run<T>::template decode<8>(rows[mt][h] + (v / Dq<T>::kElems) * Dq<T>::kBytes,
                                                   v % Dq<T>::kElems, a[mt][h], tb);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4 b = ld_nc16(xr[nt] + k0 + 32 * t);
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    mma_bf16(acc[mt][nt], a[mt][0][0], a[mt][1][0], a[mt][0][1], a[mt][1][1], b.x, b.y);
                    mma_bf16(acc[mt][nt], a[mt][0][2], a[mt][1][2], a[mt][0][3], a[mt][1][3], b.z, b.w);
                }
            }
        }
        __syncthreads();  // every warp is done with the slot before a later issue() refills it
    }
    cp_async_wait<0>();

    // acc[mt][nt]: rows g (j = 0, 1) and g + 8 (j = 2, 3) of the tile, activation rows 2c and 2c + 1.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t m = m_block + warp * kMTiles * 16 + mt * 16 + g + 8 * (j / 2);
                const int64_t i = nt * 8 + 2 * c + j % 2;
                if (m >= p.M || i >= p.n) continue;
                if (p.splits == 1)
                    p.y[i * p.y_stride + m] = acc[mt][nt][j];
                else
                    p.part[((int64_t)split * p.n + i) * p.M + m] = acc[mt][nt][j];
            }
}

// y[i, m] = the splits' partial sums in split order.
__global__ void blocks_reduce_kernel(float* y, int64_t y_stride, const float* part, int splits, int64_t n,
                                     int64_t M) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * M; t += (int64_t)gridDim.x * blockDim.x) {
        float s = part[t];
        for (int j = 1; j < splits; ++j) s += part[(int64_t)j * n * M + t];
        y[(t / M) * y_stride + t % M] = s;
    }
}

template <GgmlType T, int NT>
void launch_blocks(CudaBackend& b, const BlocksParams& p, cudaStream_t s) {
    auto* k = gemm_blocks_kernel<T, NT>;
    static const bool attr = [&] {
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)BlocksStage<T>::kSmem));
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      (int)cudaSharedmemCarveoutMaxShared));
        return true;
    }();
    (void)attr;
    const dim3 grid(ceil_div(p.M, kBlockRows), (unsigned)p.splits);
    launch_pdl(k, grid, kThreads, BlocksStage<T>::kSmem, s, p, b.tables());
}

}  // namespace

bool matmul_tc_blocks_serves(const CudaBackend& b, GgmlType type, int64_t K, int64_t n) {
    if (b.gemm_precision() != GemmPrecision::BF16 || n < kTcMinRows || n > kTcBlocksMaxRows) return false;
    if (K % kStageK != 0) return false;
    bool ok = false;
    dispatch_weight_type(type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (blocks_format<T>()) ok = BlocksStage<T>::kSmem <= (size_t)b.props().sharedMemPerBlockOptin;
    });
    return ok;
}

void matmul_tc_blocks(CudaBackend& b, float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w,
                      int64_t n) {
    DSV4_CHECK(matmul_tc_blocks_serves(b, w.type, w.cols, n) && w.rows > 0);
    const int64_t K = w.cols, M = w.rows;
    CudaBackend::Scratch s(b);
    bf16* xb = s.get<bf16>(n * K);
    launch_rows_to_bf16(xb, K, x, x_stride, nullptr, n, K, b.stream());
    BlocksParams p;
    p.w = w.data;
    p.row_bytes = w.row_bytes;
    p.M = M;
    p.xb = xb;
    p.K = K;
    p.n = n;
    p.y = y;
    p.y_stride = y_stride;
    p.steps = (int)(K / kStageK);
    // Split K while the row blocks alone fill less than two blocks per SM (at least one stage per split).
    const int64_t row_blocks = ceil_div(M, kBlockRows), want = 2 * (int64_t)b.props().multiProcessorCount;
    p.splits = (int)std::clamp<int64_t>((want + row_blocks - 1) / row_blocks, 1, p.steps);
    if (p.splits > 1) p.part = s.get<float>((int64_t)p.splits * n * M);
    dispatch_weight_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (blocks_format<T>()) {
            if (n <= 16)
                launch_blocks<T, 2>(b, p, b.stream());
            else if (n <= 32)
                launch_blocks<T, 4>(b, p, b.stream());
            else
                launch_blocks<T, 8>(b, p, b.stream());
        }
    });
    CUDA_CHECK_LAUNCH();
    if (p.splits > 1) {
        launch_pdl(blocks_reduce_kernel, grid_for(n * M, 256), 256, 0, b.stream(), y, y_stride, p.part, p.splits, n, M);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace dsv4::cuda
