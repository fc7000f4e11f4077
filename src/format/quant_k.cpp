// K-quant decoders (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K): 256-value super-blocks whose sub-block scales
// are themselves quantized against one f16 super-scale. Arithmetic order follows ggml, so results are
// bit-identical to its dequantize_row_* (and to the numpy reference).
#include "core/fp16.h"
#include "format/quant_codecs.h"
#include "format/quant_k_scales.h"

DSV4_QUANT_NO_FP_CONTRACT

namespace dsv4::quant {

void dequant_q2_k(const BlockQ2K* __restrict x, float* __restrict y, int64_t nb) {
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
                    DSV4_QUANT_VECTOR_LOOP
                    for (int l = 0; l < 16; ++l) *y++ = dl * (float)((qq[l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequant_q3_k(const BlockQ3K* __restrict x, float* __restrict y, int64_t nb) {
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
                    DSV4_QUANT_VECTOR_LOOP
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

void dequant_q4_k(const BlockQ4K* __restrict x, float* __restrict y, int64_t nb) {
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

void dequant_q5_k(const BlockQ5K* __restrict x, float* __restrict y, int64_t nb) {
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

void dequant_q6_k(const BlockQ6K* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        // Each 128-value half holds four 32-value groups g: the low nibble of ql[l + 32*(g&1)] (low half
        // of the byte for g < 2, high half otherwise) and bits 2g..2g+1 of qh[l]; one scale per 16 values.
        for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int g = 0; g < 4; ++g) {
                const uint8_t* lo = ql + 32 * (g & 1);
                const int lo_shift = 4 * (g >> 1);
                for (int h = 0; h < 2; ++h) {
                    const float dl = d * (float)sc[2 * g + h];
                    DSV4_QUANT_VECTOR_LOOP
                    for (int l = 16 * h; l < 16 * h + 16; ++l) {
                        const int q = (((lo[l] >> lo_shift) & 0x0F) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
                        y[32 * g + l] = dl * (float)q;
                    }
                }
            }
        }
    }
}

void dequant_q8_k(const BlockQ8K* __restrict x, float* __restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQKK) {
        const float d = x[i].d;
        for (int j = 0; j < kQKK; ++j) y[j] = d * (float)x[i].qs[j];
    }
}

}  // namespace dsv4::quant
