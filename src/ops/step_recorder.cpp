// The recording Backend of StepGraphs: each op appends its code and arguments to the key and a closure
// calling the same op on the target to the op list.
#include "ops/step_recorder.h"

#include <algorithm>

#include "core/check.h"
#include "ops/step_graphs.h"

namespace dsv4 {

namespace {

enum Op : uint8_t {
    kUpload = 1, kCopy, kFill, kEmbed, kMatmul, kMatmulBatch, kRmsNorm, kHcPre, kHcPost, kHcHead, kRope, kFp8Sim,
    kHadamard, kCompressor, kIndexerTopk, kAttention, kMoeRoute, kMoeExperts, kSwiglu, kAdd, kCopyRows,
    kGatherRows, kScatterRows,
};

// The key lists every field of these structs; a new field must be added to put() below (this fails first).
static_assert(sizeof(Weight) == 56 && sizeof(HcParams) == 32 && sizeof(RopeParams) == 16 &&
                  sizeof(AttentionArgs) == 104 && sizeof(CompressorArgs) == 80 && sizeof(MoeArgs) == 224,
              "an op argument struct changed: update StepRecorder::put");

constexpr size_t kArenaAlign = 256;  // the CUDA kernels' vector loads assume cudaMalloc-like alignment
constexpr size_t kStagingAlign = 16;

size_t round_up(size_t bytes, size_t align) { return (std::max<size_t>(bytes, 1) + align - 1) / align * align; }

}  // namespace

void StepRecorder::reset(uint8_t* arena, size_t arena_cap, uint8_t* staging, size_t staging_cap) {
    ops_ = std::make_shared<RecordedOps>();
    key_.clear();
    recordable_ = true;
    blocks_.clear();
    arena_ = arena;
    arena_cap_ = arena_cap;
    arena_top_ = arena_peak_ = 0;
    staging_ = staging;
    staging_cap_ = staging_cap;
    staging_used_ = 0;
}

std::shared_ptr<RecordedOps> StepRecorder::take_ops(std::string& key) {
    key.swap(key_);
    key_.clear();
    std::shared_ptr<RecordedOps> ops = std::move(ops_);
    ops_ = std::make_shared<RecordedOps>();
    return ops;
}

void StepRecorder::release_overflow() {
    for (void* p : overflow_) t_.free(p);
    overflow_.clear();
}

void* StepRecorder::alloc(size_t bytes) {
    const size_t size = round_up(bytes, kArenaAlign);
    arena_peak_ = std::max(arena_peak_, arena_top_ + size);
    if (arena_top_ + size > arena_cap_) {
        // Not room in the arena: the target's memory, whose address can change from step to step.
        recordable_ = false;
        void* p = t_.alloc(bytes);
        overflow_.push_back(p);
        return p;
    }
    blocks_.push_back({arena_top_, size, true});
    void* p = arena_ + arena_top_;
    arena_top_ += size;
    return p;
}

void StepRecorder::free(void* p) {
    uint8_t* q = static_cast<uint8_t*>(p);
    if (!q || !arena_ || q < arena_ || q >= arena_ + arena_cap_) return;  // overflow: released after the step
    for (size_t i = blocks_.size(); i-- > 0;) {
        if (arena_ + blocks_[i].offset == q) {
            blocks_[i].live = false;
            break;
        }
    }
    while (!blocks_.empty() && !blocks_.back().live) {
        arena_top_ = blocks_.back().offset;
        blocks_.pop_back();
    }
}

void StepRecorder::upload(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    const size_t size = round_up(bytes, kStagingAlign);
    if (staging_used_ + size > staging_cap_) {
        staging_used_ += size;
        recordable_ = false;
        auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                           static_cast<const uint8_t*>(src) + bytes);
        record([dst, copy, bytes](Backend& b) { b.upload(dst, copy->data(), bytes); });
        return;
    }
    uint8_t* s = staging_ + staging_used_;
    std::memcpy(s, src, bytes);
    staging_used_ += size;
    key(kUpload, dst, (const void*)s, bytes);
    record([dst, s, bytes](Backend& b) { b.upload(dst, s, bytes); });
}

void StepRecorder::download(void* dst, const void* src, size_t bytes) {
    g_.flush();
    t_.download(dst, src, bytes);
}

void StepRecorder::synchronize() {
    g_.flush();
    t_.synchronize();
}

void StepRecorder::copy(void* dst, const void* src, size_t bytes) {
    key(kCopy, dst, src, bytes);
    record([=](Backend& b) { b.copy(dst, src, bytes); });
}

void StepRecorder::fill(float* dst, float value, int64_t n) {
    key(kFill, dst, value, n);
    record([=](Backend& b) { b.fill(dst, value, n); });
}

void StepRecorder::put(const Weight& w) {
    put(w.type);
    put(w.cols);
    put(w.rows);
    put(w.n_experts);
    put(w.row_bytes);
    put(w.data);
}

void StepRecorder::put(const HcParams& p) {
    put(p.hc);
    put(p.dim);
    put(p.sinkhorn_iters);
    put(p.hc_eps);
    put(p.norm_eps);
}

void StepRecorder::put(const RopeParams& r) {
    put(r.freqs);
    put(r.rope_dim);
}

void StepRecorder::put(const AttentionArgs& a) {
    put(a.out);
    put(a.q);
    put(a.n);
    put(a.n_heads);
    put(a.head_dim);
    put(a.scale);
    put(a.sinks);
    put(a.kv_win);
    put(a.win_idx);
    put(a.n_win);
    put(a.kv_comp);
    put(a.comp_idx);
    put(a.n_comp);
    put(a.comp_count);
}

