// A Backend that passes every call on to a CPU backend of its own: the base of tests that change one thing a
// backend does (how weights become resident, an op that waits for the device) and keep the CPU's numbers.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace dsv4::test {

class ForwardingBackend : public Backend {
public:
    explicit ForwardingBackend(int threads) : b_(make_cpu_backend(threads)) {}
    const char* name() const override { return b_->name(); }
    bool is_host() const override { return b_->is_host(); }
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override {
        return b_->weight_data(host_bytes, n_bytes);
    }
    void* alloc(size_t bytes) override { return b_->alloc(bytes); }
    void free(void* p) override { b_->free(p); }
    void upload(void* dst, const void* src, size_t bytes) override { b_->upload(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { b_->download(dst, src, bytes); }
    void copy(void* dst, const void* src, size_t bytes) override { b_->copy(dst, src, bytes); }
    void fill(float* dst, float value, int64_t n) override { b_->fill(dst, value, n); }
    void synchronize() override { b_->synchronize(); }
    // Every op passed on after before_op(its name); the fused ones run as the ops they fuse (Backend's
    // defaults), as on the CPU.
#define DSV4_OP(name, params, args, rec) \
    void name params override {          \
        before_op(#name);                \
        b_->name args;                   \
    }
#define DSV4_FUSED_OP(name, params, args, rec)
#include "ops/op_list.h"

protected:
    virtual void before_op(const char* /*op*/) {}

private:
    std::unique_ptr<Backend> b_;
};

}  // namespace dsv4::test
