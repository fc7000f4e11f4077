// The recording Backend of StepGraphs (step_graphs.h): every op call becomes a closure for the target
// backend plus its arguments appended to a key; scratch comes from the step arena as a stack, uploads are
// copied into the staging buffer and recorded as copies from there.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/backend.h"

namespace dsv4 {

class StepGraphs;

using RecordedOp = std::function<void(Backend&)>;
using RecordedOps = std::vector<RecordedOp>;

class StepRecorder final : public Backend {
public:
    StepRecorder(StepGraphs& owner, Backend& target) : g_(owner), t_(target) {}

    // Start over: an empty op list and key, scratch and staging from their starts. defer_branches (tests):
    // each branch's ops are recorded at its join rather than where they were issued, the branches of one
    // join latest first: the latest order Backend::branch allows, so a dependency the branches do not declare
    // changes the results (StepOptions::defer_branches).
    void reset(uint8_t* arena, size_t arena_cap, uint8_t* staging, size_t staging_cap, bool defer_branches);
    bool empty() const { return ops_->empty(); }
    // Hands the ops and key recorded since the last take over and starts a new op list (scratch and staging
    // keep their places: the taken ops may still read them).
    std::shared_ptr<RecordedOps> take_ops(std::string& key);
    // False when something did not fit the arena or staging (the step then runs as issued) ...
    bool recordable() const { return recordable_; }
    // ... and how much would have.
    size_t arena_needed() const { return arena_peak_; }
    size_t staging_needed() const { return staging_used_; }
    // Scratch that did not fit the arena came from the target; give it back (after the step ran).
    void release_overflow();

    const char* name() const override { return t_.name(); }
    bool is_host() const override { return t_.is_host(); }
    void* alloc(size_t bytes) override;
    void free(void* p) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override { forward(kCopy, &Backend::copy, dst, src, bytes); }
    void fill(float* dst, float value, int64_t n) override { forward(kFill, &Backend::fill, dst, value, n); }
    void synchronize() override;
    // Recorded like ops; the counts let free() refuse scratch that an unjoined branch may still be using.
    void branch() override;
    void end_branch() override;
    void join() override;
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override {
        return t_.weight_data(host_bytes, n_bytes);
    }

    void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) override {
        forward(kEmbed, &Backend::embed, out, w, ids, n);
    }
    void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) override {
        forward(kMatmul, &Backend::matmul, y, y_stride, x, x_stride, w, n);
    }
    void matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm, float eps,
                     const Weight& w, int64_t n) override {
        forward(kMatmulNorm, &Backend::matmul_norm, y, y_stride, x, x_stride, norm, eps, w, n);
    }
    void matmul_batch(std::span<const MatmulJob> jobs, int64_t n) override;
    void rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                  float eps) override {
        forward(kRmsNorm, &Backend::rms_norm, y, x, weight, n, dim, stride, eps);
    }
    void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) override;
    void hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                     const float* base, int64_t n, const HcParams& p, const HcPostArgs* first, const float* norm,
                     float eps) override;
    void hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) override {
        forward(kHcPost, &Backend::hc_post, a, n, p);
    }
    void hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                 const HcParams& p) override {
        forward(kHcHead, &Backend::hc_head, y, H, fn, scale, base, n, p);
    }
    void rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos, const RopeParams& r,
              bool inverse) override {
        forward(kRope, &Backend::rope, x, n, n_heads, head_dim, stride, pos, r, inverse);
    }
    void fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) override {
        forward(kFp8Sim, &Backend::fp8_sim, x, n, n_dims, stride, block);
    }
    void norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight, float eps,
                   const int32_t* pos, const RopeParams& r, int fp8_block) override {
        forward(kNormRope, &Backend::norm_rope, x, n, n_heads, head_dim, stride, weight, eps, pos, r, fp8_block);
    }
    void hadamard(float* x, int64_t n, int dim, bool fp4_sim) override {
        forward(kHadamard, &Backend::hadamard, x, n, dim, fp4_sim);
    }
    void compressor(const CompressorArgs& a) override { forward(kCompressor, &Backend::compressor, a); }
    void indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys, const int32_t* n_visible,
                      int64_t n, int n_heads, int head_dim, int top_k) override {
        forward(kIndexerTopk, &Backend::indexer_topk, idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k);
    }
    void attention(const AttentionArgs& a) override { forward(kAttention, &Backend::attention, a); }
    void moe_route(int32_t* ids, float* weights, const float* logits, const float* bias, const int32_t* tid2eid,
                   const int32_t* tokens, int64_t n, int n_experts, int k, float scale, bool norm) override {
        forward(kMoeRoute, &Backend::moe_route, ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale,
                norm);
    }
    void moe_experts(const MoeArgs& a) override { forward(kMoeExperts, &Backend::moe_experts, a); }
    void swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                float clamp) override {
        forward(kSwiglu, &Backend::swiglu, h, g, u, n, f, gu_stride, clamp);
    }
    void add(float* y, const float* a, const float* b, int64_t n) override { forward(kAdd, &Backend::add, y, a, b, n); }
    void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                   int64_t cols) override {
        forward(kCopyRows, &Backend::copy_rows, dst, dst_stride, src, src_stride, n, cols);
    }
    void gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override {
        forward(kGatherRows, &Backend::gather_rows, dst, src, idx, n, cols);
    }
    void scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override {
        forward(kScatterRows, &Backend::scatter_rows, dst, src, idx, n, cols);
    }

