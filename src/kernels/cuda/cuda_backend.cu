// CUDA backend: device selection, memory (a caching allocator over cudaMalloc, resident weights), the IQ
// lookup tables uploaded once from the host codecs' arrays, and host<->device transfers.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "core/check.h"
#include "format/quant_codecs.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsv4 {

bool cuda_device_available() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // no driver or no device: not an error for the caller, just "no"
        return false;
    }
    return n > 0;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaOptions& options) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return make_error(std::string("no CUDA device: ") + cudaGetErrorString(e));
    }
    if (device < 0 || device >= n)
        return make_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                          " found)");
    const cudaError_t s = cudaSetDevice(device);
    if (s != cudaSuccess) {
        (void)cudaGetLastError();
        return make_error("cannot use CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(s));
    }
    return std::unique_ptr<Backend>(new cuda::CudaBackend(device, options));
}

std::optional<GemmPrecision> cuda_gemm_precision(const Backend& b) {
    const auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
    if (!c) return std::nullopt;
    return c->gemm_precision();
}

bool set_cuda_gemm_precision(Backend& b, GemmPrecision p) {
    auto* c = dynamic_cast<cuda::CudaBackend*>(&b);
    if (!c) return false;
    c->set_gemm_precision(p);
    return true;
}

bool set_cuda_kernel_force(Backend& b, std::string_view op, std::string_view kernel) {
    auto* c = dynamic_cast<cuda::CudaBackend*>(&b);
    return c && set_kernel_force(c->force(), op, kernel);
}

namespace cuda {

namespace {

// Allocation granularity of the cache: small enough not to waste, large enough to keep 16-byte (and
// cudaMalloc's 256-byte) alignment for every block handed out.
constexpr size_t kGranule = 256;

size_t round_up(size_t bytes) { return (std::max<size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule; }

}  // namespace

CudaBackend::CudaBackend(int device, const CudaOptions& options)
    : device_(device), skip_ops_(options.skip_ops), force_(options.force), gemm_precision_(options.gemm) {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&main_stream_, cudaStreamNonBlocking));
    stream_ = main_stream_;
    for (Side& sd : side_) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&sd.stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&sd.fork, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&sd.done, cudaEventDisableTiming));
    }

    // One buffer holds every lookup table; QuantTables points into it.
    using namespace dsv4::quant;
    // The bf16 decoder's IQ2_XXS selectors (QuantTables::iq2xxs_sel): grid byte b (8, 25 or 43) is code b >> 4,
    // whose bf16 sits at bytes 2 code, 2 code + 1 of the decoder's 8-byte value pool.
    uint64_t iq2xxs_sel[256];
    for (int e = 0; e < 256; ++e) {
        uint64_t sel = 0;
        for (int j = 0; j < 8; ++j) {
            const uint64_t code = ((kIq2xxsGrid[e] >> (8 * j)) & 0xFF) >> 4;
            sel |= ((2 * code) | (2 * code + 1) << 4) << (8 * j);
        }
        iq2xxs_sel[e] = sel;
    }
    struct Part {
        const void* src;
        size_t bytes;
    };
    const Part parts[] = {
        {kIq2xxsGrid, sizeof(kIq2xxsGrid)}, {kIq2xsGrid, sizeof(kIq2xsGrid)},     {kIq2sGrid, sizeof(kIq2sGrid)},
        {kIq3xxsGrid, sizeof(kIq3xxsGrid)}, {kIq3sGrid, sizeof(kIq3sGrid)},       {kIq1sGrid, sizeof(kIq1sGrid)},
        {kSigns.v, sizeof(kSigns.v)},       {kIq4nlValues, sizeof(kIq4nlValues)}, {kMxfp4Values, sizeof(kMxfp4Values)},
        {iq2xxs_sel, sizeof(iq2xxs_sel)},
    };
    size_t offsets[std::size(parts)];
    size_t total = 0;
    for (size_t i = 0; i < std::size(parts); ++i) {
        offsets[i] = total;
        total += (parts[i].bytes + 15) / 16 * 16;
    }
    std::vector<uint8_t> host(total, 0);
    for (size_t i = 0; i < std::size(parts); ++i) std::memcpy(host.data() + offsets[i], parts[i].src, parts[i].bytes);
    CUDA_CHECK(cudaMalloc(&tables_mem_, total));
    // Every copy goes through stream_: a copy on the legacy stream would not be ordered before the kernels
    // of this non-blocking stream.
    CUDA_CHECK(cudaMemcpyAsync(tables_mem_, host.data(), total, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const uint8_t* base = static_cast<const uint8_t*>(tables_mem_);
    tables_.iq2xxs = reinterpret_cast<const uint64_t*>(base + offsets[0]);
    tables_.iq2xs = reinterpret_cast<const uint64_t*>(base + offsets[1]);
    tables_.iq2s = reinterpret_cast<const uint64_t*>(base + offsets[2]);
    tables_.iq3xxs = reinterpret_cast<const uint32_t*>(base + offsets[3]);
    tables_.iq3s = reinterpret_cast<const uint32_t*>(base + offsets[4]);
    tables_.iq1s = reinterpret_cast<const uint64_t*>(base + offsets[5]);
    tables_.signs = base + offsets[6];
    tables_.iq4nl = reinterpret_cast<const int8_t*>(base + offsets[7]);
    tables_.mxfp4 = reinterpret_cast<const int8_t*>(base + offsets[8]);
    tables_.iq2xxs_sel = reinterpret_cast<const uint64_t*>(base + offsets[9]);
}

CudaBackend::~CudaBackend() {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    release_cublas();
    release_cache();
    for (auto& [p, size] : live_) CUDA_CHECK(cudaFree(p));
    for (void* p : weights_) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(tables_mem_));
    for (Side& sd : side_) {
        CUDA_CHECK(cudaEventDestroy(sd.fork));
        CUDA_CHECK(cudaEventDestroy(sd.done));
        CUDA_CHECK(cudaStreamDestroy(sd.stream));
    }
    CUDA_CHECK(cudaStreamDestroy(main_stream_));
}

