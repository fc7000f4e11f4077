// CUDA KV compressor: each token's projections go into the partial-block state; when a block of `ratio`
// tokens completes, an entry is pooled with a per-channel softmax over the block's slots (with overlap, the
// previous block's first channel half joins the current block's second half).
//
// Two paths give the same bits. A short call (decode) runs the token loop serially, one thread per channel:
// every step touches only the columns of its own channel c (c and d + c), so no thread waits for another.
// A long call (prefill) has only d threads' worth of that loop, so it pools every completed entry at once
// instead (a thread per entry and channel, reading each slot from the inputs or from the state as it was at
// the start of the call), then a second kernel writes the state the token loop would have left. Tokens of
// different sequences (per-token states) each take the serial path's one step, a block row per token.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

// Calls of fewer tokens take the serial path: for decode and verify steps (1..8 tokens) its n steps per thread
// are few and it is one launch, where the parallel path always pays two. Each step of the serial loop is a
// chain of dependent global accesses on only d / 128 blocks (~1.3 us a token: a 32-token chunk's call took
// 50.5 us on an H100, the loop 7 ms at n = 4096, d = 512), while the parallel path's two launches of at least
// d / 128 blocks each take a few microseconds whatever n is; 16 lies between, not a measured crossover.
constexpr int64_t kParallelMinTokens = 16;

// One pooled entry of channel c: the max score over the slots, then exp(score - max) and the weighted
// values summed in slot order. Slots: with overlap, [0, r) is the previous block read at column c and
// [r, 2r) the current block at column d + c; without, [0, r) is the current block at column c. Both paths
// call this with their own slot reader (score(s, col), value(s, col)), so their entries match bit for bit.
template <class Slots>
__device__ __forceinline__ float pool_entry(const Slots& slots, int r, int d, int c, bool overlap) {
    const int n_slots = overlap ? 2 * r : r;
    float m = -INFINITY;
    for (int s = 0; s < n_slots; ++s) {
        const int64_t col = (overlap && s >= r) ? d + c : c;
        m = fmaxf(m, slots.score(s, col));
    }
    float sum = 0, acc = 0;
    for (int s = 0; s < n_slots; ++s) {
        const int64_t col = (overlap && s >= r) ? d + c : c;
        const float w = expf(slots.score(s, col) - m);
        sum += w;
        acc = __fadd_rn(acc, __fmul_rn(w, slots.value(s, col)));
    }
    return acc / sum;
}

// The serial path's slots: the state rows themselves (slot s = row s).
struct StateSlots {
    const float* kv;
    const float* sc;
    int64_t width;
    __device__ float score(int s, int64_t col) const { return sc[s * width + col]; }
    __device__ float value(int s, int64_t col) const { return kv[s * width + col]; }
};

// The serial token loop of channel c over n tokens from pos0 (inputs kv / score, rows of width floats) on one
// state, entries to out in completion order. With `zero_if_none`, a call that completes no entry writes zeros
// to out's first row (the per-token form's rule).
__device__ __forceinline__ void compress_tokens(const CompressorArgs& a, int c, const float* kv, const float* score,
                                                float* state_kv, float* state_sc, float* out, int64_t n,
                                                int64_t pos0, bool zero_if_none) {
    const int r = a.ratio, d = a.d;
    const int coff = a.overlap ? 2 : 1;
    const int64_t width = (int64_t)coff * d;
    const int off = a.overlap ? r : 0;
    const StateSlots slots{state_kv, state_sc, width};
    int64_t n_new = 0;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t p = pos0 + j;
        const int slot = off + (int)(p % r);
        const float* ape = a.ape + (p % r) * width;
        for (int h = 0; h < coff; ++h) {
            const int64_t col = (int64_t)h * d + c;
            state_kv[slot * width + col] = kv[j * width + col];
            state_sc[slot * width + col] = score[j * width + col] + ape[col];
        }
        if ((p + 1) % r != 0) continue;
        out[n_new * d + c] = pool_entry(slots, r, d, c, a.overlap);
        ++n_new;
        if (a.overlap) {
            // The current block becomes the previous one (this thread's columns only).
            for (int s = 0; s < r; ++s)
                for (int h = 0; h < coff; ++h) {
                    const int64_t col = (int64_t)h * d + c;
                    state_kv[s * width + col] = state_kv[(s + r) * width + col];
                    state_sc[s * width + col] = state_sc[(s + r) * width + col];
                }
        }
    }
    if (zero_if_none && n_new == 0) out[c] = 0.0f;
}

// Block (channel group x, token y of the per-token form; y = 0 otherwise).
__global__ void compressor_kernel(CompressorArgs a) {
    pdl_begin();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= a.d) return;
    if (!a.state_kv_rows) {
        compress_tokens(a, c, a.kv, a.score, a.state_kv, a.state_sc, a.out_entries, a.n, a.pos[0], false);
        return;
    }
    const int64_t j = blockIdx.y, width = (int64_t)(a.overlap ? 2 : 1) * a.d;
    compress_tokens(a, c, a.kv + j * width, a.score + j * width, a.state_kv_rows[j], a.state_sc_rows[j],
                    a.out_entries + j * a.d, 1, a.pos[j], true);
}

