// The CPU backend: the oracle every other backend is checked against. Plain f32 math, threaded over rows,
// with SIMD only in the dot-product kernel (cpu_dot.h). Weights are used in place from the mapped file.
#pragma once

#include <memory>

#include "core/thread_pool.h"
#include "ops/backend.h"
#include "ops/graph_support.h"

namespace dsv4 {

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads);
    const char* name() const override { return "cpu"; }
    bool is_host() const override { return true; }
    size_t memory_free() const override;
    ThreadPool& pool() { return pool_; }

    void* alloc(size_t bytes) override;
    void free(void* p) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void fill(float* dst, float value, int64_t n) override;
    void synchronize() override {}
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t) override { return host_bytes; }

    // Every op of ops/op_list.h but the fused ones: the CPU runs those as the ops they fuse (Backend's defaults).
#define DSV4_OP(name, params, args, rec) void name params override;
#define DSV4_FUSED_OP(name, params, args, rec)
#include "ops/op_list.h"
    // Replays are the recorded op lists themselves: the recording machinery runs (and is tested) on the CPU.
    GraphSupport* graph_support() override { return &graphs_; }

private:
    ThreadPool pool_;
    StoredOpsSupport graphs_;
};

}  // namespace dsv4
