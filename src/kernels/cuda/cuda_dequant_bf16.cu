// The conformance test's window on the bf16 decoders (cuda_dequant_bf16.cuh): a weight's rows decoded by
// Bf16Run with the run lengths the tensor-core kernels use, so the test can check them bit for bit against
// the CPU codecs rounded to bf16.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant_bf16.cuh"

namespace dsv4 {

namespace cuda {
namespace {

// out[r * K + k] = bf16 bits of value k of row r: a thread per run of V values (V = 8 on plain types).
template <GgmlType T, int V>
__global__ void decode_runs_kernel(uint32_t* out, const uint8_t* w, size_t row_bytes, int64_t K, int64_t rows,
                                   QuantTables tb) {
    const int64_t runs = K / V;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * runs;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / runs, i = t % runs;
        uint32_t v[V / 2];
        decode_run_bf16<T, V>(w + (size_t)r * row_bytes, i, K, v, tb);
#pragma unroll
        for (int j = 0; j < V / 2; ++j) out[(r * K + V * i) / 2 + j] = v[j];
    }
}

}  // namespace
}  // namespace cuda

bool cuda_decode_weight_bf16(Backend& b, const Weight& w, int run, std::vector<uint16_t>* out) {
    auto* c = dynamic_cast<cuda::CudaBackend*>(&b);
    if (!c || w.cols % 8 != 0) return false;
    bool ok = false;
    uint32_t* d = static_cast<uint32_t*>(c->alloc((size_t)(w.rows * w.cols) * 2));
    cuda::dispatch_weight_type(w.type, [&](auto tag) {
        constexpr GgmlType T = decltype(tag)::type;
        constexpr int kElems = cuda::Dq<T>::kElems;
        auto launch = [&](auto v) {
            constexpr int V = decltype(v)::value;
            if constexpr ((kElems == 1 && V == 8) || (kElems > 1 && kElems % V == 0)) {
                cuda::decode_runs_kernel<T, V><<<cuda::grid_for(w.rows * (w.cols / V), 256), 256, 0, c->stream()>>>(
                    d, w.data, w.row_bytes, w.cols, w.rows, c->tables());
                CUDA_CHECK_LAUNCH();
                ok = true;
            }
        };
        if (run == 8) launch(std::integral_constant<int, 8>{});
        if (run == 16) launch(std::integral_constant<int, 16>{});
        if (run == 32) launch(std::integral_constant<int, 32>{});
    });
    if (ok) {
        out->resize((size_t)(w.rows * w.cols));
        c->download(out->data(), d, out->size() * 2);
    }
    c->free(d);
    return ok;
}

}  // namespace dsv4
