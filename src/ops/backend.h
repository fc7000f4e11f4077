// The op interface the model calls: about twenty coarse ops, implemented once per backend (kernels/cpu,
// kernels/cuda). All activations are contiguous f32 in the backend's memory; integer side inputs (token
// ids, positions, index lists) are int32 in the backend's memory too. Weights stay in their GGUF block
// format. Host code decides only sizes and positions; it never reads activations in the middle of a step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "format/ggml_type.h"

namespace dsv4 {

class GraphSupport;  // ops/step_graphs.h

// A weight matrix (or a view of some of its rows) in its block format, resident in backend memory.
// Logical shape [rows, cols] with cols = ne[0] contiguous; a 3-D expert stack is viewed per expert.
struct Weight {
    GgmlType type = GgmlType::F32;
    int64_t cols = 0;        // ne[0]: input features (K)
    int64_t rows = 0;        // output features (M) of this view
    int64_t n_experts = 1;   // ne[2] for expert stacks
    size_t row_bytes = 0;    // bytes per row
    const uint8_t* data = nullptr;  // backend memory
    const char* name = "";

    bool valid() const { return data != nullptr; }
    // Rows [first, first+count) of this view.
    Weight row_range(int64_t first, int64_t count) const {
        Weight w = *this;
        w.data = data + (size_t)first * row_bytes;
        w.rows = count;
        return w;
    }
    // Expert e of a 3-D stack: a [rows, cols] matrix.
    Weight expert(int64_t e) const {
        Weight w = *this;
        w.data = data + (size_t)e * (size_t)rows * row_bytes;
        w.n_experts = 1;
        return w;
    }
};

// Parameters of the hyper-connection ops (mHC).
struct HcParams {
    int hc = 4;              // number of residual streams
    int64_t dim = 0;         // model dimension D
    int sinkhorn_iters = 20;
    float hc_eps = 1e-6f;    // added after sigmoid/softmax and in the Sinkhorn normalizations
    float norm_eps = 1e-6f;  // RMS epsilon of the flattened streams
};

// The arguments of one hc_post (Backend::hc_post; hc_pre can run one first, fused). All backend memory.
struct HcPostArgs {
    float* H_out = nullptr;        // [n, hc, D]; aliases none of the inputs
    const float* x = nullptr;      // [n, D] the sublayer's output
    const float* x2 = nullptr;     // [n, D] a second part of it, added to x first (x + x2 in f32), or null
    const float* H_res = nullptr;  // [n, hc, D] the streams the sublayer started from
    const float* post = nullptr;   // [n, hc]
    const float* comb = nullptr;   // [n, hc, hc]
};

// RoPE on the last rope_dim dims of each head, as interleaved pairs, angle = pos * freq[i] in f32.
struct RopeParams {
    const float* freqs = nullptr;  // backend memory, rope_dim/2 values
    int rope_dim = 0;
};

// One attention call: per query, the KV rows it attends to come from a window source (indices into
// kv_win, -1 = none) and a compressed source (either an index list into kv_comp, -1 = none, or when
// comp_idx is null, the first comp_count[q] rows of kv_comp). Optionally the output then gets the inverse
// RoPE: exactly rope(out, n, n_heads, head_dim, n_heads * head_dim, pos, out_rope, true).
struct AttentionArgs {
    float* out = nullptr;        // [n, n_heads, head_dim]
    const float* q = nullptr;    // [n, n_heads, head_dim]
    int64_t n = 0;
    int n_heads = 0;
    int head_dim = 0;
    float scale = 1.0f;
    const float* sinks = nullptr;   // [n_heads] logits added to the denominator only
    const float* kv_win = nullptr;  // [*, head_dim]
    const int32_t* win_idx = nullptr;  // [n, n_win]
    int n_win = 0;
    const float* kv_comp = nullptr;    // [*, head_dim]
    const int32_t* comp_idx = nullptr;  // [n, n_comp] or null
    int n_comp = 0;
    const int32_t* comp_count = nullptr;  // [n] when comp_idx is null
    RopeParams out_rope;                  // the output's inverse RoPE when out_rope.freqs is non-null
    const int32_t* pos = nullptr;         // [n] the queries' positions, for out_rope
};

// The compressor update for a run of consecutive tokens of one sequence. state_kv/state_sc hold the last
// coff*ratio tokens' projections (score already plus ape), rows [0, ratio) = previous block (overlap only),
// [off, off+ratio) = current block, off = ratio if overlap else 0. For each token the op stores its row;
// whenever a block completes it pools an entry (per-channel softmax over slots) into out_entries. The first
// position is read on the device, so the op's arguments do not change from one decode step to the next.
struct CompressorArgs {
    const float* kv = nullptr;     // [n, coff*d] projections of the n tokens
    const float* score = nullptr;  // [n, coff*d] gate projections (ape not yet added)
    const float* ape = nullptr;    // [ratio, coff*d]
    float* state_kv = nullptr;     // [coff*ratio, coff*d]
    float* state_sc = nullptr;     // [coff*ratio, coff*d]
    float* out_entries = nullptr;  // [n_new, d] pooled entries, in completion order
    int64_t n = 0;
    const int32_t* pos = nullptr;  // [n] backend memory: the tokens' positions (consecutive; pos[0] is read)
    int ratio = 4;
    int d = 0;
    bool overlap = false;
};

struct MoeArgs {
    float* out = nullptr;          // [n, D]
    const float* x = nullptr;      // [n, D]
    const int32_t* ids = nullptr;  // [n, k] selected experts
    const float* weights = nullptr;  // [n, k] routing weights
    int64_t n = 0;
    int k = 0;
    Weight gate, up, down;         // 3-D expert stacks
    float clamp = 0.0f;            // SwiGLU clamp (0 = none)
};

// One product of a matmul batch: y = x W^T with its own strides.
struct MatmulJob {
    float* y = nullptr;
    int64_t y_stride = 0;
    const float* x = nullptr;
    int64_t x_stride = 0;
    const Weight* w = nullptr;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    virtual bool is_host() const = 0;  // true when backend memory is host memory

