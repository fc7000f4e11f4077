// y = x W^T for 16..64 activation rows in the bf16 mode (a batch of decoding streams, a short prompt's chunk)
// on the tensor cores, reading the weight in its block format once. The cuBLAS path (matmul_tc) first writes
// the weight as bf16 and reads it back: ~5 bytes of traffic per Q8_0 value where the weight itself is 1.06, and
// at these row counts the product is bound by those bytes, not by the tensor cores.
//
// A block of 4 warps owns 64 weight rows (one m16 tile per warp; up to 32 activation rows) or 128 (two per
// warp, 33..64 activation rows, where each activation load then feeds twice the mma) and a range of K (split-K
// where the rows alone leave SMs idle; the partial sums are added in split order by a second kernel, so results
// are deterministic). Stages of 256 values of each row (whole blocks of every block format; F16 and BF16 rows
// as they are) stream through a 3-deep cp.async ring in shared memory; each lane decodes its 8 values per 32
// with the exact decoders rounded to bf16 (Bf16Run: the values matmul_tc's bf16 weight holds) and multiplies
// them with mma.sync m16n8k16 (f32 accumulation) against the activation rows, rounded to bf16 beforehand and
// read through L1, each 32 values' load issued one step ahead of its use (two steps ahead was slower: the
// registers are at the 64-row blocks' bound).
//
// Why 64-row blocks and the split count below: the kernel is bound by latency, not by bytes or issue (Nsight
// Compute, q_b at 32 rows on an H100 with 128-row blocks: 2 blocks an SM by shared memory, 12% occupancy, 5.1
// cycles per issued instruction, mostly waiting on the activation loads; DRAM 28%). Half the rows per block
// halve its ring, so 4 blocks fit an SM; and a split count that leaves a second wave of a few blocks doubles the
// time (wo_b: 9 splits of 32 row blocks were 288 blocks for 264 slots).
//
// The k order inside each 32 values is permuted, identically for weights and activations (a dot product does
// not depend on it): lane c of a quad holds values 8c .. 8c + 7, the first four in the first k16 tile (as its
// fragment's k 2c, 2c + 1, 2c + 8, 2c + 9), the last four in the second. So a lane decodes one run of 8
// consecutive values per row and reads its activations as one 16-byte load.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_blocks_ring.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace dsv4::cuda {

namespace {

using bf16 = __nv_bfloat16;

using blocks::kStageK, blocks::kStages, blocks::kThreads, blocks::kWarps;

// Weight rows per block with MT m16 tiles per warp.
template <int MT>
constexpr int block_rows() {
    return kWarps * MT * 16;
}

// One product of a launch: y = x W^T, x already rounded to bf16 ([n, K], rows K apart).
struct BlocksJob {
    const uint8_t* w = nullptr;
    size_t row_bytes = 0;
    int64_t M = 0;
    const bf16* xb = nullptr;
    float* y = nullptr;  // splits == 1: y rows y_stride apart
    int64_t y_stride = 0;
    float* part = nullptr;  // splits > 1: [splits, n, M]
};

// Up to kMaxJobs products of one weight format over the same K and n (matmul_batch's jobs), as one launch.
constexpr int kMaxJobs = kGemvMaxJobs;
struct BlocksParams {
    BlocksJob jobs[kMaxJobs];
    int64_t K = 0, n = 0;
    int steps = 0, splits = 1;
};

// Grid: (row blocks of the largest job, splits, jobs). NT: 8-row tiles of activations (n <= 8 NT); MT: m16
// tiles of weight rows per warp.
template <GgmlType T, int NT, int MT>
__global__ void __launch_bounds__(kThreads, MT == 1 ? 4 : 2)
    gemm_blocks_kernel(const __grid_constant__ BlocksParams pp, QuantTables tb) {
    constexpr int kBlockRows = block_rows<MT>();
    using S = blocks::Stage<T, kBlockRows>;
    extern __shared__ uint4 blocks_smem[];
    const BlocksJob& p = pp.jobs[blockIdx.z];
    const int64_t m_block = (int64_t)blockIdx.x * kBlockRows;
    if (m_block >= p.M) return;  // a smaller job of the launch
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
    const int split = blockIdx.y;
    const int s0 = (int)((int64_t)split * pp.steps / pp.splits);
    const int s1 = (int)((int64_t)(split + 1) * pp.steps / pp.splits);
    const int n_steps = s1 - s0;

    // The first byte of stage `step` of block row r (rows past M read the last row; their sums are dropped).
    auto stage_src = [&](int r, int step) {
        const int64_t row = m_block + r < p.M ? m_block + r : p.M - 1;
        return p.w + (size_t)row * p.row_bytes + (size_t)step * S::kBytes;
    };
    auto issue = [&](int i) {
        blocks::issue_stage<T, kBlockRows>(blocks_smem + (i % kStages) * kBlockRows * S::kWords,
                                           [&](int r) { return stage_src(r, s0 + i); });
    };

    // Weights do not depend on the kernels before: the first stages are requested before waiting for them.
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < n_steps) issue(i);
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();

