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

    // Start over: an empty op list and key, scratch and staging from their starts.
    void reset(uint8_t* arena, size_t arena_cap, uint8_t* staging, size_t staging_cap);
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
    void copy(void* dst, const void* src, size_t bytes) override;
    void fill(float* dst, float value, int64_t n) override;
    void synchronize() override;
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override {
        return t_.weight_data(host_bytes, n_bytes);
    }

    void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) override;
    void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) override;
    void matmul_batch(std::span<const MatmulJob> jobs, int64_t n) override;
    void rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                  float eps) override;
    void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                const float* base, int64_t n, const HcParams& p) override;
    void hc_post(float* H_out, const float* x, const float* H_res, const float* post, const float* comb, int64_t n,
                 const HcParams& p) override;
    void hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                 const HcParams& p) override;
    void rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
              const RopeParams& r, bool inverse) override;
    void fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) override;
    void hadamard(float* x, int64_t n, int dim, bool fp4_sim) override;
    void compressor(const CompressorArgs& a) override;
    void indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys, const int32_t* n_visible,
                      int64_t n, int n_heads, int head_dim, int top_k) override;
    void attention(const AttentionArgs& a) override;
    void moe_route(int32_t* ids, float* weights, const float* logits, const float* bias, const int32_t* tid2eid,
                   const int32_t* tokens, int64_t n, int n_experts, int k, float scale, bool norm) override;
    void moe_experts(const MoeArgs& a) override;
    void swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                float clamp) override;
    void add(float* y, const float* a, const float* b, int64_t n) override;
    void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                   int64_t cols) override;
    void gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override;
    void scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) override;

private:
    // The key: an op code, then each argument's bytes (structs field by field, so padding never enters).
    template <class... A>
    void key(uint8_t op, const A&... args) {
        key_.push_back((char)op);
        (put(args), ...);
    }
    template <class T>
    void put(const T& v) {
        static_assert(std::is_trivially_copyable_v<T> && (std::is_arithmetic_v<T> || std::is_pointer_v<T> ||
                                                           std::is_enum_v<T>));
        key_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    }
    void put(const Weight& w);
    void put(const HcParams& p);
    void put(const RopeParams& r);
    void put(const AttentionArgs& a);
    void put(const CompressorArgs& a);
    void put(const MoeArgs& a);
    void record(RecordedOp op) { ops_->push_back(std::move(op)); }

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
    uint8_t* staging_ = nullptr;
    size_t staging_cap_ = 0, staging_used_ = 0;
};

}  // namespace dsv4