    // ---- memory ----
    virtual void* alloc(size_t bytes) = 0;  // aborts on failure with the byte count
    virtual void free(void* p) = 0;
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // backend to backend
    virtual void fill(float* dst, float value, int64_t n) = 0;
    virtual void synchronize() = 0;
    // Make a weight resident: the CPU backend uses the mapped bytes as they are; a GPU backend copies them.
    virtual const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) = 0;

    // ---- ops ----
    // out[i, :] = dequant(w row ids[i])
    virtual void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) = 0;
    // y[i, 0:M] = x[i, 0:K] . W^T for n rows, with row strides (in floats) for x and y.
    virtual void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w,
                        int64_t n) = 0;
    // y = matmul(rms_norm(x) times norm[K]) (eps as rms_norm; x is left as it is): a projection of a normed
    // low-rank latent, where a backend may norm the row inside the matmul's own kernel. The default norms a
    // copy in memory of its own and frees it after a synchronize; a backend that runs ops asynchronously
    // overrides it.
    virtual void matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm,
                             float eps, const Weight& w, int64_t n) {
        const int64_t K = w.cols;
        float* t = static_cast<float*>(alloc((size_t)(n * K) * sizeof(float)));
        norm_rows(t, x, x_stride, norm, n, K, eps);
        matmul(y, y_stride, t, K, w, n);
        synchronize();
        free(t);
    }
    // Independent matmuls over the same n rows (no y overlaps any x or another y), in any order: a backend
    // may run them together (one launch for a layer's projections of one input). Default: one by one.
    virtual void matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
        for (const MatmulJob& j : jobs) matmul(j.y, j.y_stride, j.x, j.x_stride, *j.w, n);
    }
    // RMS norm of n rows of `dim` floats (row stride `stride`), times weight (if non-null); in place allowed.
    virtual void rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                          float eps) = 0;
    // mHC pre: from H [n, hc, D] compute x [n, D] = sum_j pre_j H_j, post [n, hc], comb [n, hc, hc]. post and
    // comb (the Sinkhorn split, needed only by hc_post) may be computed on a branch: read them after a join().
    // With `first` (else null), H is first written as hc_post(*first) (first->H_out == H), exactly as that
    // hc_post followed by this hc_pre would: the previous sublayer's hc_post fused into this op (one pass over
    // the streams on a GPU). x, post and comb may not alias first's inputs.
    virtual void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                        const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) = 0;
    // hc_pre, then x = rms_norm(x) times norm[D] (eps as rms_norm): what a block runs before its attention and
    // its FFN. A backend may fuse the two (the CPU runs them one after the other, the oracle of the fused form).
    virtual void hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                             const float* base, int64_t n, const HcParams& p, const HcPostArgs* first,
                             const float* norm, float eps) {
        hc_pre(x, post, comb, H, fn, scale, base, n, p, first);
        rms_norm(x, x, norm, n, p.dim, p.dim, eps);
    }
    // mHC post: H_out[k] = post[k] * (x + x2) + sum_j comb[j][k] * H_res[j], the j-sum first (reference
    // order); x + x2 is the f32 sum `add` computes (x2 null: x alone). H_out may not alias an input.
    virtual void hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) = 0;
    // mHC head: y [n, D] = sum_j (sigmoid(mix_j * scale + base_j) + eps) H_j.
    virtual void hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base,
                         int64_t n, const HcParams& p) = 0;
    // RoPE on n rows of n_heads heads (row stride `stride`, head size head_dim), at positions pos[n].
    virtual void rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                      const RopeParams& r, bool inverse) = 0;
    // FP8 E4M3 round trip of dims [0, n_dims) of each row, blocks of `block`, power-of-two scales.
    virtual void fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) = 0;
    // rms_norm, rope and fp8_sim of each head in one op, in place. For each of n rows (row stride `stride` >=
    // n_heads * head_dim floats) and each of its n_heads contiguous heads of head_dim floats: the RMS norm of the
    // head (times weight[head_dim] when non-null; eps as rms_norm), then RoPE (forward) on the head's last
    // r.rope_dim dims (even, <= head_dim; 0 = none) at position pos[row], then, when fp8_block > 0, the FP8 E4M3
    // round trip of the head's dims [0, head_dim - r.rope_dim) in blocks of fp8_block (as fp8_sim; that count
    // must be a multiple of fp8_block; every head gets it, also when n_heads > 1). The default issues exactly
    // rms_norm, rope and fp8_sim (the CPU's result is theirs bit for bit); a backend may fuse them.
    virtual void norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight,
                           float eps, const int32_t* pos, const RopeParams& r, int fp8_block);
    // Hadamard rotation (scale dim^-0.5) of each row of `dim` (a power of two), then optionally the FP4
    // E2M1 round trip in blocks of 32.
    virtual void hadamard(float* x, int64_t n, int dim, bool fp4_sim) = 0;
    virtual void compressor(const CompressorArgs& a) = 0;
    // Lightning indexer: for query i, score(t) = sum_h relu(q[i,h] . keys[t]) * w[i,h] over t < n_visible[i];
    // writes the top min(top_k, n_visible[i]) entries (descending) to idx[i, :], the rest -1.
    virtual void indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys,
                              const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k) = 0;
    virtual void attention(const AttentionArgs& a) = 0;
    // Router: scores s = sqrt(softplus(logits)); choose top-k of s + bias (or tid2eid[token] when given);
    // weights = s[chosen] / sum * scale (normalized when `norm`).
    virtual void moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                           const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k,
                           float scale, bool norm) = 0;
    virtual void moe_experts(const MoeArgs& a) = 0;
    // h = silu(min(g, clamp)) * clamp(u, -clamp, clamp) (no clamp when clamp == 0); g/u are [n, F] with row
    // strides; h is [n, F] contiguous.
    virtual void swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                        float clamp) = 0;
    // y = a + b over n floats.
    virtual void add(float* y, const float* a, const float* b, int64_t n) = 0;
    // Copy n rows of `cols` floats between strided buffers.
    virtual void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                           int64_t cols) = 0;
    // dst[i] = src[idx[i]] rows (gather), idx in backend memory.
    virtual void gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) = 0;
    // dst[idx[i]] = src[i] rows (scatter) for every idx[i] >= 0; the targets must be distinct.
    virtual void scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) = 0;

    // ---- concurrency ----
    // Hints that let independent chains of ops overlap; the results are the same with or without them. The ops
    // issued between branch() and end_branch() form a branch: it runs after every op issued outside branches
    // before branch() (and after every branch joined by then; not necessarily after other unjoined branches),
    // and the ops issued after end_branch() may run concurrently with it until join(), after which every op
    // runs after every branch. Branches do not nest, and several may be ended and not yet joined at once. The
    // caller guarantees that a branch writes nothing that concurrent ops or branches read or write, that
    // nothing reads a branch's outputs before the join, and that no buffer a branch uses is freed before the
    // join (step graphs check this). An op may itself put part of its work on a branch: its doc says which
    // outputs are then ready only after the next join(). The default runs everything in order (the CPU
    // backend); the CUDA backend can run branches concurrently inside a step graph.
    virtual void branch() {}
    virtual void end_branch() {}
    virtual void join() {}

    // ---- step graphs ----
    // A backend that can replay a recorded run of ops as one unit (a CUDA graph) returns its GraphSupport;
    // ops/step_graphs.h records the model's small steps and replays them when a step repeats one seen
    // before. Null: not supported, every op runs as it is called.
    virtual GraphSupport* graph_support() { return nullptr; }

    // ---- introspection ----
    // The kernel the latest op that chooses between kernels ran ("q8_xreg", ...; the names of
    // kernels/cuda/cuda_kernels.h), or null since clear_last_kernel(). The CPU has one kernel per op.
    virtual const char* last_kernel() const { return nullptr; }
    virtual void clear_last_kernel() {}

protected:
    // t [n, K] (rows of K floats) = rms_norm(x) times norm, for x rows of x_stride floats: matmul_norm's unfused
    // first half (rms_norm takes one stride for both sides; a strided x is copied first).
    void norm_rows(float* t, const float* x, int64_t x_stride, const float* norm, int64_t n, int64_t K, float eps) {
        if (x_stride != K) {
            copy_rows(t, K, x, x_stride, n, K);
            x = t;
        }
        rms_norm(t, x, norm, n, K, K, eps);
    }
};

// Aborts, naming the problem, when norm_rope's arguments are inconsistent (every implementation checks them).
void norm_rope_check(int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos, const RopeParams& r,
                     int fp8_block);

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace dsv4