size_t CudaBackend::memory_free() const {
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    for (const auto& [size, p] : cache_) free += size;  // kept for reuse, ours to hand out again
    return free;
}

void CudaBackend::release_cache() {
    for (auto& [size, p] : cache_) CUDA_CHECK(cudaFree(p));
    cache_.clear();
}

void* CudaBackend::alloc(size_t bytes) {
    if (capture_pool_) return capture_pool_->get(round_up(bytes));
    const size_t size = round_up(bytes);
    // Reuse a freed block of the same size or up to a quarter larger (steps repeat the same shapes).
    auto it = cache_.lower_bound(size);
    if (it != cache_.end() && it->first <= size + size / 4) {
        void* p = it->second;
        live_[p] = it->first;
        cache_.erase(it);
        return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        release_cache();
        e = cudaMalloc(&p, size);
    }
    DSV4_CHECK_MSG(e == cudaSuccess, "out of GPU memory allocating %zu bytes on CUDA device %d (%s)", bytes, device_,
                   cudaGetErrorName(e));
    live_[p] = size;
    return p;
}

void CudaBackend::free(void* p) {
    if (!p) return;
    if (capture_pool_ && capture_pool_->owns(p)) return;  // the graph's own memory
    auto it = live_.find(p);
    DSV4_CHECK_MSG(it != live_.end(), "CUDA backend: free of %p, which this backend did not allocate", p);
    cache_.emplace(it->second, p);
    live_.erase(it);
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
    // From pageable host memory the copy is staged before the call returns, so `src` may be freed at once.
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
    ++host_waits_;
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() {
    ++host_waits_;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

const uint8_t* CudaBackend::weight_data(const uint8_t* host_bytes, size_t n_bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n_bytes, 1));
    DSV4_CHECK_MSG(e == cudaSuccess, "out of GPU memory uploading a %zu-byte weight to CUDA device %d (%s)", n_bytes,
                   device_, cudaGetErrorName(e));
    if (n_bytes) CUDA_CHECK(cudaMemcpyAsync(p, host_bytes, n_bytes, cudaMemcpyHostToDevice, stream_));
    weights_.push_back(p);
    return static_cast<const uint8_t*>(p);
}

}  // namespace cuda
}  // namespace dsv4
