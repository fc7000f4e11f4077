// CPU matmul and embedding lookup on block-format weights: each weight row is dequantized once (exactly, into
// a per-thread f32 buffer) and dotted with every activation row, so the weight is read once per call and the
// result is the exact f32 product of the dequantized weight.
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "format/quant.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_dot.h"

namespace dsv4 {

void CpuBackend::embed(float* out, const Weight& w, const int32_t* ids, int64_t n) {
    pool_.parallel_for(n, 4, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            DSV4_CHECK(ids[i] >= 0 && ids[i] < w.rows);
            dequantize_row(w.type, w.data + (size_t)ids[i] * w.row_bytes, out + i * w.cols, w.cols);
        }
    });
}

void CpuBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) {
    if (n == 0 || w.rows == 0) return;
    const int64_t K = w.cols;
    // Rows of W per task: enough work per task to amortize scheduling, small enough to balance.
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n));
    pool_.parallel_for(w.rows, grain, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> row;
        if ((int64_t)row.size() < K) row.resize(K);
        // Process activation rows in tiles so each tile stays in cache while we sweep weight rows.
        constexpr int64_t kTileRows = 64;
        for (int64_t m = b; m < e; ++m) {
            const float* wr;
            if (w.type == GgmlType::F32) {
                wr = reinterpret_cast<const float*>(w.data + (size_t)m * w.row_bytes);
            } else {
                dequantize_row(w.type, w.data + (size_t)m * w.row_bytes, row.data(), K);
                wr = row.data();
            }
            for (int64_t i0 = 0; i0 < n; i0 += kTileRows) {
                const int64_t i1 = std::min(n, i0 + kTileRows);
                for (int64_t i = i0; i < i1; ++i) y[i * y_stride + m] = dot_f32(x + i * x_stride, wr, K);
            }
        }
    });
}

}  // namespace dsv4
