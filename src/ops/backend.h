// The op interface the model calls: about twenty coarse ops (listed, with their contracts, in ops/op_list.h),
// implemented once per backend (kernels/cpu, kernels/cuda). All activations are contiguous f32 in the backend's memory; integer side inputs (token
// ids, positions, index lists) are int32 in the backend's memory too. Weights stay in their GGUF block
// format. Host code decides only sizes and positions; it never reads activations in the middle of a step.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "format/ggml_type.h"
#include "ops/collective.h"
#include "ops/sample_args.h"

namespace dsv4 {

class GraphSupport;  // ops/graph_support.h

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
// Queries of different sequences (batched decode) each have their own sources: with kv_win_rows (and
// kv_comp_rows where kv_comp is set), query i's window source is kv_win_rows[i] and its compressed source
// kv_comp_rows[i] (kv_win and kv_comp then only say whether a source exists). These pointer tables are in
// backend memory, and each pointer is 16-byte aligned when head_dim % 4 == 0.
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
    const float* const* kv_win_rows = nullptr;   // [n] or null: per-query window sources (see above)
    const float* const* kv_comp_rows = nullptr;  // [n] or null: per-query compressed sources
    // Compressed rows packed as ops/kv_rows.h (FP8 codes, scales and comp_rope f32 RoPE dims; a row is then
    // kv_row_floats(head_dim, comp_rope) floats, 16-byte aligned) instead of head_dim floats.
    bool comp_packed = false;
    int comp_rope = 0;
};

// The source of query i's window rows and compressed rows (the per-query tables when given).
inline const float* attention_win_src(const AttentionArgs& a, int64_t i) {
    return a.kv_win_rows ? a.kv_win_rows[i] : a.kv_win;
}
inline const float* attention_comp_src(const AttentionArgs& a, int64_t i) {
    return a.kv_comp_rows ? a.kv_comp_rows[i] : a.kv_comp;
}

// The compressor update for a run of consecutive tokens of one sequence. state_kv/state_sc hold the last
// coff*ratio tokens' projections (score already plus ape), rows [0, ratio) = previous block (overlap only),
// [off, off+ratio) = current block, off = ratio if overlap else 0. For each token the op stores its row;
// whenever a block completes it pools an entry (per-channel softmax over slots) into out_entries. The first
// position is read on the device, so the op's arguments do not change from one decode step to the next.
// Tokens of different sequences (batched decode): with state_kv_rows and state_sc_rows, token j is one
// token of its own sequence, at position pos[j], whose state is state_kv_rows[j] / state_sc_rows[j]
// (state_kv / state_sc unused); out_entries is then [n, d]: row j gets the entry token j completes, or
// zeros when it completes none. The tables are in backend memory.
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
    float* const* state_kv_rows = nullptr;  // [n] or null: per-token states (see above)
    float* const* state_sc_rows = nullptr;
};

// With expert parallelism (the stacks hold experts [expert_base, expert_base + n_experts) of the model's; ids are
// the model's), pair_out replaces out: [n * k, D], row token * k + slot = that pair's down projection (routing
// weight applied) when its expert is held here, zeros otherwise; moe_sum_pairs later forms the sum out would hold.
struct MoeArgs {
    float* out = nullptr;          // [n, D]
    const float* x = nullptr;      // [n, D]
    const int32_t* ids = nullptr;  // [n, k] selected experts
    const float* weights = nullptr;  // [n, k] routing weights
    int64_t n = 0;
    int k = 0;
    Weight gate, up, down;         // 3-D expert stacks
    float clamp = 0.0f;            // SwiGLU clamp (0 = none)
    int64_t expert_base = 0;       // the stacks' first expert (expert parallelism)
    float* pair_out = nullptr;     // [n * k, D] per-pair rows instead of out (expert parallelism)
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
    // Every op of ops/op_list.h, where each is documented; the fused ones default to the ops they fuse.
#define DSV4_OP(name, params, args, rec) virtual void name params = 0;
#define DSV4_FUSED_OP(name, params, args, rec) virtual void name params;
#include "ops/op_list.h"

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

    // ---- several ranks ----
    // The collective of a model split over ranks (ops/collective.h), used by all_reduce_sum; null: one rank.
    // A backend that cannot take part in it says why (an error, nothing set).
    virtual Status set_collective(Collective* c) {
        collective_ = c;
        return {};
    }
    Collective* collective() const { return collective_; }

    // ---- step graphs ----
    // A backend that can replay a recorded run of ops as one unit (a CUDA graph) returns its GraphSupport;
    // exec/step_graphs.h records small steps and replays them when a step repeats one seen
    // before. Null: not supported, every op runs as it is called.
    virtual GraphSupport* graph_support() { return nullptr; }

    // ---- limits ----
    // The most routed experts (moe_route's n_experts, the expert stacks' n_experts) and experts per token
    // (k) the MoE ops take; a model beyond them is refused at load. Unlimited unless a backend says otherwise.
    struct MoeLimits {
        int max_experts = INT_MAX;
        int max_used = INT_MAX;
    };
    virtual MoeLimits moe_limits() const { return {}; }
    // Bytes of backend memory free for new allocations now (a GPU's free memory with the blocks the backend
    // keeps for reuse; the host's available memory), for memory planning such as the engine's KV-cache slots.
    // SIZE_MAX when not known.
    virtual size_t memory_free() const { return SIZE_MAX; }

    // ---- introspection ----
    // The kernel the latest op that chooses between kernels ran ("q8_xreg", ...; the names of
    // kernels/cuda/cuda_kernels.h), or null since clear_last_kernel(). The CPU has one kernel per op.
    virtual const char* last_kernel() const { return nullptr; }
    virtual void clear_last_kernel() {}

protected:
    Collective* collective_ = nullptr;
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
