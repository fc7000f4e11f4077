// Kernel selection of the CUDA backend (cuda_select.cuh): per op, the order in which kernels are preferred and
// the thresholds that order rests on. Host code only.
#include "kernels/cuda/cuda_attention_rows.cuh"
#include "kernels/cuda/cuda_attention_tc.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_gemv.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"
#include "kernels/cuda/cuda_select.cuh"

namespace dsv4::cuda {

namespace {

// Grouped rows in all up to which the warp GEMV beats the tiles for grouped (expert) products, whose rows per
// expert are few and known only on the device (plain products: up to the GEMVs' kGemvMaxRows).
constexpr int64_t kGroupedGemvRows = 64;

// tc_blocks is chosen over decode-then-cuBLAS (tc_bf16) for all its rows (16..kTcBlocksMaxRows) in the formats
// whose bf16 decode is cheap (tc_blocks_faster): where it was measured faster (bench_gemv --bf16 on an H100,
// V4-Flash shapes, µs per call, since the 64-row blocks, the activation loads a step ahead and the wave-aware split
// count of d98b952): q_b (Q8_0 32768 x 1024) 32.5 / 36.6 / 45.8 / 47.2 at 16 / 32 / 48 / 64 rows against tc_bf16's
// 68 / 69 (earlier runs) / 70.5 / 71.6; wo_b (4096 x 8192) at 48 / 64 rows: Q8_0 50.3 / 52.7 against 72.5 / 74.6,
// Q2_K 43.3 / 44.8 against 65.8 / 67.9, Q4_K 52.6 / 54.9 against 72.9 / 75.0 (at 16 rows, before d98b952: MXFP4 47
// / 69, Q6_K 60 / 74, IQ2_XXS 43 / 66). Q3_K's per-value decoder is 2x slower at any count (157 against 75). A
// batch of products (matmul_batch's jobs, which tc_bf16 runs one by one, each with its own decode launch) gains
// most: wo_a (8 x Q8_0 1024 x 4096) 75.5 / 79.4 against 145.0 / 146.6 at 48 / 64 rows.
// F16 and BF16 (read as they are, 2 bytes a value; 2026-12-06, H100, at 16 / 32 / 64 rows): the compressors'
// kv + gate (2 x F16 1024 x 4096) 22.3 / 25.1 / 32.6 against 41.6 / 43.4 / 44.3, the indexer's (2 x 256 x 4096)
// 15.5 / 16.3 / 23.2 against 29.5 / 29.2 / 29.1, wo_b 4096 x 8192 F16 51.7 / 58.1 / 83.5 against 84.6 / 84.8 /
// 87.9 (BF16 the same within 3%); but a lone 256 x 4096 F16 router 12.2 / 12.7 / 19.3 against 15.6 / 15.2 /
// 15.0: past kTcBlocksSmallRows a plain type's 128-row blocks hold an SM's shared memory alone, and a launch
// of under kTcBlocksPlainMinBytes leaves most SMs without a block, so those stay on tc_bf16.
constexpr double kTcBlocksPlainMinBytes = 4e6;

// (token, slot) pairs from which the bf16 mode's experts take tc_blocks over the register kernels (which do the
// whole one-token decode per pair). bench_gemv --bf16 on an H100, V4-Flash's experts (IQ2_XXS gate/up, Q2_K
// down, 256 experts, 6 used), µs per call at 16 / 32 / 64 / 128 tokens: tc_blocks 625 / 1004 / 1446 / 2128,
// decode_xreg 459 / 932 / 1853 / 2130; bench --batch 16 / 32 / 64 streams: 500 / 695 / 982 tokens/s against
// 595 / 734 / 801. Between 192 pairs (32 tokens, 8% slower) and 384 (64 tokens, 22% faster). Up to 8192 pairs
// (kMoeBlocksChosenPairs): past 512 pairs the register kernels do not serve and the wgmma kernels (tc_bf16) decode
// every expert whole, ~5.1-5.4 ms at any size; tc_blocks against tc_bf16 (same run, H100) at 256 / 512 / 1024 /
// 2048 tokens: 2258 / 2854 / 3291 / 6203 µs against 5077 / 5146 / 5216 / 5358. They cross near 1700 tokens
// (~10,000 pairs); 8192 pairs (1365 tokens) keeps a margin.
constexpr int64_t kMoeBlocksMinPairs = 256;

// The least weight bytes of a launch the register GEMV takes. Smaller launches stay on the pipelined GEMV:
// its many small blocks leave room for the kernels of the step's other branch, where the register GEMV's one
// wave fills every SM (measured on the H200: 4 MB loses and 16 MB keeps the shared expert's down projection
// on the slower path).
constexpr double kXregMinBytes = 8e6;

double weight_bytes(const MatmulCall& c) {
    double bytes = 0;
    for (int j = 0; j < c.count; ++j) bytes += (double)c.ps[j].M * (double)c.ps[j].row_bytes;
    return bytes;
}

// Whether tc_blocks was measured faster than tc_bf16 for this call (the measurements above).
bool tc_blocks_faster(const MatmulCall& c) {
    const MatmulParams& p = c.ps[0];
    switch (p.type) {
        case GgmlType::Q8_0:
        case GgmlType::MXFP4:
        case GgmlType::Q2_K:
        case GgmlType::Q4_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS:
            return true;
        case GgmlType::F16:
        case GgmlType::BF16:
            return p.n <= kTcBlocksSmallRows || weight_bytes(c) >= kTcBlocksPlainMinBytes;
        default:
            return false;
    }
}

}  // namespace

bool matmul_kernel_serves(const CudaBackend& b, MatmulKernel k, const MatmulCall& c) {
    const MatmulParams& p = c.ps[0];
    const bool single = c.count == 1 && !c.with_norm;
    switch (k) {
        case MatmulKernel::tc_blocks:
            return !c.with_norm && c.allow_tc && matmul_tc_blocks_serves(b, c.ps, c.count);
        case MatmulKernel::tc_bf16:
            return single && c.allow_tc && !p.offsets && b.gemm_precision() == GemmPrecision::BF16;
        case MatmulKernel::q8_xreg:
            return c.digits && gemv_q8_xreg_serves(c.ps, c.count, c.with_norm, c.norm);
        case MatmulKernel::lane_xreg:
            return c.digits && !c.with_norm && gemv_lane_xreg_serves(c.ps, c.count);
        case MatmulKernel::gemv_digits:
            return !c.with_norm && c.digits && gemv::has_digit_codec(p.type) && gemv_pipelined_serves(c.ps, c.count);
        case MatmulKernel::gemv_f32:
            return !c.with_norm && gemv_pipelined_serves(c.ps, c.count);
        case MatmulKernel::gemv_warp:
        case MatmulKernel::tiled:
            return single;
    }
    return false;
}

std::optional<MatmulKernel> select_matmul(const CudaBackend& b, const MatmulCall& c) {
    if (auto f = b.force().matmul; f && matmul_kernel_serves(b, *f, c)) return f;
    if (b.force().matmul && (c.count > 1 || c.with_norm)) return std::nullopt;  // forced: one by one / unfused
    const MatmulParams& p = c.ps[0];
    auto serves = [&](MatmulKernel k) { return matmul_kernel_serves(b, k, c); };
    if (p.n <= kTcBlocksMaxRows && tc_blocks_faster(c) && serves(MatmulKernel::tc_blocks))
        return MatmulKernel::tc_blocks;
    if (p.n >= kTcMinRows && serves(MatmulKernel::tc_bf16)) return MatmulKernel::tc_bf16;
    if (weight_bytes(c) >= kXregMinBytes && serves(MatmulKernel::q8_xreg)) return MatmulKernel::q8_xreg;
    // lane_xreg (the lane-codec formats' register GEMV) is not chosen yet: compiled but not yet run on a GPU, it
    // serves `--kernel matmul=lane_xreg` and the conformance test's forced reruns until a GPU run has checked it
    // and measured it against the pipelined GEMV (bench_gemv --every-type --n 1 with and without --force).
    if (serves(MatmulKernel::gemv_digits)) return MatmulKernel::gemv_digits;
    if (serves(MatmulKernel::gemv_f32)) return MatmulKernel::gemv_f32;
    if (c.count > 1 || c.with_norm) return std::nullopt;
    return p.n <= (p.offsets ? kGroupedGemvRows : kGemvMaxRows) ? MatmulKernel::gemv_warp : MatmulKernel::tiled;
}

bool moe_kernel_serves(const CudaBackend& b, MoeKernel k, const MoeArgs& a) {
    switch (k) {
        case MoeKernel::tc_blocks:
            return moe_blocks_serves(b, a);
        case MoeKernel::tc_bf16:
            return b.gemm_precision() == GemmPrecision::BF16;
        case MoeKernel::decode_xreg:
            return moe_decode_serves(a) && (moe_gate_up_xreg_serves(a) || moe_down_xreg_serves(a));
        case MoeKernel::decode_pipelined:
            return moe_decode_serves(a);
        case MoeKernel::grouped:
            return true;
    }
    return false;
}

MoeKernel select_moe(const CudaBackend& b, const MoeArgs& a) {
    const auto& f = b.force().moe;
    if (f && moe_kernel_serves(b, *f, a)) return *f;
    auto serves = [&](MoeKernel k) { return moe_kernel_serves(b, k, a); };
    // The bf16 mode from kMoeBlocksMinPairs pairs (and kTcMinRows tokens, the dense matmuls' threshold, so a
    // speculative verify step keeps the exact kernels of a decode step): the tensor cores, each touched expert
    // read once per tile.
    const int64_t pairs = a.n * a.k;
    if (a.n >= kTcMinRows && pairs >= kMoeBlocksMinPairs && pairs <= kMoeBlocksChosenPairs &&
        serves(MoeKernel::tc_blocks))
        return MoeKernel::tc_blocks;
    // Few (token, slot) pairs: no grouping pass, the register kernels where they serve.
    if (serves(MoeKernel::decode_xreg)) return MoeKernel::decode_xreg;
    if (serves(MoeKernel::decode_pipelined)) return MoeKernel::decode_pipelined;
    if (moe_tc_wanted(b, a) && serves(MoeKernel::tc_bf16)) return MoeKernel::tc_bf16;
    return MoeKernel::grouped;
}

bool attention_kernel_serves(const CudaBackend& b, AttentionKernel k, const AttentionArgs& a) {
    return k == AttentionKernel::f32 || attention_tc_serves(b, a);
}

AttentionKernel select_attention(const CudaBackend& b, const AttentionArgs& a) {
    const auto& f = b.force().attention;
    if (f && attention_kernel_serves(b, *f, a)) return *f;
    // The bf16 mode's calls of every size on the tensor cores (the few queries of decode and short chunks with
    // their entries split over blocks), but decode-shaped calls over the window alone: there the split kernel's
    // fixed cost (staging the heads' query, merging its splits) is most of the call (H100, 64 heads of 512 over
    // 128 window rows: 20.3 us against the f32 kernels' 14.7; with compressed entries the tensor cores win from
    // ~500 of them, 1,024: 25.8 against 37.7). The f32 mode on the f32 kernels.
    if (a.n <= kAttentionDecodeQueries && a.kv_comp == nullptr) return AttentionKernel::f32;
    return attention_tc_serves(b, a) ? AttentionKernel::tc_bf16 : AttentionKernel::f32;
}

HcPreNormKernel select_hc_pre_norm(const CudaBackend& b, int64_t dim, const float* x, const float* H,
                                   const float* norm) {
    const bool fused = hc_pre_norm_fused_serves(dim, x, H, norm);
    const auto& f = b.force().hc_pre_norm;
    if (f && (*f == HcPreNormKernel::split || fused)) return *f;
    return fused ? HcPreNormKernel::fused : HcPreNormKernel::split;
}

SampleKernel select_sample(const CudaBackend& b, int64_t n_vocab) {
    auto fits = [&](SampleKernel k) { return sample_max_clusters(k, n_vocab) > 0; };
    const auto& f = b.force().sample;
    if (f && fits(*f)) return *f;
    // 8 blocks per row wherever 8 slices hold the vocabulary: faster than 16 at every row count measured (H200,
    // V = 129,280: one row 15-88 us against 19-94, 8 rows 113 against 229), the exchanges being over half the
    // ranks; 16 for vocabularies past 8 slices.
    return fits(SampleKernel::cluster8) || !fits(SampleKernel::cluster16) ? SampleKernel::cluster8
                                                                          : SampleKernel::cluster16;
}

}  // namespace dsv4::cuda
