// The ops of the Backend interface (ops/backend.h), each declared once: its name, its parameter list and
// the argument list that passes those parameters on. Everything that declares or forwards every op (the
// Backend's virtuals, the CPU and CUDA backends' overrides, the profiler, the step recorder and its op
// codes) expands this list, so an op is added here, in its CPU and CUDA bodies and in its test.
//
// Included several times, with no include guard: the includer defines
//   DSV4_OP(name, params, args, rec)        an op every backend implements (pure in Backend)
//   DSV4_FUSED_OP(name, params, args, rec)  an op with a default body in Backend (the ops it fuses, run in
//                                           order: ops/backend.cpp); a backend may override it
// and this file undefines both. `rec` says how the step recorder (exec/step_recorder.h) records the op:
// `copied` when a copy of the arguments is all a later run needs; `custom` when an argument points at data
// the caller may not keep (the recorder's own body copies it).
//
// All activations are contiguous f32 in the backend's memory; integer side inputs are int32 there too.

#if !defined(DSV4_OP) || !defined(DSV4_FUSED_OP)
#error "define DSV4_OP and DSV4_FUSED_OP before including ops/op_list.h"
#endif

// out[i, :] = dequant(w row ids[i])
DSV4_OP(embed, (float* out, const Weight& w, const int32_t* ids, int64_t n), (out, w, ids, n), copied)
// y[i, 0:M] = x[i, 0:K] . W^T for n rows, with row strides (in floats) for x and y.
DSV4_OP(matmul, (float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n),
        (y, y_stride, x, x_stride, w, n), copied)
// RMS norm of n rows of `dim` floats (row stride `stride`), times weight (if non-null); in place allowed.
DSV4_OP(rms_norm, (float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride, float eps),
        (y, x, weight, n, dim, stride, eps), copied)
// mHC pre: from H [n, hc, D] compute x [n, D] = sum_j pre_j H_j, post [n, hc], comb [n, hc, hc]. post and
// comb (the Sinkhorn split, needed only by hc_post) may be computed on a branch: read them after a join().
// With `first` (else null), H is first written as hc_post(*first) (first->H_out == H), exactly as that
// hc_post followed by this hc_pre would: the previous sublayer's hc_post fused into this op (one pass over
// the streams on a GPU). x, post and comb may not alias first's inputs.
DSV4_OP(hc_pre,
        (float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale, const float* base,
         int64_t n, const HcParams& p, const HcPostArgs* first),
        (x, post, comb, H, fn, scale, base, n, p, first), custom)
// mHC post: H_out[k] = post[k] * (x + x2) + sum_j comb[j][k] * H_res[j], the j-sum first (reference
// order); x + x2 is the f32 sum `add` computes (x2 null: x alone). H_out may not alias an input.
DSV4_OP(hc_post, (const HcPostArgs& a, int64_t n, const HcParams& p), (a, n, p), copied)
// mHC head: y [n, D] = sum_j (sigmoid(mix_j * scale + base_j) + eps) H_j.
DSV4_OP(hc_head,
        (float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
         const HcParams& p),
        (y, H, fn, scale, base, n, p), copied)
// RoPE on n rows of n_heads heads (row stride `stride`, head size head_dim), at positions pos[n].
DSV4_OP(rope,
        (float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos, const RopeParams& r,
         bool inverse),
        (x, n, n_heads, head_dim, stride, pos, r, inverse), copied)
// FP8 E4M3 round trip of dims [0, n_dims) of each row, blocks of `block`, power-of-two scales.
DSV4_OP(fp8_sim, (float* x, int64_t n, int64_t n_dims, int64_t stride, int block), (x, n, n_dims, stride, block),
        copied)
// Hadamard rotation (scale dim^-0.5) of each row of `dim` (a power of two), then optionally the FP4
// E2M1 round trip in blocks of 32.
DSV4_OP(hadamard, (float* x, int64_t n, int dim, bool fp4_sim), (x, n, dim, fp4_sim), copied)
DSV4_OP(compressor, (const CompressorArgs& a), (a), copied)
// Lightning indexer: for query i, score(t) = sum_h relu(q[i,h] . keys[t]) * w[i,h] over t < n_visible[i];
// writes the top min(top_k, n_visible[i]) entries (descending) to idx[i, :], the rest -1. With key_rows
// (backend memory, [n]; queries of different sequences), query i's keys are key_rows[i] instead of keys,
// each pointer 16-byte aligned when head_dim % 4 == 0. With fp4_keys the key rows are packed FP4 rows
// (ops/fp4_rows.h, fp4_row_floats(head_dim) floats each; head_dim % 32 == 0) and the queries FP4-simulated
// values (quant-sim mode), so a backend may score them on integer tensor cores.
DSV4_OP(indexer_topk,
        (int32_t* idx, const float* q, const float* w, const float* keys, const int32_t* n_visible, int64_t n,
         int n_heads, int head_dim, int top_k, const float* const* key_rows, bool fp4_keys),
        (idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k, key_rows, fp4_keys), copied)
DSV4_OP(attention, (const AttentionArgs& a), (a), copied)
// Router: scores s = sqrt(softplus(logits)); choose top-k of s + bias (or tid2eid[token] when given);
// weights = s[chosen] / sum * scale (normalized when `norm`).
DSV4_OP(moe_route,
        (int32_t* ids, float* weights, const float* logits, const float* bias, const int32_t* tid2eid,
         const int32_t* tokens, int64_t n, int n_experts, int k, float scale, bool norm),
        (ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale, norm), copied)