private:
    // Op codes of the key.
    enum Op : uint8_t {
        kUpload = 1,
        kCopy,
        kFill,
        kEmbed,
        kMatmul,
        kMatmulBatch,
        kRmsNorm,
        kHcPre,
        kHcPost,
        kHcHead,
        kRope,
        kFp8Sim,
        kNormRope,
        kHadamard,
        kCompressor,
        kIndexerTopk,
        kAttention,
        kMoeRoute,
        kMoeExperts,
        kSwiglu,
        kAdd,
        kCopyRows,
        kGatherRows,
        kScatterRows,
        kBranch,
        kEndBranch,
        kJoin,
        kHcPreNorm,
        kMatmulNorm,
    };

    // The key: an op code, then each argument's bytes (structs field by field, so padding never enters).
    template <class... A>
    void key(uint8_t op, const A&... args) {
        key_.push_back((char)op);
        (put(args), ...);
    }
    template <class T>
    void put(const T& v) {
        static_assert(std::is_trivially_copyable_v<T> &&
                      (std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>));
        key_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    }
    void put(const Weight& w);
    void put(const HcParams& p);
    void put(const HcPostArgs& a);
    void put(const RopeParams& r);
    void put(const AttentionArgs& a);
    void put(const CompressorArgs& a);
    void put(const MoeArgs& a);
    void record(RecordedOp op) {
        if (defer_ && branch_depth_ > 0)
            pending_.back().push_back(std::move(op));
        else
            ops_->push_back(std::move(op));
    }
    // An op recorded as called: its code and arguments into the key, a call of the same Backend method on
    // copies of the arguments into the op list.
    template <class Method, class... A>
    void forward(uint8_t op, Method method, const A&... args) {
        key(op, args...);
        record([method, args...](Backend& b) { (b.*method)(args...); });
    }

    StepGraphs& g_;
    Backend& t_;
    std::shared_ptr<RecordedOps> ops_ = std::make_shared<RecordedOps>();
    std::string key_;
    bool recordable_ = true;
    // The arena as a stack of blocks; a freed block is popped when nothing above it is live.
    struct Block {
        size_t offset, size;
        bool live;
    };
    std::vector<Block> blocks_;
    uint8_t* arena_ = nullptr;
    size_t arena_cap_ = 0, arena_top_ = 0, arena_peak_ = 0;
    std::vector<void*> overflow_;
    int branch_depth_ = 0;   // open branches
    bool unjoined_ = false;  // a branch ended since the last join
    bool defer_ = false;
    std::vector<RecordedOps> pending_;  // with defer_: the ops of the branches since the last join
    uint8_t* staging_ = nullptr;
    size_t staging_cap_ = 0, staging_used_ = 0;
};

}  // namespace dsv4
