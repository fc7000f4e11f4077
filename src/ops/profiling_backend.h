// A Backend decorator that times every op: it forwards each call to the wrapped backend, waits for it to
// finish (synchronize) and adds the wall time to a per-op total. The waiting removes the overlap between
// host launches and device work, so the totals are an upper bound per op, not the pipelined step time:
// use it to see where a step's time goes (`dsv4 bench --profile`), never for the headline numbers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace dsv4 {

struct OpProfileRow {
    std::string key;     // op name, for matmul also the weight type and a row-count class, and [the kernel] it ran
    int64_t calls = 0;
    double seconds = 0;  // summed wall time including the wait for completion
    double bytes = 0;    // weight bytes the op had to read (matmul and embed only; 0 when not known)
};

class ProfilingBackend final : public Backend {
public:
    explicit ProfilingBackend(Backend& inner) : b_(inner) {}

    // Off: every call passes straight through (no waiting, nothing recorded); on: ops are timed.
    void set_enabled(bool on) { enabled_ = on; }
    // Off, steps may be replayed as graphs of the wrapped backend; on, every op must run (and be timed) alone.
    GraphSupport* graph_support() override { return enabled_ ? nullptr : b_.graph_support(); }
    const char* last_kernel() const override { return b_.last_kernel(); }
    void clear_last_kernel() override { b_.clear_last_kernel(); }

    // Rows sorted by time, largest first.
    std::vector<OpProfileRow> rows() const;
    void reset() { rows_.clear(); }
    // A text table: op, calls, total ms, share, µs per call, GB/s where bytes are known.
    std::string report(int64_t steps) const;

    const char* name() const override { return b_.name(); }
    bool is_host() const override { return b_.is_host(); }
    void* alloc(size_t bytes) override { return b_.alloc(bytes); }
    void free(void* p) override { b_.free(p); }
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void fill(float* dst, float value, int64_t n) override;
    void synchronize() override { b_.synchronize(); }
    // Passed on as they are: the wrapped backend overlaps branches only inside a step graph, which profiling
    // turns off.
    void branch() override { b_.branch(); }
    void end_branch() override { b_.end_branch(); }
    void join() override { b_.join(); }
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override {
        return b_.weight_data(host_bytes, n_bytes);
    }

    void embed(float* out, const Weight& w, const int32_t* ids, int64_t n) override;
    void matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w, int64_t n) override;
    void matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm, float eps,
                     const Weight& w, int64_t n) override;
    void matmul_batch(std::span<const MatmulJob> jobs, int64_t n) override;
    void rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                  float eps) override;
    void hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) override;
    void hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                     const float* base, int64_t n, const HcParams& p, const HcPostArgs* first, const float* norm,
                     float eps) override;
    void hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) override;
    void hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base, int64_t n,
                 const HcParams& p) override;
    void rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
              const RopeParams& r, bool inverse) override;
    void fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) override;
    void norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight, float eps,
                   const int32_t* pos, const RopeParams& r, int fp8_block) override;
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
    // Runs call(); when enabled, also times it under `key`: a name, or a callable making one (called only
    // when enabled, so the disabled wrapper adds nothing but a branch to each op).
    template <class Key, class F>
    void timed(Key&& key, double bytes, F&& call);

    Backend& b_;
    bool enabled_ = true;
    std::map<std::string, OpProfileRow> rows_;
};

}  // namespace dsv4