void StepRecorder::put(const CompressorArgs& a) {
    put(a.kv);
    put(a.score);
    put(a.ape);
    put(a.state_kv);
    put(a.state_sc);
    put(a.out_entries);
    put(a.n);
    put(a.pos);
    put(a.ratio);
    put(a.d);
    put(a.overlap);
}

void StepRecorder::put(const MoeArgs& a) {
    put(a.out);
    put(a.x);
    put(a.ids);
    put(a.weights);
    put(a.n);
    put(a.k);
    put(a.gate);
    put(a.up);
    put(a.down);
    put(a.clamp);
}

void StepRecorder::embed(float* out, const Weight& w, const int32_t* ids, int64_t n) {
    key(kEmbed, out, w, ids, n);
    record([=](Backend& b) { b.embed(out, w, ids, n); });
}

void StepRecorder::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) {
    key(kMatmul, y, y_stride, x, x_stride, w, n);
    record([=](Backend& b) { b.matmul(y, y_stride, x, x_stride, w, n); });
}

void StepRecorder::matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
    // The jobs point at weights the caller may not keep: the closure holds copies of both.
    struct Batch {
        std::vector<Weight> weights;
        std::vector<MatmulJob> jobs;
    };
    auto batch = std::make_shared<Batch>();
    batch->weights.reserve(jobs.size());
    key(kMatmulBatch, n, jobs.size());
    for (const MatmulJob& j : jobs) {
        key(0, j.y, j.y_stride, j.x, j.x_stride, *j.w);
        batch->weights.push_back(*j.w);
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        MatmulJob j = jobs[i];
        j.w = &batch->weights[i];
        batch->jobs.push_back(j);
    }
    record([batch, n](Backend& b) { b.matmul_batch(batch->jobs, n); });
}

void StepRecorder::rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                            float eps) {
    key(kRmsNorm, y, x, weight, n, dim, stride, eps);
    record([=](Backend& b) { b.rms_norm(y, x, weight, n, dim, stride, eps); });
}

void StepRecorder::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                          const float* base, int64_t n, const HcParams& p) {
    key(kHcPre, x, post, comb, H, fn, scale, base, n, p);
    record([=](Backend& b) { b.hc_pre(x, post, comb, H, fn, scale, base, n, p); });
}

void StepRecorder::hc_post(float* H_out, const float* x, const float* H_res, const float* post, const float* comb,
                           int64_t n, const HcParams& p) {
    key(kHcPost, H_out, x, H_res, post, comb, n, p);
    record([=](Backend& b) { b.hc_post(H_out, x, H_res, post, comb, n, p); });
}

void StepRecorder::hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base,
                           int64_t n, const HcParams& p) {
    key(kHcHead, y, H, fn, scale, base, n, p);
    record([=](Backend& b) { b.hc_head(y, H, fn, scale, base, n, p); });
}

void StepRecorder::rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                        const RopeParams& r, bool inverse) {
    key(kRope, x, n, n_heads, head_dim, stride, pos, r, inverse);
    record([=](Backend& b) { b.rope(x, n, n_heads, head_dim, stride, pos, r, inverse); });
}

void StepRecorder::fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) {
    key(kFp8Sim, x, n, n_dims, stride, block);
    record([=](Backend& b) { b.fp8_sim(x, n, n_dims, stride, block); });
}

void StepRecorder::hadamard(float* x, int64_t n, int dim, bool fp4_sim) {
    key(kHadamard, x, n, dim, fp4_sim);
    record([=](Backend& b) { b.hadamard(x, n, dim, fp4_sim); });
}

void StepRecorder::compressor(const CompressorArgs& a) {
    key(kCompressor, a);
    record([=](Backend& b) { b.compressor(a); });
}

void StepRecorder::indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys,
                                const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k) {
    key(kIndexerTopk, idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k);
    record([=](Backend& b) { b.indexer_topk(idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k); });
}

void StepRecorder::attention(const AttentionArgs& a) {
    key(kAttention, a);
    record([=](Backend& b) { b.attention(a); });
}

void StepRecorder::moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                             const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k,
                             float scale, bool norm) {
    key(kMoeRoute, ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale, norm);
    record([=](Backend& b) { b.moe_route(ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale, norm); });
}

void StepRecorder::moe_experts(const MoeArgs& a) {
    key(kMoeExperts, a);
    record([=](Backend& b) { b.moe_experts(a); });
}

void StepRecorder::swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                          float clamp) {
    key(kSwiglu, h, g, u, n, f, gu_stride, clamp);
    record([=](Backend& b) { b.swiglu(h, g, u, n, f, gu_stride, clamp); });
}

void StepRecorder::add(float* y, const float* a, const float* b_, int64_t n) {
    key(kAdd, y, a, b_, n);
    record([=](Backend& b) { b.add(y, a, b_, n); });
}

void StepRecorder::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                             int64_t cols) {
    key(kCopyRows, dst, dst_stride, src, src_stride, n, cols);
    record([=](Backend& b) { b.copy_rows(dst, dst_stride, src, src_stride, n, cols); });
}

void StepRecorder::gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    key(kGatherRows, dst, src, idx, n, cols);
    record([=](Backend& b) { b.gather_rows(dst, src, idx, n, cols); });
}

void StepRecorder::scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    key(kScatterRows, dst, src, idx, n, cols);
    record([=](Backend& b) { b.scatter_rows(dst, src, idx, n, cols); });
}

}  // namespace dsv4