DSV4_OP(moe_experts, (const MoeArgs& a), (a), copied)
// out[i, :] = the sum, from zero, of rows[i * k + j, :] over the token's k slots in ascending (expert id, slot)
// order, the order moe_experts adds its pairs in: the routed sum from per-pair rows (expert parallelism).
DSV4_OP(moe_sum_pairs, (float* out, const float* rows, const int32_t* ids, int64_t n, int k, int64_t D),
        (out, rows, ids, n, k, D), copied)
// x [n floats] becomes the sum over the model's ranks (Backend::set_collective; ops/collective.h), the same bits
// on every rank; with one rank x stays as it is.
DSV4_OP(all_reduce_sum, (float* x, int64_t n), (x, n), copied)
// h = silu(min(g, clamp)) * clamp(u, -clamp, clamp) (no clamp when clamp == 0); g/u are [n, F] with row
// strides; h is [n, F] contiguous.
DSV4_OP(swiglu, (float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride, float clamp),
        (h, g, u, n, f, gu_stride, clamp), copied)
// y = a + b over n floats.
DSV4_OP(add, (float* y, const float* a, const float* b, int64_t n), (y, a, b, n), copied)
// Copy n rows of `cols` floats between strided buffers.
DSV4_OP(copy_rows, (float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n, int64_t cols),
        (dst, dst_stride, src, src_stride, n, cols), copied)
// dst[i] = src[idx[i]] rows (gather), idx in backend memory.
DSV4_OP(gather_rows, (float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols),
        (dst, src, idx, n, cols), copied)
// dst[idx[i]] = src[i] rows (scatter) for every idx[i] >= 0; the targets must be distinct.
DSV4_OP(scatter_rows, (float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols),
        (dst, src, idx, n, cols), copied)
// Row i of src to row idx[i] of its own destination dst[i] (rows of `cols` floats) for every idx[i] >= 0:
// the scatter of rows of different sequences into their caches. dst is a pointer table in backend memory;
// the targets must be distinct.
DSV4_OP(scatter_rows_to, (float* const* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols),
        (dst, src, idx, n, cols), copied)
// Row i of src (dim FP4-simulated values, dim % 32 == 0) packed (ops/fp4_rows.h) into row idx[i] of dst, rows
// of fp4_row_floats(dim) floats, for every idx[i] >= 0; with dst_rows (a pointer table in backend memory,
// [n]) into row idx[i] of dst_rows[i] instead. The targets must be distinct.
DSV4_OP(pack_fp4_rows, (float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n, int dim),
        (dst, dst_rows, src, idx, n, dim), copied)
// Row i of src (dim values, the last `rope` of them RoPE dims and the others FP8-simulated in blocks of 64)
// packed (ops/kv_rows.h) into row idx[i] of dst, rows of kv_row_floats(dim, rope) floats, for every idx[i] >= 0;
// with dst_rows (a pointer table in backend memory, [n]) into row idx[i] of dst_rows[i] instead. The targets
// must be distinct.
DSV4_OP(pack_kv_rows,
        (float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n, int dim, int rope),
        (dst, dst_rows, src, idx, n, dim, rope), copied)

// The token draw of ops/sample_args.h for `rows` rows: args[r] names its logits row (of n_vocab floats) and
// its slice of `adjust`; out[r] gets the token and logprobs. All in backend memory; the logits are not
// changed.
DSV4_OP(sample,
        (SampleOut* out, const float* logits, int64_t n_vocab, const SampleArgs* args, int64_t rows,
         const SampleAdjust* adjust),
        (out, logits, n_vocab, args, rows, adjust), copied)

// y = matmul(rms_norm(x) times norm[K]) (eps as rms_norm; x is left as it is): a projection of a normed
// low-rank latent, where a backend may norm the row inside the matmul's own kernel. The default norms a
// copy in memory of its own and frees it after a synchronize; a backend that runs ops asynchronously
// overrides it.
DSV4_FUSED_OP(matmul_norm,
              (float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm, float eps,
               const Weight& w, int64_t n),
              (y, y_stride, x, x_stride, norm, eps, w, n), copied)
// Independent matmuls over the same n rows (no y overlaps any x or another y), in any order: a backend
// may run them together (one launch for a layer's projections of one input). Default: one by one.
DSV4_FUSED_OP(matmul_batch, (std::span<const MatmulJob> jobs, int64_t n), (jobs, n), custom)
// hc_pre, then x = rms_norm(x) times norm[D] (eps as rms_norm): what a block runs before its attention and
// its FFN. A backend may fuse the two (the CPU runs them one after the other, the oracle of the fused form).
DSV4_FUSED_OP(hc_pre_norm,
              (float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
               const float* base, int64_t n, const HcParams& p, const HcPostArgs* first, const float* norm,
               float eps),
              (x, post, comb, H, fn, scale, base, n, p, first, norm, eps), custom)
// rms_norm, rope and fp8_sim of each head in one op, in place. For each of n rows (row stride `stride` >=
// n_heads * head_dim floats) and each of its n_heads contiguous heads of head_dim floats: the RMS norm of the
// head (times weight[head_dim] when non-null; eps as rms_norm), then RoPE (forward) on the head's last
// r.rope_dim dims (even, <= head_dim; 0 = none) at position pos[row], then, when fp8_block > 0, the FP8 E4M3
// round trip of the head's dims [0, head_dim - r.rope_dim) in blocks of fp8_block (as fp8_sim; that count
// must be a multiple of fp8_block; every head gets it, also when n_heads > 1). The default issues exactly
// rms_norm, rope and fp8_sim (the CPU's result is theirs bit for bit); a backend may fuse them.
DSV4_FUSED_OP(norm_rope,
              (float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight, float eps,
               const int32_t* pos, const RopeParams& r, int fp8_block),
              (x, n, n_heads, head_dim, stride, weight, eps, pos, r, fp8_block), copied)

#undef DSV4_OP
#undef DSV4_FUSED_OP
