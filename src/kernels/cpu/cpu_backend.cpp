// CPU backend: memory and the element-wise / per-row ops (norms, RoPE, fake quantizers, Hadamard, SwiGLU).
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/check.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"
#include "ops/numerics.h"

namespace dsv4 {

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

size_t CpuBackend::memory_free() const {
    // MemAvailable: what the kernel can hand out without swapping (free memory plus reclaimable caches, which
    // include the pages of a memory-mapped model file); the free page count where it is missing.
    std::ifstream f("/proc/meminfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("MemAvailable:", 0) == 0) return (size_t)std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
}

void* CpuBackend::alloc(size_t bytes) {
    size_t sz = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, sz);
    DSV4_CHECK_MSG(p != nullptr, "out of host memory allocating %zu bytes", bytes);
    return p;
}
void CpuBackend::free(void* p) { std::free(p); }
void CpuBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuBackend::fill(float* dst, float value, int64_t n) { std::fill(dst, dst + n, value); }

void CpuBackend::rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim, int64_t stride,
                          float eps) {
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const float* xi = x + i * stride;
            float* yi = y + i * stride;
            double ss = 0;  // accumulate in double: the oracle's norm should not depend on the summation order
            for (int64_t j = 0; j < dim; ++j) ss += (double)xi[j] * xi[j];
            const float r = 1.0f / std::sqrt((float)(ss / (double)dim) + eps);
            for (int64_t j = 0; j < dim; ++j) yi[j] = weight ? weight[j] * (xi[j] * r) : xi[j] * r;
        }
    });
}

void CpuBackend::rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                      const RopeParams& r, bool inverse) {
    const int half = r.rope_dim / 2;
    const int off = head_dim - r.rope_dim;
    pool_.parallel_for(n, 8, [&](int64_t b, int64_t e, int) {
        std::vector<float> cs(half), sn(half);
        for (int64_t i = b; i < e; ++i) {
            const float p = (float)pos[i];
            for (int t = 0; t < half; ++t) {
                const float ang = p * r.freqs[t];
                cs[t] = std::cos(ang);
                sn[t] = inverse ? -std::sin(ang) : std::sin(ang);
            }
            for (int h = 0; h < n_heads; ++h) {
                float* v = x + i * stride + (int64_t)h * head_dim + off;
                for (int t = 0; t < half; ++t) {
                    const float a = v[2 * t], c = v[2 * t + 1];
                    v[2 * t] = a * cs[t] - c * sn[t];
                    v[2 * t + 1] = a * sn[t] + c * cs[t];
                }
            }
        }
    });
}

void CpuBackend::fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) {
    // The reference needs n_dims to be a multiple of the block; a file that is not gets a short last block
    // rather than a crash.
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            for (int64_t j = 0; j < n_dims; j += block)
                fake_quant_block(x + i * stride + j, (int)std::min<int64_t>(block, n_dims - j), false);
    });
}

void CpuBackend::hadamard(float* x, int64_t n, int dim, bool fp4_sim) {
    DSV4_CHECK(dim > 0 && (dim & (dim - 1)) == 0);
    const float scale = 1.0f / std::sqrt((float)dim);
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            float* v = x + i * dim;
            // Fast Walsh-Hadamard transform in Sylvester order: H_2n = [[H, H], [H, -H]].
            for (int len = 1; len < dim; len <<= 1)
                for (int s = 0; s < dim; s += 2 * len)
                    for (int j = s; j < s + len; ++j) {
                        const float a = v[j], c = v[j + len];
                        v[j] = a + c;
                        v[j + len] = a - c;
                    }
            for (int j = 0; j < dim; ++j) v[j] *= scale;
            if (fp4_sim)
                for (int j = 0; j < dim; j += 32) fake_quant_block(v + j, std::min(32, dim - j), true);
        }
    });
}

void CpuBackend::swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                        float clamp) {
    pool_.parallel_for(n, 4, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            for (int64_t j = 0; j < f; ++j) {
                float gv = g[i * gu_stride + j], uv = u[i * gu_stride + j];
                if (clamp > 0) {
                    gv = std::min(gv, clamp);
                    uv = std::min(std::max(uv, -clamp), clamp);
                }
                h[i * f + j] = gv / (1.0f + std::exp(-gv)) * uv;
            }
    });
}

void CpuBackend::add(float* y, const float* a, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void CpuBackend::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                           int64_t cols) {
    for (int64_t i = 0; i < n; ++i) std::memmove(dst + i * dst_stride, src + i * src_stride, cols * sizeof(float));
}

void CpuBackend::gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * cols, src + (int64_t)idx[i] * cols, cols * sizeof(float));
}

void CpuBackend::scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    for (int64_t i = 0; i < n; ++i)
        if (idx[i] >= 0) std::memcpy(dst + (int64_t)idx[i] * cols, src + i * cols, cols * sizeof(float));
}

void CpuBackend::all_reduce_sum(float* x, int64_t n) {
    if (collective_) collective_->all_reduce_sum(x, n);
}

void CpuBackend::scatter_rows_to(float* const* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    for (int64_t i = 0; i < n; ++i)
        if (idx[i] >= 0) std::memcpy(dst[i] + (int64_t)idx[i] * cols, src + i * cols, cols * sizeof(float));
}

void CpuBackend::pack_fp4_rows(float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n,
                               int dim) {
    DSV4_CHECK_MSG(dim > 0 && dim % kFp4Block == 0, "pack_fp4_rows: %d values a row is not a whole number of blocks",
                   dim);
    const int64_t rf = fp4_row_floats(dim);
    for (int64_t i = 0; i < n; ++i)
        if (idx[i] >= 0)
            fp4_pack_row(src + i * dim, dim, reinterpret_cast<uint8_t*>((dst_rows ? dst_rows[i] : dst) + idx[i] * rf));
}

void CpuBackend::pack_kv_rows(float* dst, float* const* dst_rows, const float* src, const int32_t* idx, int64_t n,
                              int dim, int rope) {
    DSV4_CHECK_MSG(dim > rope && rope >= 0, "pack_kv_rows: %d RoPE dims of %d", rope, dim);
    const int64_t rf = kv_row_floats(dim, rope);
    for (int64_t i = 0; i < n; ++i)
        if (idx[i] >= 0)
            kv_pack_row(src + i * dim, dim, rope, reinterpret_cast<uint8_t*>((dst_rows ? dst_rows[i] : dst) + idx[i] * rf));
}

}  // namespace dsv4
