// The op interface's default implementations that are more than a line: a fused op spelled as the ops it fuses,
// which is what a backend without a fused kernel runs (and what a fused kernel is checked against).
#include "ops/backend.h"

#include "core/check.h"

namespace dsv4 {

void norm_rope_check(int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos, const RopeParams& r,
                     int fp8_block) {
    DSV4_CHECK_MSG(n >= 0 && n_heads > 0 && head_dim > 0, "norm_rope: %lld rows of %d heads of %d dims", (long long)n,
                   n_heads, head_dim);
    DSV4_CHECK_MSG(stride >= (int64_t)n_heads * head_dim, "norm_rope: row stride %lld is shorter than %d heads of %d",
                   (long long)stride, n_heads, head_dim);
    DSV4_CHECK_MSG(r.rope_dim >= 0 && r.rope_dim <= head_dim && r.rope_dim % 2 == 0,
                   "norm_rope: rope_dim %d is not an even count of at most head_dim %d", r.rope_dim, head_dim);
    DSV4_CHECK_MSG(r.rope_dim == 0 || (r.freqs && pos), "norm_rope: RoPE on %d dims without frequencies or positions",
                   r.rope_dim);
    DSV4_CHECK_MSG(fp8_block >= 0 && (fp8_block == 0 || (head_dim - r.rope_dim) % fp8_block == 0),
                   "norm_rope: the %d non-RoPE dims are not whole FP8 blocks of %d", head_dim - r.rope_dim, fp8_block);
}

void Backend::matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm, float eps,
                          const Weight& w, int64_t n) {
    const int64_t K = w.cols;
    float* t = static_cast<float*>(alloc((size_t)(n * K) * sizeof(float)));
    norm_rows(t, x, x_stride, norm, n, K, eps);
    matmul(y, y_stride, t, K, w, n);
    synchronize();
    free(t);
}

void Backend::matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
    for (const MatmulJob& j : jobs) matmul(j.y, j.y_stride, j.x, j.x_stride, *j.w, n);
}

void Backend::hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                          const float* base, int64_t n, const HcParams& p, const HcPostArgs* first, const float* norm,
                          float eps) {
    hc_pre(x, post, comb, H, fn, scale, base, n, p, first);
    rms_norm(x, x, norm, n, p.dim, p.dim, eps);
}

void Backend::norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight, float eps,
                        const int32_t* pos, const RopeParams& r, int fp8_block) {
    norm_rope_check(n, n_heads, head_dim, stride, pos, r, fp8_block);
    if (n == 0) return;
    // Heads that tile their rows are rows of their own: one call over n * n_heads rows (as the model issued its
    // per-head norms before this op); heads of strided rows: one call per head.
    const bool packed = n_heads == 1 || stride == (int64_t)n_heads * head_dim;
    const int64_t rows = packed ? n * n_heads : n, row_stride = packed && n_heads > 1 ? head_dim : stride;
    const int calls = packed ? 1 : n_heads;
    for (int h = 0; h < calls; ++h) {
        float* xh = x + (int64_t)h * head_dim;
        rms_norm(xh, xh, weight, rows, head_dim, row_stride, eps);
    }
    if (r.rope_dim > 0) rope(x, n, n_heads, head_dim, stride, pos, r, false);
    const int64_t nope = head_dim - r.rope_dim;
    if (fp8_block > 0 && nope > 0)
        for (int h = 0; h < calls; ++h) fp8_sim(x + (int64_t)h * head_dim, rows, nope, row_stride, fp8_block);
}

}  // namespace dsv4
