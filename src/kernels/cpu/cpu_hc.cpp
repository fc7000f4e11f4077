// CPU hyper-connection ops (mHC): hc_pre (RMS-scaled mix projection, Sinkhorn split, stream collapse),
// hc_post (expand the sublayer output back into the streams) and hc_head (final collapse).
#include <cmath>
#include <vector>

#include "core/check.h"
#include "format/quant.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_dot.h"
#include "ops/numerics.h"

namespace dsv4 {

namespace {

// The projection weight as f32 rows (a view when already f32, else dequantized once per call).
const float* fn_rows(const Weight& fn, std::vector<float>& storage) {
    if (fn.type == GgmlType::F32) return reinterpret_cast<const float*>(fn.data);
    storage.resize((size_t)fn.rows * fn.cols);
    for (int64_t m = 0; m < fn.rows; ++m)
        dequantize_row(fn.type, fn.data + (size_t)m * fn.row_bytes, storage.data() + m * fn.cols, fn.cols);
    return storage.data();
}

// mixes[m] = (H_flat . fn_m) * rsqrt(mean(H_flat^2) + eps)
void hc_mixes(float* mixes, const float* Hi, const float* fnw, int64_t n_mix, int64_t flat, float eps) {
    double ss = 0;
    for (int64_t j = 0; j < flat; ++j) ss += (double)Hi[j] * Hi[j];
    const float r = 1.0f / std::sqrt((float)(ss / (double)flat) + eps);
    for (int64_t m = 0; m < n_mix; ++m) mixes[m] = dot_f32(Hi, fnw + m * flat, flat) * r;
}

}  // namespace

void CpuBackend::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                        const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) {
    if (first) {  // the oracle of the fused form: the two ops one after the other
        DSV4_CHECK(first->H_out == H);
        hc_post(*first, n, p);
    }
    const int hc = p.hc;
    const int64_t D = p.dim, flat = hc * D;
    const int n_mix = (2 + hc) * hc;
    DSV4_CHECK(fn.rows == n_mix && fn.cols == flat);
    std::vector<float> storage;
    const float* fnw = fn_rows(fn, storage);
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        std::vector<float> mixes(n_mix), pre(hc);
        for (int64_t i = b; i < e; ++i) {
            const float* Hi = H + i * flat;
            hc_mixes(mixes.data(), Hi, fnw, n_mix, flat, p.norm_eps);
            hc_split_sinkhorn(mixes.data(), scale, base, hc, p.sinkhorn_iters, p.hc_eps, pre.data(), post + i * hc,
                              comb + i * hc * hc);
            float* xi = x + i * D;
            for (int64_t d = 0; d < D; ++d) {
                float s = 0;
                for (int j = 0; j < hc; ++j) s += pre[j] * Hi[j * D + d];
                xi[d] = s;
            }
        }
    });
}

void CpuBackend::hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) {
    const int hc = p.hc;
    const int64_t D = p.dim;
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const float* R = a.H_res + i * hc * D;
            const float* c = a.comb + i * hc * hc;
            const float* x = a.x + i * D;
            const float* x2 = a.x2 ? a.x2 + i * D : nullptr;
            for (int k = 0; k < hc; ++k) {
                float* out = a.H_out + (i * hc + k) * D;
                const float pk = a.post[i * hc + k];
                for (int64_t d = 0; d < D; ++d) {
                    float s = 0;  // the j-sum first, then the post term (reference order)
                    for (int j = 0; j < hc; ++j) s += c[j * hc + k] * R[j * D + d];
                    const float xd = x2 ? x[d] + x2[d] : x[d];  // the f32 sum `add` would have stored
                    out[d] = pk * xd + s;
                }
            }
        }
    });
}

void CpuBackend::hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base,
                         int64_t n, const HcParams& p) {
    const int hc = p.hc;
    const int64_t D = p.dim, flat = hc * D;
    DSV4_CHECK(fn.rows == hc && fn.cols == flat);
    std::vector<float> storage;
    const float* fnw = fn_rows(fn, storage);
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        std::vector<float> mixes(hc), pre(hc);
        for (int64_t i = b; i < e; ++i) {
            const float* Hi = H + i * flat;
            hc_mixes(mixes.data(), Hi, fnw, hc, flat, p.norm_eps);
            for (int j = 0; j < hc; ++j) pre[j] = sigmoidf_(mixes[j] * scale[0] + base[j]) + p.hc_eps;
            for (int64_t d = 0; d < D; ++d) {
                float s = 0;
                for (int j = 0; j < hc; ++j) s += pre[j] * Hi[j * D + d];
                y[i * D + d] = s;
            }
        }
    });
}

}  // namespace dsv4
