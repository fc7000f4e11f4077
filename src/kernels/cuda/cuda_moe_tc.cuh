// Grouped expert GEMMs that decode the quantized weights on load (the bf16 GEMM mode's prefill MoE). See
// cuda_moe_tc.cu; cuda_gemm_tc.cu's moe_experts_tc drives them.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Up to a tile's rows (kMoeTcTileRows here, 8..32 in cuda_moe_blocks.cu) consecutive grouped rows
// [row0, row0 + rows) of one expert; rows = 0: no tile (the kernels' blocks for it return at once).
struct MoeTcTile {
    int32_t expert, row0, rows;
};
// Rows of a tile.
constexpr int kMoeTcTileRows = 128;

// An expert stack as the grouped expert kernels read it: expert e's row r starts at data + e * expert_bytes +
// r * row_bytes.
struct ExpertStack {
    const uint8_t* data;  // expert 0's first row
    size_t row_bytes;
    size_t expert_bytes;  // rows per expert * row_bytes
};
inline ExpertStack expert_stack(const Weight& w) {
    return {w.data, w.row_bytes, (size_t)w.rows * w.row_bytes};
}

// Tiles of tile_rows that `pairs` grouped rows over E experts can need at most: sum_e ceil(rows_e / tile_rows).
inline int64_t moe_tc_max_tiles(int64_t pairs, int64_t E, int tile_rows = kMoeTcTileRows) {
    return pairs / tile_rows + E;
}
// tiles [max_tiles] = every expert's rows (offsets [E+1] on the device) cut into tiles of up to tile_rows, in
// ascending expert id, then empty tiles: built on the device, so the host never waits for the grouping.
void moe_tc_build_tiles(CudaBackend& b, const int32_t* offsets, int E, MoeTcTile* tiles, int max_tiles,
                        int tile_rows = kMoeTcTileRows);

// True when a's stacks suit the kernels: gate and up of one block format (and down of one) whose blocks tile
// 256 values, down [D, F], and their shared memory fits b's device.
bool moe_tc_kernels_fit(const CudaBackend& b, const MoeArgs& a);
// h [row, 0:F] (bf16, ldh) = bf16(swiglu(x_row . gate, x_row . up) * weights[pair_of_row[row]]) for the rows
// of the n_tiles tiles (device array); xb: the grouped rows' activations as bf16 (ldx >= D, zeros past D).
void moe_tc_gate_up(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* xb,
                    int64_t ldx, __nv_bfloat16* h, int64_t ldh, const int32_t* pair_of_row);
// y [row, 0:D] (f32, rows D apart) = h_row . down for the same tiles.
void moe_tc_down(CudaBackend& b, const MoeArgs& a, const MoeTcTile* tiles, int n_tiles, const __nv_bfloat16* hb,
                 int64_t ldh, float* y);

}  // namespace dsv4::cuda
