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
    MoeLimits moe_limits() const override { return b_.moe_limits(); }
    size_t memory_free() const override { return b_.memory_free(); }
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

    // Every op of ops/op_list.h, timed under its name (some with more: profiling_backend.cpp's describe()).
#define DSV4_OP(name, params, args, rec) void name params override;
#define DSV4_FUSED_OP(name, params, args, rec) void name params override;
#include "ops/op_list.h"

private:
    // Runs call(); when enabled, also times it under the key and weight bytes describe() returns (an
    // OpCost; called only when enabled, so the disabled wrapper adds nothing but a branch to each op).
    template <class Describe, class F>
    void timed(Describe&& describe, F&& call);

    Backend& b_;
    bool enabled_ = true;
    std::map<std::string, OpProfileRow> rows_;
};

}  // namespace dsv4