    float acc[MT][NT][4] = {};
    // This lane's activation rows, one per 8-row tile, from the split's first value (rows past n read row
    // n - 1; their sums are dropped). Step j of the split (32 values) reads xr[nt] + 32 j.
    const bf16* xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int64_t i = nt * 8 + g < pp.n ? nt * 8 + g : pp.n - 1;
        xr[nt] = p.xb + i * pp.K + (int64_t)s0 * kStageK + 8 * c;
    }
    const int last_j = n_steps * (kStageK / 32) - 1;
    uint4 b_next[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) b_next[nt] = gemv::ld_u4(xr[nt]);

    int j = 0;
    for (int i = 0; i < n_steps; ++i) {
        if (i + kStages - 1 < n_steps) issue(i + kStages - 1);
        cp_async_commit();
        cp_async_wait<kStages - 1>();
        __syncthreads();
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(blocks_smem + (i % kStages) * kBlockRows * S::kWords);
        // This lane's rows in the slot: g and g + 8 of each m16 tile, each at its offset in its first word.
        const uint8_t* rows[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * MT * 16 + mt * 16 + g + 8 * h;
                const int shift = (int)(reinterpret_cast<uintptr_t>(stage_src(r, s0 + i)) & 15);
                rows[mt][h] = slot + (size_t)r * S::kWords * 16 + shift;
            }
#pragma unroll 2
        for (int t = 0; t < kStageK / 32; ++t, ++j) {
            const int v = 32 * t + 8 * c;  // this lane's first value in the stage
            // This step's activations, and the next step's requested (the last step re-reads its own).
            uint4 b[NT];
            const int jn = j < last_j ? j + 1 : j;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                b[nt] = b_next[nt];
                b_next[nt] = gemv::ld_u4(xr[nt] + 32 * jn);
            }
            uint32_t a[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    Bf16Run<T>::template decode<8>(rows[mt][h] + (v / Dq<T>::kElems) * Dq<T>::kBytes, v % Dq<T>::kElems,
                                                   a[mt][h], tb);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(acc[mt][nt], a[mt][0][0], a[mt][1][0], a[mt][0][1], a[mt][1][1], b[nt].x, b[nt].y);
                    mma_bf16(acc[mt][nt], a[mt][0][2], a[mt][1][2], a[mt][0][3], a[mt][1][3], b[nt].z, b[nt].w);
                }
        }
        __syncthreads();  // every warp is done with the slot before a later issue() refills it
    }
    cp_async_wait<0>();

    // acc[mt][nt]: rows g (q = 0, 1) and g + 8 (q = 2, 3) of the tile, activation rows 2c and 2c + 1.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int64_t m = m_block + warp * MT * 16 + mt * 16 + g + 8 * (q / 2);
                const int64_t i = nt * 8 + 2 * c + q % 2;
                if (m >= p.M || i >= pp.n) continue;
                if (pp.splits == 1)
                    p.y[i * p.y_stride + m] = acc[mt][nt][q];
                else
                    p.part[((int64_t)split * pp.n + i) * p.M + m] = acc[mt][nt][q];
            }
}

// y[i, m] = the splits' partial sums in split order; grid y: the job.
__global__ void blocks_reduce_kernel(const __grid_constant__ BlocksParams pp) {
    pdl_begin();
    const BlocksJob& p = pp.jobs[blockIdx.y];
    const int64_t total = pp.n * p.M;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        float s = p.part[t];
        for (int j = 1; j < pp.splits; ++j) s += p.part[(int64_t)j * total + t];
        p.y[(t / p.M) * p.y_stride + t % p.M] = s;
    }
}

// The kernel of (T, NT, MT) with its shared memory set up, and how many of its blocks an SM holds.
template <GgmlType T, int NT, int MT>
struct BlocksKernel {
    static constexpr auto kernel = gemm_blocks_kernel<T, NT, MT>;
    static constexpr size_t kSmem = blocks::Stage<T, block_rows<MT>()>::kSmem;
    static int blocks_per_sm() {
        static const int n = [] {
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
            gemv::prefer_shared<kernel>();  // the rings need most of the SM's shared memory
            int b = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, kSmem));
            return std::max(b, 1);
        }();
        return n;
    }
};

