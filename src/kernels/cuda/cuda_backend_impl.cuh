// The CUDA backend class, shared by the kernel files of src/kernels/cuda (each defines the ops of one family).
// Everything runs in order on one stream, except the branches of a step graph being captured (side streams
// that fork from and join the main stream); the host synchronizes only in download() and synchronize().
// Activations and caches are f32 and every op computes in f32 (the CPU oracle's numerics), except the
// matmuls of many rows in the bf16 GEMM mode (tensor cores, cuda_gemm_tc.cu); docs/cuda.md says why.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_dequant.cuh"
#include "ops/backend.h"
#include "ops/graph_support.h"

struct cublasContext;  // cuBLAS's handle type (cublasHandle_t is a pointer to it)

namespace dsv4::cuda {

class CudaBackend final : public Backend, public GraphSupport {
public:
    CudaBackend(int device, const CudaOptions& options);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const char* name() const override { return "cuda"; }
    bool is_host() const override { return false; }

    void* alloc(size_t bytes) override;
    void free(void* p) override;
    void upload(void* dst, const void* src, size_t bytes) override;
    void download(void* dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    void fill(float* dst, float value, int64_t n) override;
    void synchronize() override;
    const uint8_t* weight_data(const uint8_t* host_bytes, size_t n_bytes) override;

    // Every op of ops/op_list.h, the fused ones included (each has a fused kernel).
#define DSV4_OP(name, params, args, rec) void name params override;
#define DSV4_FUSED_OP(name, params, args, rec) void name params override;
#include "ops/op_list.h"

    // Step graphs (cuda_graphs.cu): stream capture into a CUDA graph. Scratch the ops allocate while being
    // captured comes from memory the graph owns, so no later allocation can share it.
    GraphSupport* graph_support() override { return this; }
    // Branches (ops/backend.h): while a graph is captured, a branch's ops go to a side stream forked from the
    // main one and join() makes the main stream wait for every side stream; otherwise they are no-ops and
    // everything stays in order (eager ops free their scratch for reuse at once, which only stream order
    // makes safe). A branch opened inside another (an op's own branch) runs inline in the outer one.
    void branch() override;
    void end_branch() override;
    void join() override;
    void* alloc_staging(size_t bytes) override;
    void free_staging(void* p) override;
    void* capture(const std::function<void()>& issue) override;
    void launch(void* graph) override;
    void destroy(void* graph) override;
    int64_t host_waits() const override { return host_waits_; }

    // The stream an op issues its work to: the main stream, or a side stream inside a captured branch.
    cudaStream_t stream() const { return stream_; }
    GemmPrecision gemm_precision() const { return gemm_precision_; }
    void set_gemm_precision(GemmPrecision p) { gemm_precision_ = p; }
    // The cuBLAS handle of the tensor-core GEMMs, bound to stream() with its own workspace; created on
    // first use (cuda_gemm_tc.cu), so the f32 mode never initializes cuBLAS.
    cublasContext* cublas();
    const QuantTables& tables() const { return tables_; }
    const cudaDeviceProp& props() const { return props_; }

    // Kernel choice (cuda_select.cuh): the kernels forced by the options, and the one the latest op ran.
    const KernelForce& force() const { return force_; }
    KernelForce& force() { return force_; }
    MoeLimits moe_limits() const override;
    size_t memory_free() const override;
    Status set_collective(Collective* c) override;
    const char* last_kernel() const override { return last_kernel_; }
    void clear_last_kernel() override { last_kernel_ = nullptr; }
    void ran(const char* kernel) { last_kernel_ = kernel; }
    // What-if timing (CudaOptions::skip_ops): whether `op` launches nothing.
    bool skipped(const char* op) const {
        return !skip_ops_.empty() && std::find(skip_ops_.begin(), skip_ops_.end(), op) != skip_ops_.end();
    }

    // Scratch for an op's intermediates: released to the cache when the object dies (stream order keeps
    // the reuse safe: every kernel runs on the one stream).
    class Scratch {
    public:
        explicit Scratch(CudaBackend& b) : b_(b) {}
        ~Scratch() {
            for (void* p : ptrs_) b_.free(p);
        }
        Scratch(const Scratch&) = delete;
        Scratch& operator=(const Scratch&) = delete;
        template <class T>
        T* get(int64_t count) {
            void* p = b_.alloc((size_t)(count > 0 ? count : 1) * sizeof(T));
            ptrs_.push_back(p);
            return static_cast<T*>(p);
        }

    private:
        CudaBackend& b_;
        std::vector<void*> ptrs_;
    };

    // hc_pre / hc_head (cuda_hc.cu): the D slices per token of the finishing kernel, and the two sums it
    // needs: partial square sums ss [n, P_ss] of each token's streams and partial mix projections
    // raw [n, P_raw, fn.rows] (summed over P_raw in order; f32 kernels in every gemm mode). With `first` (an
    // hc_post writing H), H is written first: by the dots kernel itself where it can, else by hc_post.
    struct HcDots {
        float* raw = nullptr;
        double* ss = nullptr;
        int P_raw = 1, P_ss = 1;
    };
    int hc_slices(int64_t n, const HcParams& p) const;
    HcDots hc_dots(Scratch& s, const float* H, const Weight& fn, int64_t n, const HcParams& p, const HcPostArgs* first);
    // hc_pre and hc_pre_norm: the checks, the dots, the Sinkhorn on its branch and the collapse; with `norm`
    // (hc_pre_norm), the collapse kernel also applies the RMS norm.
    struct XNorm {
        const float* weight;
        float eps;
    };
    void hc_pre_launch(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                       const float* base, int64_t n, const HcParams& p, const HcPostArgs* first, const XNorm* norm);

    // Memory handed out while a graph is captured: chunks bumped through, freed with the graph.
    struct CapturePool {
        struct Chunk {
            void* p;
            size_t size;
        };
        std::vector<Chunk> chunks;
        size_t used = 0;          // bytes handed out of the last chunk
        bool overflowed = false;  // a chunk could not be had: the capture is thrown away
        void* get(size_t bytes);
        bool owns(const void* p) const;
    };

private:
    void release_cache();
    void tell_no_capture();  // once: steps run without a graph for want of capture_reserve_ bytes
    void release_cublas();  // cuda_gemm_tc.cu

    int device_ = 0;
    std::vector<std::string> skip_ops_;
    KernelForce force_;
    const char* last_kernel_ = nullptr;
    CapturePool* capture_pool_ = nullptr;  // set while a graph is captured
    // Free device memory a capture needs to start: the blocks kept for reuse are given back below it (a
    // capture takes its scratch with cudaMalloc and cannot give them back itself), and with less still free
    // the step runs without a graph. Twice the largest pool so far, at least 64 MiB (a decode step's pool is a
    // few chunks: a larger start would keep graphs off a device the caches fill on purpose).
    size_t capture_reserve_ = size_t(64) << 20;
    bool told_no_capture_ = false;  // the note that steps run without graphs was printed
    int64_t host_waits_ = 0;        // download() and synchronize() calls (GraphSupport::host_waits)
    cudaStream_t stream_ = nullptr;        // the current stream (see stream())
    cudaStream_t main_stream_ = nullptr;
    // Side streams of captured branches, each with its fork and join events; created with the backend.
    struct Side {
        cudaStream_t stream = nullptr;
        cudaEvent_t fork = nullptr, done = nullptr;
    };
    static constexpr int kSideStreams = 4;
    Side side_[kSideStreams];
    int open_branches_ = 0;  // side streams used since the last join
    int branch_depth_ = 0;   // branch() calls not yet ended (an inner one runs inline)
    cudaDeviceProp props_{};
    QuantTables tables_{};
    void* tables_mem_ = nullptr;
    std::vector<void*> weights_;                         // resident weights, freed at destruction
    std::unordered_map<void*, size_t> live_;             // allocation -> rounded size
    std::multimap<size_t, void*> cache_;                 // freed allocations by rounded size, for reuse
    GemmPrecision gemm_precision_ = GemmPrecision::F32;
    cublasContext* cublas_ = nullptr;
    void* cublas_workspace_ = nullptr;
};

}  // namespace dsv4::cuda
