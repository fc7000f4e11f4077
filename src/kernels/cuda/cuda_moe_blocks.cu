// The routed experts of a batch of decoding streams or a short prompt's chunk in the bf16 mode (chosen from
// 256 up to kMoeBlocksChosenPairs (token, slot) pairs, see select_moe) on the tensor cores, each touched expert's
// weights read once per tile of its rows.
//
// Why: at these sizes most touched experts have one to three rows (64 streams of V4-Flash: 384 pairs over
// ~200 of 256 experts), so the work is reading the ~7 MB of each touched expert. The register kernels
// (cuda_moe_*_xreg.cu) redo the whole one-token decode per pair; the wgmma kernels of cuda_moe_tc.cu multiply
// 128-row tiles, ~60x more tensor work than one row needs. Here the weight is the mma's A operand (16 weight
// rows per m16 tile) and a tile of 8, 16 or 32 grouped rows its B operand, as in cuda_gemm_blocks.cu: a block
// of 4 warps streams 128 weight rows through a 3-deep cp.async ring of 256-value stages (cuda_blocks_ring.cuh),
// each lane decodes a run of its rows' values at once with Bf16Run (the bf16 values the other bf16 paths use)
// into A fragments and multiplies them with mma.sync m16n8k16 against the tile's bf16 activation rows, read
// through L1.
//
//   gate/up: a block per (64 features, tile): warp w's first m16 tile holds gate rows 16 w .. 16 w + 15 of the
//            block's features, its second the up rows of the same features, so the epilogue has gate and up of
//            each (row, feature) in one thread: h = bf16(swiglu(g, u) * routing weight);
//   down:    a block per (128 outputs, tile): y [row, d] = h_row . down_d (f32).
// The grid's x is the block's rows, its y the tile: a tile's blocks run together and share its activation rows
// in L1 and L2. The numerics are those of the bf16 mode's other expert paths: bf16 x, weights and h, f32 sums
// (in another order), SwiGLU in f32.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_blocks_ring.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"
#include "kernels/cuda/cuda_gemv_stream.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"

namespace dsv4::cuda {

namespace {

using bf16 = __nv_bfloat16;

using blocks::kStageK, blocks::kStages, blocks::kThreads;
constexpr int kBlockRows = blocks::kRows;  // 128 weight rows per block
constexpr int kHalfRows = kBlockRows / 2;  // one m16 tile per warp in each half
// The k order inside each 4 kRun values is permuted, identically for weights and activations (a dot product
// does not depend on it): lane c of a quad holds the kRun consecutive values kRun c .. kRun c + kRun - 1 of its
// rows, 8 of them in each of kRun / 8 k32 steps (as its fragments' k 2c, 2c + 1, 2c + 8, 2c + 9 of the first
// k16 tile and the same of the second). So a lane decodes a run of a row at once and reads its activations as
// 16-byte loads. Runs of 32 for the formats whose Bf16Run sets up a scale per 16 or 32 values (set up once, not
// per 8 values); 8 for the others, whose decoders work per 8 values anyway (32 would only cost registers).
template <GgmlType T>
constexpr int run_of() {
    return T == GgmlType::IQ2_XXS || T == GgmlType::Q2_K || T == GgmlType::Q8_0 ? 32 : 8;
}

template <GgmlType T>
using MoeBlocksStage = blocks::Stage<T>;

struct MoeBlocksParams {
    const MoeTcTile* tiles;
    ExpertStack w0, w1;  // gate/up: gate and up; down: down twice
    const bf16* x;       // grouped rows [rows, K], bf16
    int64_t K, N;        // values per row; outputs per expert (F for gate/up, D for down)
    void* out;           // gate/up: h (bf16), down: y (f32); rows ldo apart
    int64_t ldo;
    const float* weights;        // gate/up: routing weights per (token, slot) pair
    const int32_t* pair_of_row;  // gate/up: each grouped row's pair
    float clamp;
};

// Grid: (row blocks, tiles). NT: 8-row activation tiles per tile (a tile has up to 8 NT grouped rows).
template <GgmlType T, int NT, bool GATE_UP>
__global__ void __launch_bounds__(kThreads, 3)
    moe_blocks_kernel(const __grid_constant__ MoeBlocksParams p, QuantTables tb) {
    using S = MoeBlocksStage<T>;
    constexpr int kRun = run_of<T>(), kGroupK = 4 * kRun;
    extern __shared__ uint4 moe_blocks_smem[];
    // The tiles' kernel ended before this one's launch could start (moe_experts_blocks: a launch without
    // programmatic dependence lies between), so the tile is read before pdl_wait.
    const MoeTcTile tile = p.tiles[blockIdx.y];
    if (tile.rows <= 0) return;  // past the tiles the grouping needed (the grid is sized for the most)
    QuantTables qt = tb;
    if constexpr (T == GgmlType::IQ2_XXS) {
        // The grid's selectors in shared memory: the decode looks one up per 8 values at random, and from L1
        // such lookups bound the kernel (Nsight Compute, 64 tokens of V4-Flash: L1/TEX 89% busy, DRAM 16%).
        __shared__ uint64_t sel[256];
        for (int j = threadIdx.x; j < 256; j += kThreads) sel[j] = tb.iq2xxs_sel[j];
        qt.iq2xxs_sel = sel;  // read after the main loop's first barrier
    }
    constexpr int kOuts = GATE_UP ? kHalfRows : kBlockRows;  // outputs per block
    const int64_t n0 = (int64_t)blockIdx.x * kOuts;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
    const int steps = (int)(p.K / kStageK);

    // The first byte of stage `step` of block row r: gate/up: r < 64 gate row n0 + r, else up row n0 + r - 64;
    // down: row n0 + r. Rows past N read row N - 1 (their sums are dropped).
    auto stage_src = [&](int r, int step) {
        const bool second = GATE_UP && r >= kHalfRows;
        int64_t row = n0 + (second ? r - kHalfRows : r);
        if (row >= p.N) row = p.N - 1;
        const ExpertStack& w = second ? p.w1 : p.w0;
        return w.data + (size_t)tile.expert * w.expert_bytes + (size_t)row * w.row_bytes + (size_t)step * S::kBytes;
    };
    auto issue = [&](int i) {
        blocks::issue_stage<T>(moe_blocks_smem + (i % kStages) * kBlockRows * S::kWords,
                               [&](int r) { return stage_src(r, i); });
    };

    // The weights do not depend on the kernels before: the first stages are requested before waiting for them.
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < steps) issue(i);
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();

