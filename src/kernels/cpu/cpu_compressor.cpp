// CPU KV compressor: stores each token's projections in the partial-block state and, when a block of
// `ratio` tokens completes, pools an entry with a per-channel softmax over the block's slots (with overlap,
// the previous block's first channel half joins the current block's second half).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace dsv4 {

void CpuBackend::compressor(const CompressorArgs& a) {
    const int r = a.ratio, d = a.d;
    const int coff = a.overlap ? 2 : 1;
    const int64_t width = (int64_t)coff * d;
    const int off = a.overlap ? r : 0;
    int64_t n_new = 0;
    const int64_t pos0 = a.n > 0 ? a.pos[0] : 0;
    for (int64_t j = 0; j < a.n; ++j) {
        const int64_t p = pos0 + j;
        const int slot = off + (int)(p % r);
        const float* ape = a.ape + (p % r) * width;
        float* skv = a.state_kv + slot * width;
        float* ssc = a.state_sc + slot * width;
        for (int64_t c = 0; c < width; ++c) {
            skv[c] = a.kv[j * width + c];
            ssc[c] = a.score[j * width + c] + ape[c];
        }
        if ((p + 1) % r != 0) continue;
        float* out = a.out_entries + n_new * d;
        for (int c = 0; c < d; ++c) {
            // slots: overlap -> previous block rows [0, r) channel c, current rows [r, 2r) channel d + c
            float m = -INFINITY;
            const int n_slots = a.overlap ? 2 * r : r;
            for (int s = 0; s < n_slots; ++s) {
                const int64_t col = (a.overlap && s >= r) ? d + c : c;
                m = std::fmax(m, a.state_sc[s * width + col]);
            }
            float sum = 0, acc = 0;
            for (int s = 0; s < n_slots; ++s) {
                const int64_t col = (a.overlap && s >= r) ? d + c : c;
                const float w = std::exp(a.state_sc[s * width + col] - m);
                sum += w;
                acc += w * a.state_kv[s * width + col];
            }
            out[c] = acc / sum;
        }
        ++n_new;
        if (a.overlap) {
            std::memcpy(a.state_kv, a.state_kv + (int64_t)r * width, sizeof(float) * r * width);
            std::memcpy(a.state_sc, a.state_sc + (int64_t)r * width, sizeof(float) * r * width);
        }
    }
}

}  // namespace dsv4
