// The routed experts of a prefill chunk on tensor cores (the bf16 GEMM mode), decoding the quantized weights
// as they are loaded: two grouped GEMM kernels over every expert with kTcMinRows rows or more.
//
// Why: decoding each expert's weight into a bf16 scratch matrix for cuBLAS (the per-expert path cuda_gemm_tc.cu
// keeps for the formats these kernels do not take, and for A/B)
// writes and reads back ~4 bytes per weight value, ~26 GB per V4-Flash layer with all 256 experts active, and
// takes 7 launches per expert; the 2-bit weights themselves are ~1.7 GB. Here a block decodes the weight tile
// it needs straight into shared memory (the exact decoders of cuda_dequant.cuh, rounded to bf16) and
// multiplies it with bf16 mma.sync (f32 accumulation); one launch covers all experts.
//
//   gate/up: h [row, f] = bf16(swiglu(x . gate_f, x . up_f) * routing weight), a block per (128-row tile of
//            one expert, 64 features): 64 gate and 64 up weight rows per k-step, SwiGLU in the epilogue;
//   down:    y [row, d] = h . down_d (f32), a block per (128-row tile, 64 outputs).
// The numerics are the cuBLAS path's: bf16 activations and weights, f32 sums, the SwiGLU in f32 then rounded.
//
// Block: 8 warps as 4 x 2, each 32 rows x 32 outputs (and the matching up outputs); k-steps of 64 values.
// Shared tiles are rows of 64 bf16 (8 chunks of 16 bytes) with chunk c of row r stored at c ^ (r % 8), so the
// 8 row addresses of an ldmatrix phase, and the decode's 16-byte stores, hit distinct banks.
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"
#include "kernels/cuda/cuda_mma.cuh"
#include "kernels/cuda/cuda_moe_tc.cuh"
#include "kernels/cuda/cuda_wgmma.cuh"

