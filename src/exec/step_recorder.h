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
    MoeLimits moe_limits() const override { return t_.moe_limits(); }
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

    // Every op of ops/op_list.h: `copied` ones recorded as called (forward()), `custom` ones by their own
    // bodies in step_recorder.cpp, which copy what the arguments point at.
#define DSV4_RECORD_ARGS(...) __VA_ARGS__
#define DSV4_RECORD_copied(name, params, args) \
    void name params override { forward(k_##name, &Backend::name, DSV4_RECORD_ARGS args); }
#define DSV4_RECORD_custom(name, params, args) void name params override;
#define DSV4_OP(name, params, args, rec) DSV4_RECORD_##rec(name, params, args)
#define DSV4_FUSED_OP(name, params, args, rec) DSV4_RECORD_##rec(name, params, args)
#include "ops/op_list.h"
#undef DSV4_RECORD_ARGS
#undef DSV4_RECORD_copied
#undef DSV4_RECORD_custom

private:
    // Op codes of the key.
    enum Op : uint8_t {
        kUpload = 1,
        kCopy,
        kFill,
        kBranch,
        kEndBranch,
        kJoin,
        // k_embed, k_matmul, ...: one per op of the list.
#define DSV4_OP(name, params, args, rec) k_##name,
#define DSV4_FUSED_OP(name, params, args, rec) k_##name,
#include "ops/op_list.h"
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
