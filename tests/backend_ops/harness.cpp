// The conformance test's shared pieces: backend buffers, the NMSE metric, random inputs and random weights
// of every block format.
#include "harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "format/quant.h"
#if defined(DSV4_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace dsv4::backend_ops {

namespace {
CaseFilter g_filter;
}  // namespace

void set_case_filter(const CaseFilter& f) { g_filter = f; }

bool case_wanted(const Case& c) {
    return (g_filter.op.empty() || c.op == g_filter.op) &&
           (g_filter.shape.empty() || c.shape.find(g_filter.shape) != std::string::npos) &&
           (!c.perf_only || g_filter.perf);
}

ScopedMode::ScopedMode(Backend& b, Mode mode) : b_(b) {
#if defined(DSV4_HAVE_CUDA)
    if (const auto old = cuda_gemm_precision(b)) {
        restore_ = *old == GemmPrecision::BF16 ? Mode::BF16 : Mode::F32;
        set_cuda_gemm_precision(b, mode == Mode::BF16 ? GemmPrecision::BF16 : GemmPrecision::F32);
        active_ = true;
    }
#else
    (void)mode;
#endif
}

ScopedMode::~ScopedMode() {
#if defined(DSV4_HAVE_CUDA)
    if (active_) set_cuda_gemm_precision(b_, restore_ == Mode::BF16 ? GemmPrecision::BF16 : GemmPrecision::F32);
#endif
}

float* Dev::f32(const std::vector<float>& host) {
    void* p = b_.alloc(std::max<size_t>(host.size(), 1) * sizeof(float));
    ptrs_.push_back(p);
    if (!host.empty()) b_.upload(p, host.data(), host.size() * sizeof(float));
    return static_cast<float*>(p);
}

float* Dev::f32_out(int64_t n) {
    void* p = b_.alloc((size_t)std::max<int64_t>(n, 1) * sizeof(float));
    ptrs_.push_back(p);
    b_.fill(static_cast<float*>(p), std::numeric_limits<float>::quiet_NaN(), n);
    return static_cast<float*>(p);
}

void* Dev::bytes(size_t n) {
    void* p = b_.alloc(std::max<size_t>(n, 1));
    ptrs_.push_back(p);
    return p;
}

float* const* Dev::rows(float* base, int64_t n, int64_t stride) {
    std::vector<float*> host((size_t)n);
    for (int64_t i = 0; i < n; ++i) host[i] = base + i * stride;
    void* p = bytes(host.size() * sizeof(float*));
    b_.upload(p, host.data(), host.size() * sizeof(float*));
    return static_cast<float* const*>(p);
}

int32_t* Dev::i32(const std::vector<int32_t>& host) {
    void* p = b_.alloc(std::max<size_t>(host.size(), 1) * sizeof(int32_t));
    ptrs_.push_back(p);
    if (!host.empty()) b_.upload(p, host.data(), host.size() * sizeof(int32_t));
    return static_cast<int32_t*>(p);
}

int32_t* Dev::i32_out(int64_t n) { return i32(std::vector<int32_t>((size_t)std::max<int64_t>(n, 1), -777)); }

Array Dev::get(const float* p, int64_t n, int64_t cols, int64_t stride) {
    if (stride == 0) stride = cols;
    std::vector<float> host((size_t)(n > 0 ? (n - 1) * stride + cols : 0));
    if (!host.empty()) b_.download(host.data(), p, host.size() * sizeof(float));
    Array out;
    out.reserve((size_t)(n * cols));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < cols; ++c) out.push_back(host[(size_t)(i * stride + c)]);
    return out;
}

Array Dev::get_i(const int32_t* p, int64_t n) {
    std::vector<int32_t> host((size_t)n);
    if (n > 0) b_.download(host.data(), p, host.size() * sizeof(int32_t));
    return Array(host.begin(), host.end());
}

double nmse(const Array& got, const Array& want) {
    if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
        if (std::isnan(got[i]) || got[i] == want[i]) continue;  // equal infinities (e.g. empty state) agree
        if (std::isinf(got[i]) || std::isinf(want[i])) return std::numeric_limits<double>::infinity();
        const double d = got[i] - want[i];
        err += d * d;
    }
    for (double w : want)
        if (std::isfinite(w)) ref += w * w;
    return ref > 0 ? err / ref : err;
}

std::vector<float> Rng::vec(int64_t n, float lo, float hi) {
    std::vector<float> v((size_t)n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
}

namespace {

void put_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
}

// Offsets of the f16 scale fields in each block format's block (the rest of a block is free bits).
std::vector<int> f16_fields(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:
        case GgmlType::Q8_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q2_K: return {80, 82};
        case GgmlType::Q3_K: return {108};
        case GgmlType::Q6_K: return {208};
        case GgmlType::TQ1_0: return {52};
        case GgmlType::TQ2_0: return {64};
        case GgmlType::Q8_K:
        case GgmlType::MXFP4:
        case GgmlType::IQ1_M: return {};
        default: return {0};
    }
}

}  // namespace