// Splits of K for `blocks` row blocks of `steps` stages on `slots` resident blocks: the fewest that reach the
// least waves x stages per block (a last wave of a few blocks costs as much as a full one).
int choose_splits(int64_t blocks, int steps, int64_t slots) {
    int best = 1;
    int64_t best_cost = INT64_MAX;
    for (int s = 1; s <= steps; ++s) {
        const int64_t cost = ((blocks * s + slots - 1) / slots) * ((steps + s - 1) / s);
        if (cost < best_cost) best = s, best_cost = cost;
    }
    return best;
}

template <GgmlType T, int NT, int MT>
void run_blocks(CudaBackend& b, const MatmulParams* ps, int count) {
    using Kern = BlocksKernel<T, NT, MT>;
    constexpr int kRows = block_rows<MT>();
    const int64_t K = ps[0].K, n = ps[0].n;
    CudaBackend::Scratch s(b);
    BlocksParams p;
    p.K = K;
    p.n = n;
    p.steps = (int)(K / kStageK);
    int64_t most_rows = 0, all_blocks = 0;  // of the largest job; row blocks of all jobs
    for (int j = 0; j < count; ++j) {
        most_rows = std::max(most_rows, ps[j].M);
        all_blocks += ceil_div(ps[j].M, kRows);
    }
    p.splits = choose_splits(all_blocks, p.steps, (int64_t)Kern::blocks_per_sm() * b.props().multiProcessorCount);
    for (int j = 0; j < count; ++j) {
        BlocksJob& job = p.jobs[j];
        // Jobs reading the same activation rows (a layer's projections of one input) share their bf16 copy.
        int same = 0;
        while (same < j && (ps[same].x != ps[j].x || ps[same].x_stride != ps[j].x_stride)) ++same;
        if (same < j) {
            job.xb = p.jobs[same].xb;
        } else {
            bf16* xb = s.get<bf16>(n * K);
            launch_rows_to_bf16(xb, K, ps[j].x, ps[j].x_stride, nullptr, n, K, b.stream());
            job.xb = xb;
        }
        job.w = ps[j].w;
        job.row_bytes = ps[j].row_bytes;
        job.M = ps[j].M;
        job.y = ps[j].y;
        job.y_stride = ps[j].y_stride;
        if (p.splits > 1) job.part = s.get<float>((int64_t)p.splits * n * job.M);
    }
    launch_pdl(Kern::kernel, dim3(ceil_div(most_rows, kRows), (unsigned)p.splits, (unsigned)count), kThreads,
               Kern::kSmem, b.stream(), p, b.tables());
    CUDA_CHECK_LAUNCH();
    if (p.splits > 1) {
        launch_pdl(blocks_reduce_kernel, dim3(grid_for(n * most_rows, 256), (unsigned)count), 256, 0, b.stream(), p);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace

bool matmul_tc_blocks_serves(const CudaBackend& b, const MatmulParams* ps, int count) {
    const MatmulParams& p = ps[0];
    if (b.gemm_precision() != GemmPrecision::BF16 || p.n < kTcMinRows || p.n > kTcBlocksMaxRows) return false;
    if (count < 1 || count > kMaxJobs || p.K % kStageK != 0) return false;
    for (int j = 0; j < count; ++j)
        if (ps[j].offsets || ps[j].type != p.type || ps[j].K != p.K || ps[j].n != p.n || ps[j].M <= 0) return false;
    return blocks::stage_fits(b.props(), p.type, true);
}

// Up to kTcBlocksSmallRows activation rows: 64-row blocks (4 an SM); more: 128-row blocks, where each
// activation load feeds two m16 tiles (at 64 rows the 64-row blocks were slower: more activation loads per weight).
void matmul_tc_blocks(CudaBackend& b, const MatmulParams* ps, int count) {
    DSV4_CHECK(matmul_tc_blocks_serves(b, ps, count));
    const int64_t n = ps[0].n;
    dispatch_weight_type(ps[0].type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (blocks::dense_format<T>()) {
            if (n <= 16)
                run_blocks<T, 2, 1>(b, ps, count);
            else if (n <= kTcBlocksSmallRows)
                run_blocks<T, 4, 1>(b, ps, count);
            else
                run_blocks<T, 8, 2>(b, ps, count);
        }
    });
}

}  // namespace dsv4::cuda