    float acc[2][NT][4] = {};
    // This lane's activation rows, one per 8-row tile (rows past the tile read its last row; sums dropped).
    const bf16* xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int r = nt * 8 + g < tile.rows ? nt * 8 + g : tile.rows - 1;
        xr[nt] = p.x + (int64_t)(tile.row0 + r) * p.K;
    }

    for (int i = 0; i < steps; ++i) {
        if (i + kStages - 1 < steps) issue(i + kStages - 1);
        cp_async_commit();
        cp_async_wait<kStages - 1>();
        __syncthreads();
        const uint8_t* slot =
            reinterpret_cast<const uint8_t*>(moe_blocks_smem + (i % kStages) * kBlockRows * S::kWords);
        const int64_t k0 = (int64_t)i * kStageK;
        // This lane's rows in the slot: g and g + 8 of each m16 tile (tile mt: block rows 64 mt + 16 warp ..),
        // each at its offset in its first word.
        const uint8_t* rows[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = mt * kHalfRows + warp * 16 + g + 8 * h;
                const int shift = (int)(reinterpret_cast<uintptr_t>(stage_src(r, i)) & 15);
                rows[mt][h] = slot + (size_t)r * S::kWords * 16 + shift;
            }
#pragma unroll 1
        for (int t = 0; t < kStageK / kGroupK; ++t) {
            const int v = kGroupK * t + kRun * c;  // this lane's first value in the stage
            // Virtual k32 step s: this lane's values v + 8 s .. v + 8 s + 7 of both operands. The activations
            // first, then one m16 tile's rows at a time (half the registers of decoding both).
            uint4 b[NT][kRun / 8];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int s = 0; s < kRun / 8; ++s) b[nt][s] = gemv::ld_u4(xr[nt] + k0 + v + 8 * s);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                uint32_t a[2][kRun / 2];
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    Bf16Run<T>::template decode<kRun>(rows[mt][h] + (v / Dq<T>::kElems) * Dq<T>::kBytes,
                                                      v % Dq<T>::kElems, a[h], qt);
#pragma unroll
                for (int s = 0; s < kRun / 8; ++s)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        const uint32_t* r0 = a[0] + 4 * s;
                        const uint32_t* r8 = a[1] + 4 * s;
                        mma_bf16(acc[mt][nt], r0[0], r8[0], r0[1], r8[1], b[nt][s].x, b[nt][s].y);
                        mma_bf16(acc[mt][nt], r0[2], r8[2], r0[3], r8[3], b[nt][s].z, b[nt][s].w);
                    }
            }
        }
        __syncthreads();  // every warp is done with the slot before a later issue() refills it
    }
    cp_async_wait<0>();

    // acc[mt][nt][j]: weight row g + 8 (j / 2) of tile mt, grouped row nt * 8 + 2c + j % 2 of the tile.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = nt * 8 + 2 * c + j % 2;
            if (r >= tile.rows) continue;
            const int64_t grow = tile.row0 + r;
            if constexpr (GATE_UP) {
                const int64_t f = n0 + warp * 16 + g + 8 * (j / 2);
                if (f >= p.N) continue;
                const float wgt = p.weights[p.pair_of_row[grow]];
                static_cast<bf16*>(p.out)[grow * p.ldo + f] =
                    __float2bfloat16_rn(swiglu_value(acc[0][nt][j], acc[1][nt][j], p.clamp) * wgt);
            } else {
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const int64_t d = n0 + mt * kHalfRows + warp * 16 + g + 8 * (j / 2);
                    if (d < p.N) static_cast<float*>(p.out)[grow * p.ldo + d] = acc[mt][nt][j];
                }
            }
        }
}

