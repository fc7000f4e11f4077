// CUDA step graphs: a recorded step (exec/step_graphs.h) is captured from the backend's stream into a CUDA
// graph and replayed with one launch. Uploads in it copy from pinned staging memory, so a replay reads the
// values written there for the current step.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

constexpr size_t kChunk = size_t(4) << 20;

// A captured step and the memory its ops were given while captured, freed together.
struct Graph {
    cudaGraphExec_t exec = nullptr;
    CudaBackend::CapturePool pool;
    ~Graph() {
        if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
        for (const auto& c : pool.chunks) CUDA_CHECK(cudaFree(c.p));
    }
};

}  // namespace

void* CudaBackend::CapturePool::get(size_t bytes) {
    if (used + bytes > chunks.back().size) {  // capture() gave the pool its first chunk
        const size_t size = std::max(kChunk, bytes);
        void* p = nullptr;
        if (cudaMalloc(&p, size) != cudaSuccess) {
            // Nothing captured runs before the capture ends, and this one will be thrown away then: hand out
            // the pool's own memory again so the step's ops can still be recorded, then run it without a graph.
            (void)cudaGetLastError();
            overflowed = true;
            used = 0;
            return chunks.back().p;
        }
        chunks.push_back({p, size});
        used = 0;
    }
    void* p = static_cast<uint8_t*>(chunks.back().p) + used;
    used += bytes;
    return p;
}

bool CudaBackend::CapturePool::owns(const void* p) const {
    const auto* q = static_cast<const uint8_t*>(p);
    for (const Chunk& c : chunks)
        if (q >= static_cast<const uint8_t*>(c.p) && q < static_cast<const uint8_t*>(c.p) + c.size) return true;
    return false;
}

void* CudaBackend::alloc_staging(size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
    DSV4_CHECK_MSG(e == cudaSuccess, "cannot allocate %zu bytes of pinned host memory (%s)", bytes,
                   cudaGetErrorName(e));
    return p;
}

void CudaBackend::free_staging(void* p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

void CudaBackend::branch() {
    if (!capture_pool_ || branch_depth_++ > 0 || open_branches_ == kSideStreams) return;
    const Side& sd = side_[open_branches_++];
    CUDA_CHECK(cudaEventRecord(sd.fork, main_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(sd.stream, sd.fork, 0));
    stream_ = sd.stream;
}

void CudaBackend::end_branch() {
    if (!capture_pool_) return;
    DSV4_CHECK_MSG(branch_depth_ > 0, "end_branch() without branch()");
    if (--branch_depth_ == 0) stream_ = main_stream_;
}

void CudaBackend::join() {
    if (!capture_pool_) return;
    DSV4_CHECK_MSG(branch_depth_ == 0, "join() inside a branch");
    for (int i = 0; i < open_branches_; ++i) {
        CUDA_CHECK(cudaEventRecord(side_[i].done, side_[i].stream));
        CUDA_CHECK(cudaStreamWaitEvent(main_stream_, side_[i].done, 0));
    }
    open_branches_ = 0;
}

void CudaBackend::tell_no_capture() {
    if (told_no_capture_) return;
    told_no_capture_ = true;
    std::fprintf(stderr,
                 "dsv4: a step graph needs about %.0f MiB of free GPU memory: steps of this shape run without one "
                 "(slower; fewer or shorter sequences leave room)\n",
                 capture_reserve_ / 1048576.0);
}

void* CudaBackend::capture(const std::function<void()>& issue) {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    if (free < capture_reserve_) {
        release_cache();  // synchronizes: not possible once capturing
        CUDA_CHECK(cudaMemGetInfo(&free, &total));
    }
    void* first = nullptr;
    if (free < capture_reserve_ || cudaMalloc(&first, kChunk) != cudaSuccess) {
        (void)cudaGetLastError();
        tell_no_capture();
        return nullptr;
    }
    auto g = std::make_unique<Graph>();
    g->pool.chunks.push_back({first, kChunk});
    capture_pool_ = &g->pool;
    // Relaxed: the pool may cudaMalloc a chunk while capturing.
    CUDA_CHECK(cudaStreamBeginCapture(main_stream_, cudaStreamCaptureModeRelaxed));
    issue();
    // A capture ends on the stream it began on, with every side stream joined back.
    DSV4_CHECK_MSG(branch_depth_ == 0, "a step ended inside a branch");
    join();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(main_stream_, &graph);
    capture_pool_ = nullptr;
    size_t pool_bytes = 0;
    for (const auto& c : g->pool.chunks) pool_bytes += c.size;
    capture_reserve_ = std::max(capture_reserve_, 2 * pool_bytes);
    if (g->pool.overflowed) tell_no_capture();
    if (e == cudaSuccess && graph && !g->pool.overflowed) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) CUDA_CHECK(cudaGraphDestroy(graph));
    if (e != cudaSuccess || !g->exec) {  // g frees the pool's memory
        (void)cudaGetLastError();
        g->exec = nullptr;
        return nullptr;
    }
    return g.release();
}

void CudaBackend::launch(void* graph) {
    CUDA_CHECK(cudaGraphLaunch(static_cast<Graph*>(graph)->exec, main_stream_));
}

void CudaBackend::destroy(void* graph) {
    delete static_cast<Graph*>(graph);
}

}  // namespace dsv4::cuda
