// The recording Backend of StepGraphs: each op appends its code and arguments to the key and a closure
// calling the same op on the target to the op list (forward(), step_recorder.h).
#include "exec/step_recorder.h"

#include <algorithm>

#include "core/check.h"
#include "exec/step_graphs.h"

namespace dsv4 {

namespace {

// The key lists every field of these structs; a new field must be added to put() below (this fails first).
static_assert(sizeof(Weight) == 56 && sizeof(HcParams) == 32 && sizeof(HcPostArgs) == 48 && sizeof(RopeParams) == 16 &&
                  sizeof(AttentionArgs) == 152 && sizeof(CompressorArgs) == 96 && sizeof(MoeArgs) == 240,
              "an op argument struct changed: update StepRecorder::put");

constexpr size_t kArenaAlign = 256;  // the CUDA kernels' vector loads assume cudaMalloc-like alignment
constexpr size_t kStagingAlign = 16;

size_t round_up(size_t bytes, size_t align) {
    return (std::max<size_t>(bytes, 1) + align - 1) / align * align;
}

}  // namespace

void StepRecorder::reset(uint8_t* arena, size_t arena_cap, uint8_t* staging, size_t staging_cap,
                         bool defer_branches) {
    ops_ = std::make_shared<RecordedOps>();
    key_.clear();
    // A deferred recording runs its ops in another order: it must not share a graph with a plain one.
    defer_ = defer_branches;
    pending_.clear();
    if (defer_) key_.push_back('D');
    recordable_ = true;
    blocks_.clear();
    arena_ = arena;
    arena_cap_ = arena_cap;
    arena_top_ = arena_peak_ = 0;
    branch_depth_ = 0;
    unjoined_ = false;
    staging_ = staging;
    staging_cap_ = staging_cap;
    staging_used_ = 0;
}

void StepRecorder::branch() {
    if (defer_ && branch_depth_ == 0) pending_.emplace_back();
    ++branch_depth_;
    forward(kBranch, &Backend::branch);
}

void StepRecorder::end_branch() {
    DSV4_CHECK_MSG(branch_depth_ > 0, "end_branch() without branch()");
    forward(kEndBranch, &Backend::end_branch);
    if (--branch_depth_ == 0) unjoined_ = true;
}

void StepRecorder::join() {
    DSV4_CHECK_MSG(branch_depth_ == 0, "join() inside a branch");
    for (auto it = pending_.rbegin(); it != pending_.rend(); ++it)
        for (RecordedOp& op : *it) ops_->push_back(std::move(op));
    pending_.clear();
    unjoined_ = false;
    forward(kJoin, &Backend::join);
}

std::shared_ptr<RecordedOps> StepRecorder::take_ops(std::string& key) {
    DSV4_CHECK_MSG(pending_.empty(), "a step ran its ops with a deferred branch not joined");
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
    // A later op could be handed this block while a branch that reads or writes it may still run.
    DSV4_CHECK_MSG(branch_depth_ == 0 && !unjoined_, "step scratch freed inside a branch or before its join()");
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
    forward(kUpload, &Backend::upload, dst, (const void*)s, bytes);
}

void StepRecorder::download(void* dst, const void* src, size_t bytes) {
    g_.flush();
    t_.download(dst, src, bytes);
}

void StepRecorder::synchronize() {
    g_.flush();
    t_.synchronize();
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

void StepRecorder::put(const HcPostArgs& a) {
    put(a.H_out);
    put(a.x);
    put(a.x2);
    put(a.H_res);
    put(a.post);
    put(a.comb);
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
    put(a.out_rope);
    put(a.pos);
    put(a.kv_win_rows);
    put(a.kv_comp_rows);
    put(a.comp_packed);
    put(a.comp_rope);
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
    put(a.state_kv_rows);
    put(a.state_sc_rows);
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
    put(a.expert_base);
    put(a.pair_out);
}

void StepRecorder::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                          const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) {
    // The fused hc_post's arguments are keyed (after a flag, so a plain call never keys like a fused one) and
    // held by the closure: the caller's struct is gone when the op runs.
    const bool fused = first != nullptr;
    key(k_hc_pre, x, post, comb, H, fn, scale, base, n, p, fused);
    const HcPostArgs f = fused ? *first : HcPostArgs{};
    if (fused) put(f);
    record([=](Backend& b) { b.hc_pre(x, post, comb, H, fn, scale, base, n, p, fused ? &f : nullptr); });
}

void StepRecorder::hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn,
                               const float* scale, const float* base, int64_t n, const HcParams& p,
                               const HcPostArgs* first, const float* norm, float eps) {
    const bool fused = first != nullptr;  // as hc_pre
    key(k_hc_pre_norm, x, post, comb, H, fn, scale, base, n, p, fused, norm, eps);
    const HcPostArgs f = fused ? *first : HcPostArgs{};
    if (fused) put(f);
    record([=](Backend& b) {
        b.hc_pre_norm(x, post, comb, H, fn, scale, base, n, p, fused ? &f : nullptr, norm, eps);
    });
}

void StepRecorder::matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
    // The jobs point at weights the caller may not keep: the closure holds copies of both.
    struct Batch {
        std::vector<Weight> weights;
        std::vector<MatmulJob> jobs;
    };
    auto batch = std::make_shared<Batch>();
    batch->weights.reserve(jobs.size());
    key(k_matmul_batch, n, jobs.size());
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

}  // namespace dsv4
