// CPU KV compressor: stores each token's projections in the partial-block state and, when a block of
// `ratio` tokens completes, pools an entry with a per-channel softmax over the block's slots (with overlap,
// the previous block's first channel half joins the current block's second half).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_backend.h"

namespace dsv4 {

void CpuBackend::compressor(const CompressorArgs& a) {
    if (a.state_kv_rows || a.state_sc_rows) {
        // Tokens of different sequences: each is a one-token call on its own state, its entry (or zeros) in
        // its own row of out_entries.
        DSV4_CHECK_MSG(a.state_kv_rows && a.state_sc_rows, "compressor: per-token states need both tables");
        for (int64_t j = 0; j < a.n; ++j) {
            CompressorArgs one = a;
            one.state_kv_rows = one.state_sc_rows = nullptr;
            one.state_kv = a.state_kv_rows[j];
            one.state_sc = a.state_sc_rows[j];
            one.kv = a.kv + j * (a.overlap ? 2 : 1) * a.d;
            one.score = a.score + j * (a.overlap ? 2 : 1) * a.d;
            one.out_entries = a.out_entries + j * a.d;
            one.pos = a.pos + j;
            one.n = 1;
            if ((a.pos[j] + 1) % a.ratio != 0) std::fill(one.out_entries, one.out_entries + a.d, 0.0f);
            compressor(one);
        }
        return;
    }
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
