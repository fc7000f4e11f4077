// CUDA KV compressor: each token's projections go into the partial-block state; when a block of `ratio`
// tokens completes, an entry is pooled with a per-channel softmax over the block's slots (with overlap, the
// previous block's first channel half joins the current block's second half). Tokens are sequential, but
// every step touches only the columns of its own channel c (c and d + c), so one thread per channel runs
// the whole token loop without synchronizing with any other.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

__global__ void compressor_kernel(CompressorArgs a) {
    pdl_begin();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = a.ratio, d = a.d;
    if (c >= d) return;
    const int coff = a.overlap ? 2 : 1;
    const int64_t width = (int64_t)coff * d;
    const int off = a.overlap ? r : 0;
    const int n_slots = a.overlap ? 2 * r : r;
    int64_t n_new = 0;
    const int64_t pos0 = a.pos[0];
    for (int64_t j = 0; j < a.n; ++j) {
        const int64_t p = pos0 + j;
        const int slot = off + (int)(p % r);
        const float* ape = a.ape + (p % r) * width;
        for (int h = 0; h < coff; ++h) {
            const int64_t col = (int64_t)h * d + c;
            a.state_kv[slot * width + col] = a.kv[j * width + col];
            a.state_sc[slot * width + col] = a.score[j * width + col] + ape[col];
        }
        if ((p + 1) % r != 0) continue;
        // slots: overlap -> previous block rows [0, r) channel c, current rows [r, 2r) channel d + c
        float m = -INFINITY;
        for (int s = 0; s < n_slots; ++s) {
            const int64_t col = (a.overlap && s >= r) ? d + c : c;
            m = fmaxf(m, a.state_sc[s * width + col]);
        }
        float sum = 0, acc = 0;
        for (int s = 0; s < n_slots; ++s) {
            const int64_t col = (a.overlap && s >= r) ? d + c : c;
            const float w = expf(a.state_sc[s * width + col] - m);
            sum += w;
            acc = __fadd_rn(acc, __fmul_rn(w, a.state_kv[s * width + col]));
        }
        a.out_entries[n_new * d + c] = acc / sum;
        ++n_new;
        if (a.overlap) {
            // The current block becomes the previous one (this thread's columns only).
            for (int s = 0; s < r; ++s)
                for (int h = 0; h < coff; ++h) {
                    const int64_t col = (int64_t)h * d + c;
                    a.state_kv[s * width + col] = a.state_kv[(s + r) * width + col];
                    a.state_sc[s * width + col] = a.state_sc[(s + r) * width + col];
                }
        }
    }
}

}  // namespace

void CudaBackend::compressor(const CompressorArgs& a) {
    if (a.n <= 0 || a.d <= 0) return;
    DSV4_CHECK(a.ratio > 0);
    launch_pdl(compressor_kernel, ceil_div(a.d, 128), 128, 0, stream_, a);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