// The parallel path's slots of one completing block: slot s holds token base + s (base = the block's first
// token, or the previous block's with overlap). A token of this call comes from the inputs (score plus ape,
// the same single add the serial path stores); an earlier one from the state at the start of the call,
// where the tokens of pos0's block sit in rows off + k and, with overlap, those of the block before in rows k
// (k = the token's slot in its block). Only the first completing block, pos0's, reaches back that far.
struct CallSlots {
    const float *in_kv, *in_sc, *ape, *state_kv, *state_sc;
    int64_t width, pos0, base, cur;  // cur: the first token of pos0's block
    int r, off;
    // Where token base + s's element of column col lies. Its slot in its block, p % r, is taken from s: block
    // 0's previous slots stand for negative tokens (rows [0, r) then hold the state's initial values).
    __device__ const float* at(int s, int64_t col, const float* in, const float* state) const {
        const int64_t p = base + s;
        if (p >= pos0) return in + (p - pos0) * width + col;
        const int k = s < r ? s : s - r;
        return state + (p >= cur ? off + k : k) * width + col;
    }
    __device__ float score(int s, int64_t col) const {
        const float x = *at(s, col, in_sc, state_sc);
        return base + s >= pos0 ? x + ape[(s < r ? s : s - r) * width + col] : x;
    }
    __device__ float value(int s, int64_t col) const { return *at(s, col, in_kv, state_kv); }
};

// A block per (completed entry, channel group), grid sized for the most entries n tokens can complete;
// blocks past this call's count exit. Block B completes when its last token B*r + r - 1 lies in
// [pos0, pos0 + n); the first that can is pos0's own block, so entry e is block pos0/r + e.
__global__ void compressor_entries_kernel(CompressorArgs a) {
    pdl_begin();
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    const int r = a.ratio, d = a.d;
    if (c >= d) return;
    const int64_t pos0 = a.pos[0];
    const int64_t first = pos0 / r, e = blockIdx.x;
    if (e >= (pos0 + a.n) / r - first) return;
    const int coff = a.overlap ? 2 : 1, off = a.overlap ? r : 0;
    const int64_t width = (int64_t)coff * d;
    const int64_t base = (first + e - (a.overlap ? 1 : 0)) * r;  // slot 0's token
    const CallSlots slots{a.kv, a.score, a.ape, a.state_kv, a.state_sc, width, pos0, base, first * r, r, off};
    a.out_entries[e * d + c] = pool_entry(slots, r, d, c, a.overlap);
}

// The state the token loop leaves, a thread per (slot s, column) (launched after the entries kernel, which
// reads the old state). Row off + s holds the latest token of slot s before pos0 + n when that token is in
// this call, else keeps its old value; that may be a completed block's token, left stale by the serial loop,
// and so it is here. With overlap, rows [0, r) are the last block completed in this call, taken from the
// inputs or, for its tokens before pos0, from the old rows r + s; without a completed block they stay. The
// same thread reads old row r + s and writes both rows, so no other thread overwrites what it reads.
__global__ void compressor_state_kernel(CompressorArgs a) {
    pdl_begin();
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int s = blockIdx.y, r = a.ratio;
    const int coff = a.overlap ? 2 : 1;
    const int64_t width = (int64_t)coff * a.d;
    if (col >= width) return;
    const int64_t pos0 = a.pos[0], end = pos0 + a.n;
    const int off = a.overlap ? r : 0;
    const float* ape = a.ape + s * width + col;
    float* cur_kv = a.state_kv + (off + s) * width + col;
    float* cur_sc = a.state_sc + (off + s) * width + col;
    if (a.overlap) {
        const int64_t last_block = end / r - 1;
        if (last_block >= pos0 / r) {
            const int64_t p = last_block * r + s;
            float kv, sc;
            if (p >= pos0) {
                kv = a.kv[(p - pos0) * width + col];
                sc = a.score[(p - pos0) * width + col] + *ape;
            } else {
                kv = *cur_kv;
                sc = *cur_sc;
            }
            a.state_kv[s * width + col] = kv;
            a.state_sc[s * width + col] = sc;
        }
    }
    int64_t p = (end - 1) / r * r + s;  // the latest token of slot s before end
    if (p >= end) p -= r;
    if (p >= pos0) {
        *cur_kv = a.kv[(p - pos0) * width + col];
        *cur_sc = a.score[(p - pos0) * width + col] + *ape;
    }
}

}  // namespace

void CudaBackend::compressor(const CompressorArgs& a) {
    if (skipped("compressor")) return;
    if (a.n <= 0 || a.d <= 0) return;
    DSV4_CHECK(a.ratio > 0);
    DSV4_CHECK_MSG(!a.state_kv_rows == !a.state_sc_rows, "compressor: per-token states need both tables");
    if (a.state_kv_rows) {  // tokens of different sequences: one serial step each
        DSV4_CHECK(a.n <= 65535);
        launch_pdl(compressor_kernel, dim3(ceil_div(a.d, 128), (unsigned)a.n), 128, 0, stream_, a);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (a.n < kParallelMinTokens) {
        launch_pdl(compressor_kernel, ceil_div(a.d, 128), 128, 0, stream_, a);
        CUDA_CHECK_LAUNCH();
        return;
    }
    // n consecutive tokens complete at most ceil(n / ratio) blocks, whatever pos0 is.
    const int64_t max_entries = (a.n + a.ratio - 1) / a.ratio;
    const int64_t width = (int64_t)(a.overlap ? 2 : 1) * a.d;
    launch_pdl(compressor_entries_kernel, dim3((unsigned)max_entries, ceil_div(a.d, 128)), 128, 0, stream_, a);
    CUDA_CHECK_LAUNCH();
    launch_pdl(compressor_state_kernel, dim3(ceil_div(width, 128), (unsigned)a.ratio), 128, 0, stream_, a);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
