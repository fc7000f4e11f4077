// Tensor-core matmuls of the bf16 GEMM mode (GemmPrecision::BF16 in cuda_backend.h): matmul and the expert
// pass of moe_experts when they have many rows. See cuda_gemm_tc.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_matmul.cuh"
#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Rows from which a matmul (and an expert's share of a MoE call) goes to the tensor cores in the bf16 mode.
// The tensor path first decodes the whole weight to bf16: about 4 extra bytes of HBM traffic per weight
// value (write 2, read 2 back), ~0.8 ps per value at the H200's 4.8 TB/s. The f32 tile kernel instead spends
// 2 flops per weight value per row on CUDA cores (67 TFLOP/s peak, about half reached): ~0.06 ps per value
// per row, so the two cost the same near 13 rows, and from 16 rows on the tensor cores (~800 TFLOP/s) win.
// Decode batches of fewer than 16 rows also keep the exact f32 numerics and the decode GEMVs.
constexpr int64_t kTcMinRows = 16;
// y[i, 0:M] = x[i, 0:K] . W^T for n rows (strided x and y) with bf16 inputs and f32 accumulation and output.
void matmul_tc(CudaBackend& b, float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w,
               int64_t n);

// True when moe_experts should run its expert pass through moe_experts_tc: the bf16 mode and at least
// kTcMinRows (token, expert) pairs. The tiles are cut on the device, so few rows per expert cost no host
// synchronization, and each expert's weights are still decoded once per tile: far less than the grouped
// warp GEMV, which reads an expert's weights once per row group, pays at any pair count past the decode
// kernels' and moe_experts_blocks' (they are chosen first, up to their own limits).
bool moe_tc_wanted(const CudaBackend& b, const MoeArgs& a);
// The expert pass of moe_experts from the device grouping it built (offsets [E+1]; per grouped row its
// token x_rows and its (token, slot) pair pair_of_row): y [n*k, D] = each grouped row's expert output,
// already times its routing weight, for moe_experts' ordered per-token sum. Block formats run every expert
// through the grouped tensor-core kernels of cuda_moe_tc.cu without the host waiting; other formats read the
// E+1 offsets on the host (one synchronization per call), run experts with kTcMinRows rows or more as bf16
// GEMMs and the others through the f32 grouped kernels.
void moe_experts_tc(CudaBackend& b, const MoeArgs& a, const int32_t* offsets, const int32_t* x_rows,
                    const int32_t* pair_of_row, float* y);

// The expert pass for a batch of decoding streams or a short prompt's chunk (cuda_moe_blocks.cu): every touched
// expert's weights read once per tile of 8-32 of its grouped rows and multiplied on the tensor cores with the
// weight as the mma's A operand, from the same device grouping as moe_experts_tc (y likewise). serves: the bf16
// mode, up to kMoeBlocksMaxPairs pairs, gate and up of one block format and down of one whose blocks tile 256
// values, D and F multiples of 256, stages that fit the device's shared memory. (Where it is chosen: select_moe.)
// (It serves up to 16384 pairs so that it can be timed against tc_bf16 at prefill sizes; select_moe chooses it
// up to kMoeBlocksChosenPairs, where it was measured faster.)
constexpr int64_t kMoeBlocksMaxPairs = 16384;
constexpr int64_t kMoeBlocksChosenPairs = 8192;
bool moe_blocks_serves(const CudaBackend& b, const MoeArgs& a);
void moe_experts_blocks(CudaBackend& b, const MoeArgs& a, const int32_t* offsets, const int32_t* x_rows,
                        const int32_t* pair_of_row, float* y);

// out[i, 0:ld] = bf16(x row rows[i] (i when rows is null)) for i < n, zeros in [K, ld).
void launch_rows_to_bf16(__nv_bfloat16* out, int64_t ld, const float* x, int64_t x_stride, const int32_t* rows,
                         int64_t n, int64_t K, cudaStream_t s);

// The same products for kTcMinRows .. kTcBlocksMaxRows rows without the bf16 copy of the weight
// (cuda_gemm_blocks.cu): the tensor cores multiply weight blocks decoded in shared memory, 1..16 plain products
// of one format, K and n (matmul_batch's jobs) in one launch. serves: the bf16 mode, a block format or F16 /
// BF16 with whole 256-value stages (K % 256 == 0) whose stages fit the device's shared memory. (Where it is
// chosen over matmul_tc: cuda_select.cu.) Up to kTcBlocksSmallRows rows it runs 64-row blocks, past it 128-row
// blocks.
constexpr int64_t kTcBlocksMaxRows = 64;
constexpr int64_t kTcBlocksSmallRows = 32;
bool matmul_tc_blocks_serves(const CudaBackend& b, const MatmulParams* ps, int count);
void matmul_tc_blocks(CudaBackend& b, const MatmulParams* ps, int count);

}  // namespace dsv4::cuda
