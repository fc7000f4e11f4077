// K-quant decoders (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K): 256-value super-blocks whose sub-block scales
// are themselves quantized against one f16 super-scale. Arithmetic order follows ggml, so results are
// bit-identical to its dequantize_row_* (and to the numpy reference).
#include "core/fp16.h"
#include "format/quant_codecs.h"
#include "format/quant_k_scales.h"

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {

void dequant_q2_k(const BlockQ2K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        // Each 32-byte chunk of qs holds 128 values: 2-bit field `shift` of byte l is value l of the
        // shift/2-th group of 32 (16 + 16 with separate scales).
        for (int n = 0; n < kQKK; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (float)(sc & 0x0F);
                    const float ml = dmin * (float)(sc >> 4);
                    const uint8_t* qq = q + 16 * half;
                    for (int l = 0; l < 16; ++l) *y++ = dl * (float)((qq[l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequant_q3_k(const BlockQ3K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d_all = f16_to_f32(x[i].d);
        int8_t scales[16];
        unpack_q3_k_scales(x[i].scales, scales);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < kQKK; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; ++half) {
                    const float dl = d_all * (float)(scales[is++] - 32);
                    const int o = 16 * half;
                    for (int l = 0; l < 16; ++l) {
                        // A clear high bit means the stored 2-bit value is offset by -4.
                        const int v = ((q[o + l] >> shift) & 3) - ((hm[o + l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

void dequant_q4_k(const BlockQ4K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            k4_scale_min(is, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (float)(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void dequant_q5_k(const BlockQ5K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32) {
            uint8_t sc, m;
            k4_scale_min(is, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            k4_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (float)((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

void dequant_q6_k(const BlockQ6K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        // Each 128-value half: ql bytes 0..63 give the low nibbles, qh bytes 0..31 the 2-bit tops of four
        // 32-value groups; scale index = 16-value sub-block.
        for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void dequant_q8_k(const BlockQ8K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQKK) {
        const float d = x[i].d;
        for (int j = 0; j < kQKK; ++j) y[j] = d * (float)x[i].qs[j];
    }
}

}  // namespace dsv4::quant