namespace dsv4::cuda {

namespace {

constexpr int kBM = kMoeTcTileRows, kBN = 64, kBK = 64, kThreads = 256;
constexpr int kXBufs = 3;  // activation k-steps in flight: the one multiplied, the next, the one being copied

// A swizzled tile's rows are kRowBytes apart; chunk c (8 values, 16 bytes) of row r sits swz_chunk(r, c) bytes
// into its row. Rows 8 apart share the pattern, and swz_chunk(r, c0 + c) = swz_chunk(r, c0) ^ 16 c when c0 is a
// multiple of a power of two above c: the kernel keeps one offset per thread and XORs the step's chunk in.
constexpr uint32_t kRowBytes = kBK * 2;
__device__ __forceinline__ uint32_t swz_chunk(int r, int c) {
    return 16 * (c ^ (r & 7));
}

// Values of a weight row staged per pipeline stage: whole blocks of every block format (32 or 256 values).
constexpr int kStageK = 256;

template <GgmlType T, bool GATE_UP>
struct MoeTcLayout {
    using D = Dq<T>;
    static constexpr int kWRows = GATE_UP ? 2 * kBN : kBN;  // weight rows a block decodes per k-step
    // Values of one weight row a thread decodes per k-step (32 for gate/up, 16 for down).
    static constexpr int kRun = kWRows * kBK / kThreads;
    static constexpr int kStageBytes = kStageK / D::kElems * D::kBytes;
    // 16-byte words of one row's raw stage: the data, the partial word before it, and a spare word.
    static constexpr int kSlotWords = (kStageBytes + 15) / 16 + 1;
    static constexpr size_t kRawBytes = (size_t)2 * kWRows * kSlotWords * 16;  // two stages of raw rows
    static constexpr size_t kXBytes = (size_t)kXBufs * kBM * kBK * 2;
    static constexpr size_t kWBytes = (size_t)2 * kWRows * kBK * 2;          // two decoded k-steps
    static constexpr size_t kShiftBytes = (size_t)2 * kWRows * sizeof(int);  // each row's offset in its slot
    // The tiles start 1024-byte aligned (the wgmma descriptors' swizzle); the dynamic window need not be.
    static constexpr size_t kSmem = 1024 + kXBytes + kWBytes + kRawBytes + kShiftBytes;
};

// Outputs col and col + 1 (the second only when < N) of grouped row grow, from their sums v (and, for gate/up,
// the matching up sums u): gate/up writes h = bf16(swiglu(v, u) * wgt), down writes y = v.
template <bool GATE_UP>
__device__ __forceinline__ void store_output_pair(void* out, int64_t ldo, int64_t grow, int64_t col, int64_t N, float wgt,
                                                  float clamp, float v0, float v1, float u0, float u1) {
    if constexpr (GATE_UP) {
        __nv_bfloat16* o = static_cast<__nv_bfloat16*>(out) + grow * ldo + col;
        o[0] = __float2bfloat16_rn(swiglu_value(v0, u0, clamp) * wgt);
        if (col + 1 < N) o[1] = __float2bfloat16_rn(swiglu_value(v1, u1, clamp) * wgt);
    } else {
        float* o = static_cast<float*>(out) + grow * ldo + col;
        o[0] = v0;
        if (col + 1 < N) o[1] = v1;
    }
}

// Block (blockIdx.x: 64 outputs, blockIdx.y: tile). The output slices of one tile are consecutive blocks, so
// they run together and read the tile's activation rows from L2: with the tile as x, each slice came a whole
// grid row later and the 64 (gate/up: 32) re-reads of every activation row went to DRAM (Nsight Compute on
// V4-Flash shapes: ~7.5 GB of DRAM traffic per launch beside 0.7-1.1 GB of weights, an L2 hit rate of 21%). GATE_UP: w0 = gate, w1 = up (N = F outputs, K = D), out h
// (bf16, ldo); otherwise w0 = down (N = D, K = F), out y (f32, ldo). x: bf16 rows (ldx >= K, zero past K).
//
// Pipeline, per k-step ks after one barrier: copy (cp.async) the activations of step ks + 2 and, at a stage's
// first step, the raw bytes of the next stage (256 values of each weight row, whole blocks); decode step
// ks + 1's slice of its raw stage into a bf16 tile (Bf16Run, the exact decoders rounded to bf16); multiply
// step ks's tiles. The decode (integer work) and the multiply (tensor cores) of different steps interleave
// within each warp, and the HBM and L2 latencies hide behind both.
template <GgmlType T, bool GATE_UP>
__global__ void __launch_bounds__(kThreads, 2)
    moe_tc_kernel(const MoeTcTile* tiles, const __nv_bfloat16* x, int64_t ldx, ExpertStack w0, ExpertStack w1,
                  int64_t K, int64_t N, void* out, int64_t ldo, const float* weights, const int32_t* pair_of_row,
                  float clamp, QuantTables tb) {
    using L = MoeTcLayout<T, GATE_UP>;
    using D = Dq<T>;
    constexpr int kWRows = L::kWRows, kSlotWords = L::kSlotWords, kRun = L::kRun;
    constexpr int kSubs = kStageK / kBK;  // k-steps per stage
    extern __shared__ uint4 smem_words[];
    const uint32_t smem0 = (uint32_t)__cvta_generic_to_shared(smem_words);
    char* const base = reinterpret_cast<char*>(smem_words) + ((1024 - (smem0 & 1023)) & 1023);
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(base);  // [3][kBM][kBK]
    __nv_bfloat16* ws = xs + kXBufs * kBM * kBK;                 // [2][kWRows][kBK]
    uint4* raw = reinterpret_cast<uint4*>(ws + 2 * kWRows * kBK);  // [2][kWRows][kSlotWords]
    int* shifts = reinterpret_cast<int*>(raw + 2 * kWRows * kSlotWords);  // [2][kWRows]: a row's stage offset in its slot
    const MoeTcTile tile = tiles[blockIdx.y];
    if (tile.rows <= 0) return;  // past the tiles the grouping needed (the grid is sized for the most)
    const int64_t n0 = (int64_t)blockIdx.x * kBN;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

    // Raw staging: thread t copies words [kRawWords p, kRawWords p + kRawWords) of weight row j = t / kRawThreads
    // (p = t % kRawThreads); its row pointer is null past N. Row j < kBN: gate or down row n0 + j; j >= kBN: up
    // row n0 + j - kBN.
    static_assert(kThreads % kWRows == 0);
    constexpr int kRawThreads = kThreads / kWRows, kRawWords = (kSlotWords + kRawThreads - 1) / kRawThreads;
    const int raw_j = threadIdx.x / kRawThreads, raw_w0 = kRawWords * (threadIdx.x % kRawThreads);
    const uint8_t* raw_row = nullptr;
    {
        const bool up = GATE_UP && raw_j >= kBN;
        const int64_t r = n0 + (up ? raw_j - kBN : raw_j);
        const ExpertStack& st = up ? w1 : w0;
        if (r < N) raw_row = st.data + (size_t)tile.expert * st.expert_bytes + (size_t)r * st.row_bytes;
    }
    // Stage kb (values [kStageK kb, ...)) of every weight row into raw buffer kb & 1: the 16-byte words that
    // cover its bytes (a word holding any byte of the row lies in the weight's allocation).
    auto stage_raw = [&](int kb) {
        const int64_t k0 = (int64_t)kb * kStageK;
        const int bytes = (int)((K - k0 < kStageK ? K - k0 : kStageK) / D::kElems) * D::kBytes;
        const uint8_t* start = raw_row ? raw_row + (size_t)kb * L::kStageBytes : nullptr;
        const int shift = (int)(reinterpret_cast<uintptr_t>(start) & 15);
        if (raw_w0 == 0) shifts[(kb & 1) * kWRows + raw_j] = raw_row ? shift : -1;  // -1: a row past N (zeros)
        if (!raw_row) return;
        uint4* dst = raw + ((kb & 1) * kWRows + raw_j) * kSlotWords;
        const int words = (shift + bytes + 15) / 16;
#pragma unroll
        for (int i = 0; i < kRawWords; ++i) {
            const int w = raw_w0 + i;
            if (w < words) cp_async16(dst + w, start - shift + 16 * w);
        }
    };
    // Activations: thread t copies chunk q = t % 8 of rows t / 8 + 32 i of each k-step (i < 4), from x_src
    // onwards; rows past the tile and chunks past ldx are zeros.
    constexpr int kXRowsPerPass = kThreads / (kBK / 8);
    const int x_q = threadIdx.x % (kBK / 8), x_r = threadIdx.x / (kBK / 8);
    const __nv_bfloat16* x_src = x + (tile.row0 + x_r) * ldx + 8 * x_q;
    auto stage_x = [&](int ks, int buf) {
        char* dst = reinterpret_cast<char*>(xs + buf * kBM * kBK);
        const bool k_ok = (int64_t)ks * kBK + 8 * x_q < ldx;
#pragma unroll
        for (int i = 0; i < kBM / kXRowsPerPass; ++i) {
            const int r = x_r + kXRowsPerPass * i;
            const bool ok = k_ok && r < tile.rows;
            cp_async16_zfill(dst + r * kRowBytes + swz_chunk(r, x_q),
                             ok ? x_src + (int64_t)kXRowsPerPass * i * ldx + ks * kBK : x, ok);
        }
    };
    // Decode k-step ks of every weight row from its raw stage into ws buffer ks & 1: thread t takes values
    // [kRun p, kRun p + kRun) of the step in row t / kParts (p = t % kParts).
    constexpr int kParts = kBK / kRun;
    const int dec_j = threadIdx.x / kParts, dec_part = threadIdx.x % kParts;
    const uint32_t dec_dst = (uint32_t)__cvta_generic_to_shared(ws) + dec_j * kRowBytes;
    const uint32_t dec_chunk = swz_chunk(dec_j, kRun / 8 * dec_part);
    auto decode_step = [&](int ks) {
        const int kb = ks / kSubs;
        const int shift = shifts[(kb & 1) * kWRows + dec_j];
        const int v = (ks % kSubs) * kBK + kRun * dec_part;  // first value within the stage
        uint32_t o[kRun / 2];
        if (shift >= 0 && (int64_t)ks * kBK + kRun * dec_part < K) {
            const uint8_t* blk = reinterpret_cast<const uint8_t*>(raw + ((kb & 1) * kWRows + dec_j) * kSlotWords) +
                                 shift + (v / D::kElems) * D::kBytes;
            Bf16Run<T>::template decode<kRun>(blk, v % D::kElems, o, tb);
        } else {
#pragma unroll
            for (int i = 0; i < kRun / 2; ++i) o[i] = 0;
        }
        // Chunk kRun / 8 p + c of row j.
        const uint32_t dst = dec_dst + (ks & 1) * (kWRows * kRowBytes);
#pragma unroll
        for (int c = 0; c < kRun / 8; ++c)
            st_shared_v4(dst + (dec_chunk ^ (16 * c)), o[4 * c], o[4 * c + 1], o[4 * c + 2], o[4 * c + 3]);
    };

#if defined(DSV4_HAVE_WGMMA)
    // Hopper: each warpgroup (4 warps) multiplies 64 of the tile's rows by all kWRows decoded weight rows with
    // wgmma, both operands straight from the swizzled shared tiles (no ldmatrix through registers, which held
    // the mma.sync form at the shared-memory pipe's limit). Every warpgroup multiplies, also one whose rows are
    // all past the tile (zeros; only its stores are skipped): under a condition ptxas serializes the wgmmas.
    constexpr int kAcc = kWRows / 2;  // m64 x kWRows f32 over 128 threads
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    const int wg = warp / 4;
    const bool wg_active = 64 * wg < tile.rows;
    const uint32_t xs_base = (uint32_t)__cvta_generic_to_shared(xs), ws_base = (uint32_t)__cvta_generic_to_shared(ws);
#else
    constexpr int kSets = GATE_UP ? 2 : 1;
    float acc[kSets][2][4][4];
#pragma unroll
    for (int s = 0; s < kSets; ++s)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[s][mi][ni][e] = 0.0f;

    // The multiply's per-lane fragment addresses: A (activations) rows 32 wm + 16 mi + lane % 16, chunk
    // 2 kk + lane / 16; B (weights) rows s kBN + 32 wn + 16 p + lane % 8 + 8 (lane / 16), chunk 2 kk + (lane / 8) % 2.
    const uint32_t xs_base = (uint32_t)__cvta_generic_to_shared(xs), ws_base = (uint32_t)__cvta_generic_to_shared(ws);
    const int wm = warp / 2, wn = warp % 2;
    const int a_r = 32 * wm + lane % 16, b_r = 32 * wn + lane % 8 + 8 * (lane / 16);
    const uint32_t a_row = a_r * kRowBytes, a_chunk = swz_chunk(a_r, lane / 16);
    const uint32_t b_row = b_r * kRowBytes, b_chunk = swz_chunk(b_r, (lane / 8) % 2);
#endif

    const int steps = (int)((K + kBK - 1) / kBK);
    stage_raw(0);
    stage_x(0, 0);
    cp_async_commit();
    if (steps > 1) stage_x(1, 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    decode_step(0);
    for (int ks = 0, xbuf = 0; ks < steps; ++ks, xbuf = xbuf + 1 == kXBufs ? 0 : xbuf + 1) {
        // Groups committed so far: (stage 0, x 0), (x 1), then one per step: step i's holds x i + 2 (and a raw
        // stage). Waiting for all but the newest lands x ks and every raw stage issued up to step ks - 2.
        cp_async_wait<1>();
#if defined(DSV4_HAVE_WGMMA)
        fence_proxy_async_shared();  // this thread's decoded tile and landed copies, for wgmma's reads
#endif
        __syncthreads();  // ws ks & 1 is decoded; ws (ks + 1) & 1, x (ks + 2) % 3 and the raw buffer of the
                          // previous stage were last read before this barrier
        if (ks + 2 < steps) stage_x(ks + 2, xbuf == 0 ? 2 : xbuf - 1);
        // Stage kb + 1 is first decoded at step 4 kb + 3 (kSubs = 4), after the barrier of step 4 kb + 3.
        if (ks % kSubs == 0 && (int64_t)(ks / kSubs + 1) * kStageK < K) stage_raw(ks / kSubs + 1);
        cp_async_commit();
#if defined(DSV4_HAVE_WGMMA)
        // Issue step ks's multiply, decode step ks + 1 while it runs, then wait for it (the next barrier
        // hands its tiles to the copies).
        {
            const uint64_t da = wgmma_desc_sw128(xs_base + xbuf * (kBM * kRowBytes) + 64 * wg * kRowBytes);
            const uint64_t db = wgmma_desc_sw128(ws_base + (ks & 1) * (kWRows * kRowBytes));
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) {
                if constexpr (GATE_UP)
                    wgmma_m64n128k16(acc, da + 2 * kk, db + 2 * kk);
                else
                    wgmma_m64n64k16(acc, da + 2 * kk, db + 2 * kk);
            }
            wgmma_commit();
        }
        if (ks + 1 < steps) decode_step(ks + 1);
        wgmma_wait<0>();
#else
        if (ks + 1 < steps) decode_step(ks + 1);

        // Fragment addresses (bytes in the shared window): a lane's row offset, plus its chunk's offset for step
        // kk (a_chunk ^ 32 kk), plus the fragment's row offset in multiples of 16 rows.
        const uint32_t xt = xs_base + xbuf * (kBM * kRowBytes) + a_row;
        const uint32_t wt = ws_base + (ks & 1) * (kWRows * kRowBytes) + b_row;
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            const uint32_t ao = xt + (a_chunk ^ (32 * kk)), bo = wt + (b_chunk ^ (32 * kk));
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(a[mi], ao + 16 * mi * kRowBytes);
#pragma unroll
            for (int s = 0; s < kSets; ++s)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    // Two n-tiles: matrices (rows +0, k +0), (+0, +8), (+8, +0), (+8, +8) -> b0, b1 of each.
                    uint32_t b[4];
                    ldmatrix_x4(b, bo + (s * kBN + 16 * p) * kRowBytes);
#pragma unroll
                    for (int mi = 0; mi < 2; ++mi) {
                        mma_bf16(acc[s][mi][2 * p], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[0], b[1]);
                        mma_bf16(acc[s][mi][2 * p + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[2], b[3]);
                    }
                }
        }
#endif
    }
    cp_async_wait<0>();

#if defined(DSV4_HAVE_WGMMA)
    // Epilogue: acc[4 j + 2 h + e] is row 64 wg + 16 (warp % 4) + lane / 4 + 8 h, weight row 8 j + 2 (lane % 4) + e
    // of the decoded tile (gate/up: j < 8 gate outputs, j + 8 the matching up outputs).
    if (!wg_active) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = 64 * wg + 16 * (warp % 4) + lane / 4 + 8 * h;
        if (r >= tile.rows) continue;
        const int64_t grow = tile.row0 + r;
        const float wgt = GATE_UP ? weights[pair_of_row[grow]] : 1.0f;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
            const int64_t col = n0 + 8 * j + 2 * (lane % 4);
            if (col >= N) continue;
            const int u = GATE_UP ? 4 * (j + kBN / 8) + 2 * h : 0;  // the matching up sums (gate/up)
            store_output_pair<GATE_UP>(out, ldo, grow, col, N, wgt, clamp, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1],
                                       acc[u], acc[u + 1]);
        }
    }