std::vector<uint8_t> random_weight(GgmlType t, int64_t rows, int64_t cols, Rng& rng) {
    const GgmlTypeTraits& tr = ggml_traits(t);
    const size_t row_bytes = ggml_row_bytes(tr, cols);
    std::vector<uint8_t> bytes(row_bytes * (size_t)rows);
    const int64_t n = rows * cols;
    switch (t) {
        case GgmlType::F32:
            for (int64_t i = 0; i < n; ++i) {
                const float v = rng.uniform(-1, 1);
                std::memcpy(&bytes[4 * i], &v, 4);
            }
            return bytes;
        case GgmlType::F64:
            for (int64_t i = 0; i < n; ++i) {
                const double v = rng.uniform(-1, 1);
                std::memcpy(&bytes[8 * i], &v, 8);
            }
            return bytes;
        case GgmlType::F16:
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const float v = rng.uniform(-1, 1);
                const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
                std::memcpy(&bytes[2 * i], &h, 2);
            }
            return bytes;
        default: break;
    }
    for (size_t i = 0; i < bytes.size(); i += 8) {
        const uint64_t r = rng.engine()();
        std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
    }
    const size_t n_blocks = bytes.size() / tr.block_bytes;
    for (size_t bi = 0; bi < n_blocks; ++bi) {
        uint8_t* blk = bytes.data() + bi * tr.block_bytes;
        for (int off : f16_fields(t)) put_f16(blk + off, rng.uniform(0.002f, 0.05f));
        if (t == GgmlType::Q8_K) {
            const float d = rng.uniform(0.001f, 0.01f);
            std::memcpy(blk, &d, 4);
        } else if (t == GgmlType::MXFP4) {
            blk[0] = (uint8_t)rng.uniform_int(118, 130);  // 2^-10 .. 2^2
        } else if (t == GgmlType::IQ1_M) {
            // The f16 scale is spread over the top nibbles of the four scale words (bytes 48..55).
            const uint16_t d16 = f32_to_f16(rng.uniform(0.002f, 0.05f));
            for (int w = 0; w < 4; ++w) {
                uint8_t* hi = blk + 48 + 2 * w + 1;
                *hi = (uint8_t)((*hi & 0x0F) | (((d16 >> (4 * w)) & 0x0F) << 4));
            }
        }
    }
    return bytes;
}

std::vector<float> dequant_weight(GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
    const size_t row_bytes = ggml_row_bytes(ggml_traits(t), cols);
    std::vector<float> out((size_t)(rows * cols));
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t, bytes.data() + r * row_bytes, out.data() + r * cols, cols);
    return out;
}

Weight make_weight(Backend& b, GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                   int64_t n_experts) {
    Weight w;
    w.type = t;
    w.cols = cols;
    w.rows = rows;
    w.n_experts = n_experts;
    w.row_bytes = ggml_row_bytes(ggml_traits(t), cols);
    w.data = b.weight_data(bytes.data(), bytes.size());
    w.name = "test";
    return w;
}

Array moe_experts_reference(GgmlType tg, GgmlType td, const std::vector<uint8_t>& gate, const std::vector<uint8_t>& up,
                            const std::vector<uint8_t>& down, const std::vector<float>& x,
                            const std::vector<int32_t>& ids, const std::vector<float>& wts, int64_t n, int E, int k,
                            int64_t D, int64_t F, float clamp) {
    const std::vector<float> g = dequant_weight(tg, gate, (int64_t)E * F, D);
    const std::vector<float> u = dequant_weight(tg, up, (int64_t)E * F, D);
    const std::vector<float> dn = dequant_weight(td, down, (int64_t)E * D, F);
    Array out((size_t)(n * D), 0.0);
    std::vector<double> h((size_t)F);
    for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < k; ++j) {
            const int64_t e = ids[i * k + j];
            for (int64_t f = 0; f < F; ++f) {
                double gv = 0, uv = 0;
                for (int64_t q = 0; q < D; ++q) {
                    gv += (double)g[(e * F + f) * D + q] * x[i * D + q];
                    uv += (double)u[(e * F + f) * D + q] * x[i * D + q];
                }
                if (clamp > 0) {
                    gv = std::min<double>(gv, clamp);
                    uv = std::clamp<double>(uv, -clamp, clamp);
                }
                h[f] = gv / (1 + std::exp(-gv)) * uv * wts[i * k + j];
            }
            for (int64_t q = 0; q < D; ++q) {
                double s = 0;
                for (int64_t f = 0; f < F; ++f) s += (double)dn[(e * D + q) * F + f] * h[f];
                out[i * D + q] += s;
            }
        }
    return out;
}

std::vector<GgmlType> weight_types() {
    return {GgmlType::F32,    GgmlType::F16,     GgmlType::BF16,   GgmlType::F64,     GgmlType::Q4_0,
            GgmlType::Q4_1,   GgmlType::Q5_0,    GgmlType::Q5_1,   GgmlType::Q8_0,    GgmlType::Q8_1,
            GgmlType::MXFP4,  GgmlType::IQ4_NL,  GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,
            GgmlType::Q5_K,   GgmlType::Q6_K,    GgmlType::Q8_K,   GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
            GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::IQ1_S,   GgmlType::IQ1_M,
            GgmlType::IQ4_XS, GgmlType::TQ1_0,   GgmlType::TQ2_0};
}

int64_t cols_for(GgmlType t, int blocks, int64_t plain) {
    const int64_t be = ggml_traits(t).block_elems;
    return be == 1 ? plain : be * blocks;
}

uint64_t case_seed(uint64_t base, const std::string& name) {
    uint64_t h = 1469598103934665603ull ^ base;  // FNV-1a over the name, keyed by the base seed
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
}

}  // namespace dsv4::backend_ops
