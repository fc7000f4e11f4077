// The CPU backend: the oracle every other backend is checked against. Plain f32 math, threaded over rows,
// with SIMD only in the dot-product kernel (cpu_dot.h). Weights are used in place from the mapped file.
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "ops/backend.h"
#include "ops/step_graphs.h"

namespace dsv4 {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads);
    const char* name() const override { return "cpu"; }
    bool is_host() const override { return true; }
    ThreadPool& pool() { return pool_; }

    void* alloc(size_t bytes) override;
    void free(void* p) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void fill(float* dst, float value, int64_t n) override;
    void synchronize() override {}
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t) override { return host_bytes; }

    void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) override;
    void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) override;
    void rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                  float eps) override;
    void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) override;
    void hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) override;
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
    // Replays are the recorded op lists themselves: the recording machinery runs (and is tested) on the CPU.
    GraphSupport* graph_support() override { return &graphs_; }

private:
    ThreadPool pool_;
    StoredOpsSupport graphs_;
};

}  // namespace dsv4