template <GgmlType T, int NT, bool GATE_UP>
void launch_moe_blocks(const MoeBlocksParams& p, dim3 grid, const QuantTables& t, cudaStream_t s) {
    constexpr auto k = moe_blocks_kernel<T, NT, GATE_UP>;
    constexpr size_t smem = MoeBlocksStage<T>::kSmem;
    static const bool attr = [] {
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        return true;
    }();
    (void)attr;
    gemv::prefer_shared<k>();
    launch_pdl(k, grid, kThreads, smem, s, p, t);
    CUDA_CHECK_LAUNCH();
}

template <int NT>
void launch_both(CudaBackend& b, GgmlType tg, GgmlType td, const MoeBlocksParams& gu, dim3 grid_gu,
                 const MoeBlocksParams& dn, dim3 grid_dn) {
    dispatch_weight_type(tg, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (blocks::format<T>()) launch_moe_blocks<T, NT, true>(gu, grid_gu, b.tables(), b.stream());
    });
    dispatch_weight_type(td, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (blocks::format<T>()) launch_moe_blocks<T, NT, false>(dn, grid_dn, b.tables(), b.stream());
    });
}

// Grouped rows per tile: 8, 16 or 32 by the mean rows of an expert (pairs / E), so that a tile usually holds
// all of an expert's rows (an expert with more rows than a tile reads its weights once per tile).
int groups8_per_tile(int64_t pairs, int64_t E) {
    if (pairs <= 2 * E) return 1;
    return pairs <= 8 * E ? 2 : 4;
}

}  // namespace

bool moe_blocks_serves(const CudaBackend& b, const MoeArgs& a) {
    const int64_t D = a.gate.cols, F = a.gate.rows, pairs = a.n * a.k;
    if (b.gemm_precision() != GemmPrecision::BF16 || pairs <= 0 || pairs > kMoeBlocksMaxPairs) return false;
    if (a.gate.type != a.up.type || D % kStageK != 0 || F % kStageK != 0) return false;
    if (a.down.rows != D || a.down.cols != F) return false;
    const int64_t E = a.gate.n_experts;
    if (moe_tc_max_tiles(pairs, E, 8 * groups8_per_tile(pairs, E)) > 65535) return false;  // the grid's y
    return blocks::stage_fits(b.props(), a.gate.type, false) && blocks::stage_fits(b.props(), a.down.type, false);
}

void moe_experts_blocks(CudaBackend& b, const MoeArgs& a, const int32_t* offsets, const int32_t* x_rows,
                        const int32_t* pair_of_row, float* y) {
    DSV4_CHECK(moe_blocks_serves(b, a));
    const int64_t D = a.gate.cols, F = a.gate.rows, rows = a.n * a.k;
    const int E = (int)a.gate.n_experts;
    const int nt = groups8_per_tile(rows, E);
    const int64_t max_tiles = moe_tc_max_tiles(rows, E, 8 * nt);
    cudaStream_t st = b.stream();
    CudaBackend::Scratch s(b);
    MoeTcTile* tiles = s.get<MoeTcTile>(max_tiles);
    moe_tc_build_tiles(b, offsets, E, tiles, (int)max_tiles, 8 * nt);
    bf16* xb = s.get<bf16>(rows * D);
    bf16* hb = s.get<bf16>(rows * F);
    launch_rows_to_bf16(xb, D, a.x, D, x_rows, rows, D, st);

    MoeBlocksParams gu{tiles,  expert_stack(a.gate), expert_stack(a.up), xb, D, F, hb, F, a.weights, pair_of_row,
                       a.clamp};
    MoeBlocksParams dn{tiles, expert_stack(a.down), expert_stack(a.down), hb, F, D, y, D, nullptr, nullptr, 0.0f};
    const dim3 grid_gu(ceil_div(F, kHalfRows), (unsigned)max_tiles),
        grid_dn(ceil_div(D, kBlockRows), (unsigned)max_tiles);
    if (nt == 1)
        launch_both<1>(b, a.gate.type, a.down.type, gu, grid_gu, dn, grid_dn);
    else if (nt == 2)
        launch_both<2>(b, a.gate.type, a.down.type, gu, grid_gu, dn, grid_dn);
    else
        launch_both<4>(b, a.gate.type, a.down.type, gu, grid_gu, dn, grid_dn);
}

}  // namespace dsv4::cuda
