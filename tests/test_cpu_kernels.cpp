// The CPU oracle's own fast paths against their plain forms: the SIMD dot product against the portable loop
// and a double-precision sum, and the block-format matmul against dequantize-then-dot in double, on odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "format/quant.h"
#include "kernels/cpu/cpu_dot.h"
#include "ops/backend.h"

using namespace dsv4;

TEST(CpuDot, SimdMatchesPortableAndDouble) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t n : {1, 7, 8, 31, 33, 83, 128, 769, 4096}) {
        std::vector<float> a(n), b(n);
        for (auto& x : a) x = nd(rng);
        for (auto& x : b) x = nd(rng);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) ref += (double)a[i] * b[i], mag += std::fabs((double)a[i] * b[i]);
        // f32 accumulation of n terms: error grows like n * eps * sum|a_i b_i| in the worst case.
        const double tol = 4.0 * n * 1.2e-7 * mag + 1e-30;
        EXPECT_NEAR(dot_f32(a.data(), b.data(), n), ref, tol) << "n=" << n;
        EXPECT_NEAR(dot_f32_portable(a.data(), b.data(), n), ref, tol) << "n=" << n;
    }
}

TEST(CpuMatmul, EveryQuantizedTypeMatchesDequantizedDouble) {
    auto be = make_cpu_backend(2);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.f, 1.f);
    const int64_t K = 512, M = 37, N = 5;  // odd row and token counts; K a multiple of every block size
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1,
                       GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                       GgmlType::MXFP4}) {
        const auto& tr = ggml_traits(t);
        const size_t rb = ggml_row_bytes(tr, K);
        std::vector<uint8_t> wbytes(rb * M);
        std::vector<float> row(K), wf(K * M), x(N * K), y(N * M, NAN);
        for (int64_t m = 0; m < M; ++m) {
            for (auto& v : row) v = nd(rng);
            quantize_row(t, row.data(), wbytes.data() + m * rb, K);
            dequantize_row(t, wbytes.data() + m * rb, wf.data() + m * K, K);
        }
        for (auto& v : x) v = nd(rng);
        Weight w;
        w.type = t;
        w.cols = K;
        w.rows = M;
        w.row_bytes = rb;
        w.data = wbytes.data();
        be->matmul(y.data(), M, x.data(), K, w, N);
        for (int64_t i = 0; i < N; ++i)
            for (int64_t m = 0; m < M; ++m) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    ref += (double)x[i * K + k] * wf[m * K + k];
                    mag += std::fabs((double)x[i * K + k] * wf[m * K + k]);
                }
                ASSERT_NEAR(y[i * M + m], ref, 4.0 * K * 1.2e-7 * mag) << tr.name << " i=" << i << " m=" << m;
            }
    }
}
