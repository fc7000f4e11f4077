// CUDA step graphs: a recorded step (ops/step_graphs.h) is captured from the backend's stream into a CUDA
// graph and replayed with one launch. Uploads in it copy from pinned staging memory, so a replay reads the
// values written there for the current step.
#include <algorithm>
#include <memory>

#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4::cuda {

namespace {

constexpr size_t kChunk = size_t(4) << 20;

struct Graph {
    cudaGraphExec_t exec = nullptr;
    CudaBackend::CapturePool pool;
};

}  // namespace

void* CudaBackend::CapturePool::get(size_t bytes) {
    if (chunks.empty() || used + bytes > cap) {
        const size_t size = std::max(kChunk, bytes);
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, size);
        DSV4_CHECK_MSG(e == cudaSuccess, "out of GPU memory allocating %zu bytes for a step graph (%s)", size,
                       cudaGetErrorName(e));
        chunks.push_back(p);
        sizes.push_back(size);
        used = 0;
        cap = size;
    }
    void* p = static_cast<uint8_t*>(chunks.back()) + used;
    used += bytes;
    return p;
}

bool CudaBackend::CapturePool::owns(const void* p) const {
    const auto* q = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < chunks.size(); ++i) {
        const auto* c = static_cast<const uint8_t*>(chunks[i]);
        if (q >= c && q < c + sizes[i]) return true;
    }
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

void* CudaBackend::capture(const std::function<void()>& issue) {
    auto g = std::make_unique<Graph>();
    capture_pool_ = &g->pool;
    // Relaxed: the pool may cudaMalloc a chunk while capturing.
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    issue();
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    capture_pool_ = nullptr;
    if (e != cudaSuccess || !graph) {
        (void)cudaGetLastError();
        for (void* p : g->pool.chunks) CUDA_CHECK(cudaFree(p));
        return nullptr;
    }
    const cudaError_t ie = cudaGraphInstantiate(&g->exec, graph, 0);
    CUDA_CHECK(cudaGraphDestroy(graph));
    if (ie != cudaSuccess) {
        (void)cudaGetLastError();
        for (void* p : g->pool.chunks) CUDA_CHECK(cudaFree(p));
        return nullptr;
    }
    return g.release();
}

void CudaBackend::launch(void* graph) { CUDA_CHECK(cudaGraphLaunch(static_cast<Graph*>(graph)->exec, stream_)); }

void CudaBackend::destroy(void* graph) {
    auto* g = static_cast<Graph*>(graph);
    CUDA_CHECK(cudaGraphExecDestroy(g->exec));
    for (void* p : g->pool.chunks) CUDA_CHECK(cudaFree(p));
    delete g;
}

}  // namespace dsv4::cuda
