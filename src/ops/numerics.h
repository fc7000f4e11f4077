// Scalar numerics shared by every backend (host and device): the model's FP8 E4M3 / FP4 E2M1 fake
// quantizers with power-of-two block scales, sqrt-softplus routing scores, and the Sinkhorn projection of the
// hyper-connection mixes. Written once so that CPU and CUDA compute the same function.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__ __forceinline__
#else
#define DSV4_HD inline
#endif

namespace dsv4 {

constexpr float kFp8Max = 448.0f;       // E4M3 (fn) largest finite value
constexpr float kFp4Max = 6.0f;         // E2M1 largest value
constexpr float kFp8AmaxFloor = 1e-4f;  // the reference floors the block amax before taking the scale
constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126

DSV4_HD uint32_t nm_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}
DSV4_HD float nm_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

// 2^ceil(log2(v)) for v > 0, read off the exponent bits exactly as the reference does (no log2 rounding).
DSV4_HD float pow2_ceil(float v) {
    uint32_t b = nm_bits(v);
    int e = (int)((b >> 23) & 0xffu) - 127 + ((b & 0x7fffffu) != 0 ? 1 : 0);
    // e is within [-126, 128] for the floored amax values used here.
    return ldexpf(1.0f, e);
}

// Round |v| (already clamped to the format's range) to the nearest value of a float format with `mant_bits`
// mantissa bits and minimum normal exponent `emin`, ties to even. Works because the quantum is a power of two
// and the integer parity of v/quantum equals the parity of the mantissa's last bit.
DSV4_HD float round_small_float(float v, int mant_bits, int emin) {
    float a = fabsf(v);
    if (a == 0.0f) return v;
    uint32_t b = nm_bits(a);
    int e = (int)((b >> 23) & 0xffu) - 127;
    if (e < emin) e = emin;
    float q = ldexpf(1.0f, e - mant_bits);
    float r = rintf(a / q) * q;
    return v < 0 ? -r : r;
}

DSV4_HD float fp8_e4m3_round(float v) { return round_small_float(v, 3, -6); }
DSV4_HD float fp4_e2m1_round(float v) { return round_small_float(v, 1, 0); }

// The power-of-two scale of a fake-quantized block with absolute maximum amax:
// 2^ceil(log2(max(amax, floor) / fmax)).
DSV4_HD float fake_quant_scale(float amax, bool fp4) {
    const float fmax = fp4 ? kFp4Max : kFp8Max;
    amax = fmaxf(amax, fp4 ? kFp4AmaxFloor : kFp8AmaxFloor);
    return pow2_ceil(amax * (1.0f / fmax));
}
// The grid value (an E2M1 or E4M3 value) of x in a block with scale s: round(clamp(x / s)).
DSV4_HD float fake_quant_grid(float x, float s, bool fp4) {
    const float fmax = fp4 ? kFp4Max : kFp8Max;
    const float y = fminf(fmaxf(x / s, -fmax), fmax);
    return fp4 ? fp4_e2m1_round(y) : fp8_e4m3_round(y);
}
// One value of a block with scale s: round(clamp(x / s)) * s.
DSV4_HD float fake_quant_value(float x, float s, bool fp4) { return fake_quant_grid(x, s, fp4) * s; }

// The grid value of an already fake-quantized x in a block of scale s (x / s exactly, on the grid), as packed
// rows store it (ops/fp4_rows.h, ops/kv_rows.h). A NaN is x only where s is infinite (fake_quant_value's 0 * inf),
// and 0 times that scale gives it back.
DSV4_HD float packed_grid_value(float x, float s, bool fp4) { return x != x ? 0.0f : fake_quant_grid(x, s, fp4); }

// The scale of an E8M0 byte, 2^(e - 127) (255: infinity, the scale of a block holding an infinity).
DSV4_HD float e8m0_scale(uint32_t e) { return nm_from_bits(e << 23); }

// Fake-quantize one block of n values in place.
DSV4_HD void fake_quant_block(float* x, int n, bool fp4) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const float s = fake_quant_scale(amax, fp4);
    for (int i = 0; i < n; ++i) x[i] = fake_quant_value(x[i], s, fp4);
}

DSV4_HD float softplus(float x) {
    // torch default: beta 1, threshold 20 (linear above it).
    return x > 20.0f ? x : log1pf(expf(x));
}

DSV4_HD float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// The Sinkhorn projection of the hyper-connection mixes, in steps that touch one row or one column of
// comb [hc][hc] (row j = source stream, column k = destination), so a device can run the rows (or columns)
// of a step in parallel and get the serial result bit for bit. The steps: hc_comb_init per row, then
// hc_comb_col_norm per column, then (iters - 1) times hc_comb_row_norm per row and hc_comb_col_norm per column.
DSV4_HD void hc_comb_init(float* comb, const float* mixes, const float* scale, const float* base, int hc, float eps,
                          int j) {
    const float* cm = mixes + 2 * hc + j * hc;
    const float* cb = base + 2 * hc + j * hc;
    float* row = comb + j * hc;
    float m = -INFINITY;
    for (int k = 0; k < hc; ++k) {
        row[k] = cm[k] * scale[2] + cb[k];
        m = fmaxf(m, row[k]);
    }
    float s = 0.0f;
    for (int k = 0; k < hc; ++k) {
        row[k] = expf(row[k] - m);
        s += row[k];
    }
    for (int k = 0; k < hc; ++k) row[k] = row[k] / s + eps;
}
DSV4_HD void hc_comb_row_norm(float* comb, int hc, float eps, int j) {
    float* row = comb + j * hc;
    float s = 0.0f;
    for (int k = 0; k < hc; ++k) s += row[k];
    for (int k = 0; k < hc; ++k) row[k] /= (s + eps);
}
DSV4_HD void hc_comb_col_norm(float* comb, int hc, float eps, int k) {
    float s = 0.0f;
    for (int j = 0; j < hc; ++j) s += comb[j * hc + k];
    for (int j = 0; j < hc; ++j) comb[j * hc + k] /= (s + eps);
}
// pre[j] = sigmoid(mix_j * scale0 + base_j) + eps and post[j] = 2 sigmoid(mix_{hc+j} * scale1 + base_{hc+j}).
DSV4_HD void hc_pre_post(const float* mixes, const float* scale, const float* base, int hc, float eps, int j, float* pre,
                         float* post) {
    pre[j] = sigmoidf_(mixes[j] * scale[0] + base[j]) + eps;
    post[j] = 2.0f * sigmoidf_(mixes[hc + j] * scale[1] + base[hc + j]);
}

// Split the (2+hc)*hc mixes into pre [hc], post [hc] and the Sinkhorn-normalized comb [hc][hc], serially.
DSV4_HD void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc, int iters,
                               float eps, float* pre, float* post, float* comb) {
    for (int j = 0; j < hc; ++j) hc_pre_post(mixes, scale, base, hc, eps, j, pre, post);
    for (int j = 0; j < hc; ++j) hc_comb_init(comb, mixes, scale, base, hc, eps, j);
    for (int k = 0; k < hc; ++k) hc_comb_col_norm(comb, hc, eps, k);
    for (int it = 1; it < iters; ++it) {
        for (int j = 0; j < hc; ++j) hc_comb_row_norm(comb, hc, eps, j);
        for (int k = 0; k < hc; ++k) hc_comb_col_norm(comb, hc, eps, k);
    }
}

}  // namespace dsv4