#else
    // Epilogue: acc[.][mi][ni][e] is row 32 wm + 16 mi + lane / 4 + 8 (e / 2), output 32 wn + 8 ni + 2 (lane % 4)
    // + e % 2.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 32 * wm + 16 * mi + lane / 4 + 8 * h;
            if (r >= tile.rows) continue;
            const int64_t grow = tile.row0 + r;
            const float wgt = GATE_UP ? weights[pair_of_row[grow]] : 1.0f;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int64_t col = n0 + 32 * wn + 8 * ni + 2 * (lane % 4);
                if (col >= N) continue;
                store_output_pair<GATE_UP>(out, ldo, grow, col, N, wgt, clamp, acc[0][mi][ni][2 * h],
                                           acc[0][mi][ni][2 * h + 1], acc[kSets - 1][mi][ni][2 * h],
                                           acc[kSets - 1][mi][ni][2 * h + 1]);
            }
        }
#endif
}

template <GgmlType T, bool GATE_UP>
void launch_moe_tc(CudaBackend& b, dim3 grid, const MoeTcTile* tiles, const __nv_bfloat16* x, int64_t ldx,
                   ExpertStack w0, ExpertStack w1, int64_t K, int64_t N, void* out, int64_t ldo, const float* weights,
                   const int32_t* pair_of_row, float clamp) {
    constexpr size_t smem = MoeTcLayout<T, GATE_UP>::kSmem;
    CUDA_CHECK(cudaFuncSetAttribute(moe_tc_kernel<T, GATE_UP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    moe_tc_kernel<T, GATE_UP><<<grid, kThreads, smem, b.stream()>>>(tiles, x, ldx, w0, w1, K, N, out, ldo, weights,
                                                                    pair_of_row, clamp, b.tables());
    CUDA_CHECK_LAUNCH();
}

// One block: thread e counts expert e's tiles (and e + blockDim.x ...), thread 0 takes the exclusive prefix
// sum in shared memory, then each thread writes its experts' tiles and the last ones blank the rest.
__global__ void moe_tc_tiles_kernel(const int32_t* offsets, int E, MoeTcTile* tiles, int max_tiles, int tile_rows) {
    extern __shared__ int first[];  // [E + 1]: each expert's first tile
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        first[e + 1] = (offsets[e + 1] - offsets[e] + tile_rows - 1) / tile_rows;
    __syncthreads();
    if (threadIdx.x == 0) {
        first[0] = 0;
        for (int e = 0; e < E; ++e) first[e + 1] += first[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int32_t r1 = offsets[e + 1];
        int t = first[e];
        for (int32_t r = offsets[e]; r < r1; r += tile_rows, ++t) tiles[t] = {e, r, min(tile_rows, r1 - r)};
    }
    for (int t = first[E] + threadIdx.x; t < max_tiles; t += blockDim.x) tiles[t] = {0, 0, 0};
}

// Block formats whose blocks tile a stage (32 or 256 values; plain types are not what expert stacks use, and
// a stage of them would be 256 values of 2-4 bytes per row), within the device's shared memory per block.
template <bool GATE_UP>
bool stageable(const CudaBackend& b, GgmlType t) {
    bool ok = false;
    dispatch_weight_type(t, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            ok = MoeTcLayout<T, GATE_UP>::kSmem <= (size_t)b.props().sharedMemPerBlockOptin;
    });
    return ok;
}

}  // namespace

void moe_tc_build_tiles(CudaBackend& b, const int32_t* offsets, int E, MoeTcTile* tiles, int max_tiles, int tile_rows) {
    moe_tc_tiles_kernel<<<1, 256, (size_t)(E + 1) * sizeof(int), b.stream()>>>(offsets, E, tiles, max_tiles, tile_rows);
    CUDA_CHECK_LAUNCH();
}

bool moe_tc_kernels_fit(const CudaBackend& b, const MoeArgs& a) {
    return a.gate.type == a.up.type && a.down.cols == a.gate.rows && a.down.rows == a.gate.cols &&
           stageable<true>(b, a.gate.type) && stageable<false>(b, a.down.type);
}

void moe_tc_gate_up(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* xb,
                    int64_t ldx, __nv_bfloat16* h, int64_t ldh, const int32_t* pair_of_row) {
    const int64_t D = a.gate.cols, F = a.gate.rows;
    DSV4_CHECK_MSG(n_tiles <= 65535, "moe_experts: %d expert tiles exceed the grid's y limit", n_tiles);
    const dim3 grid(ceil_div(F, kBN), (unsigned)n_tiles);
    dispatch_weight_type(a.gate.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            launch_moe_tc<T, true>(b, grid, tiles, xb, ldx, expert_stack(a.gate), expert_stack(a.up), D, F, h, ldh,
                                   a.weights, pair_of_row, a.clamp);
    });
}

void moe_tc_down(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* hb,
                 int64_t ldh, float* y) {
    const int64_t D = a.down.rows, F = a.down.cols;
    DSV4_CHECK_MSG(n_tiles <= 65535, "moe_experts: %d expert tiles exceed the grid's y limit", n_tiles);
    const dim3 grid(ceil_div(D, kBN), (unsigned)n_tiles);
    dispatch_weight_type(a.down.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        if constexpr (Dq<T>::kElems >= 32 && kStageK % Dq<T>::kElems == 0)
            launch_moe_tc<T, false>(b, grid, tiles, hb, ldh, expert_stack(a.down), expert_stack(a.down), F, D, y, D,
                                    nullptr, nullptr, 0.0f);
    });
}

}  // namespace dsv4::cuda
