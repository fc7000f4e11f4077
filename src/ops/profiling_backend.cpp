#include "ops/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <type_traits>

namespace dsv4 {

namespace {

// Row counts fall into classes so decode (1 row), small batches and prefill chunks are told apart.
std::string rows_class(int64_t n) {
    if (n == 1) return "n=1";
    if (n <= 8) return "n<=8";
    if (n <= 64) return "n<=64";
    return "n>64";
}

}  // namespace

template <class Key, class F>
void ProfilingBackend::timed(Key&& key, double bytes, F&& call) {
    if (!enabled_) {
        call();
        return;
    }
    b_.synchronize();  // earlier queued work must not be charged to this op
    b_.clear_last_kernel();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    b_.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string k;
    if constexpr (std::is_invocable_v<Key>) {
        k = key();
    } else {
        k = key;
    }
    // The kernel the op chose, where the backend chooses between several (it names the one it ran last).
    const char* kernel = b_.last_kernel();
    if (kernel != nullptr) k += std::string(" [") + kernel + "]";
    OpProfileRow& r = rows_[k];
    r.key = k;
    r.calls += 1;
    r.seconds += dt;
    r.bytes += bytes;
}

std::vector<OpProfileRow> ProfilingBackend::rows() const {
    std::vector<OpProfileRow> out;
    for (const auto& [k, r] : rows_) out.push_back(r);
    std::sort(out.begin(), out.end(), [](const OpProfileRow& a, const OpProfileRow& b) { return a.seconds > b.seconds; });
    return out;
}

std::string ProfilingBackend::report(int64_t steps) const {
    const std::vector<OpProfileRow> rs = rows();
    double total = 0;
    for (const OpProfileRow& r : rs) total += r.seconds;
    const double per = steps > 0 ? (double)steps : 1.0;
    std::string s;
    char line[256];
    std::snprintf(line, sizeof line, "%-34s %9s %11s %6s %10s %9s\n", "op", "calls/step", "ms/step", "share",
                  "us/call", "GB/s");
    s += line;
    for (const OpProfileRow& r : rs) {
        const double gbs = r.bytes > 0 && r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0;
        std::snprintf(line, sizeof line, "%-34s %9.1f %11.3f %5.1f%% %10.1f %9s\n", r.key.c_str(), r.calls / per,
                      r.seconds * 1e3 / per, total > 0 ? 100.0 * r.seconds / total : 0.0,
                      r.calls ? r.seconds * 1e6 / r.calls : 0.0,
                      gbs > 0 ? std::to_string((int64_t)(gbs + 0.5)).c_str() : "-");
        s += line;
    }
    std::snprintf(line, sizeof line, "%-34s %9s %11.3f\n", "total (ops run one at a time)", "", total * 1e3 / per);
    s += line;
    return s;
}

void ProfilingBackend::upload(void* dst, const void* src, size_t bytes) {
    timed("upload", 0, [&] { b_.upload(dst, src, bytes); });
}
void ProfilingBackend::download(void* dst, const void* src, size_t bytes) {
    timed("download", 0, [&] { b_.download(dst, src, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, size_t bytes) {
    timed("copy", 0, [&] { b_.copy(dst, src, bytes); });
}
void ProfilingBackend::fill(float* dst, float value, int64_t n) {
    timed("fill", 0, [&] { b_.fill(dst, value, n); });
}
void ProfilingBackend::embed(float* out, const Weight& w, const int32_t* ids, int64_t n) {
    timed("embed", (double)n * (double)w.row_bytes, [&] { b_.embed(out, w, ids, n); });
}
void ProfilingBackend::matmul(float* y, int64_t y_stride, const float* x, int64_t x_stride, const Weight& w,
                              int64_t n) {
    auto key = [&] { return "matmul " + std::string(ggml_type_name(w.type)) + " " + rows_class(n); };
    timed(key, (double)w.rows * (double)w.row_bytes, [&] { b_.matmul(y, y_stride, x, x_stride, w, n); });
}

void ProfilingBackend::matmul_norm(float* y, int64_t y_stride, const float* x, int64_t x_stride, const float* norm,
                                   float eps, const Weight& w, int64_t n) {
    auto key = [&] { return "rms_norm+matmul " + std::string(ggml_type_name(w.type)) + " " + rows_class(n); };
    timed(key, (double)w.rows * (double)w.row_bytes,
          [&] { b_.matmul_norm(y, y_stride, x, x_stride, norm, eps, w, n); });
}

void ProfilingBackend::matmul_batch(std::span<const MatmulJob> jobs, int64_t n) {
    double bytes = 0;
    for (const MatmulJob& j : jobs) bytes += (double)j.w->rows * (double)j.w->row_bytes;
    auto key = [&] {
        std::string k = "matmul_batch";  // e.g. "matmul_batch 8xQ8_0 n=1"
        for (size_t a = 0; a < jobs.size(); ++a) {
            bool seen = false;
            for (size_t b = 0; b < a; ++b) seen |= jobs[b].w->type == jobs[a].w->type;
            if (seen) continue;
            int count = 0;
            for (const MatmulJob& j : jobs) count += j.w->type == jobs[a].w->type;
            k += ' ';
            k += std::to_string(count);
            k += 'x';
            k += ggml_type_name(jobs[a].w->type);
        }
        k += ' ';
        k += rows_class(n);
        return k;
    };
    timed(key, bytes, [&] { b_.matmul_batch(jobs, n); });
}
void ProfilingBackend::rms_norm(float* y, const float* x, const float* weight, int64_t n, int64_t dim,
                                int64_t stride, float eps) {
    timed("rms_norm", 0, [&] { b_.rms_norm(y, x, weight, n, dim, stride, eps); });
}
void ProfilingBackend::hc_pre(float* x, float* post, float* comb, const float* H, const Weight& fn, const float* scale,
                              const float* base, int64_t n, const HcParams& p, const HcPostArgs* first) {
    // The fused form under its own name: its time includes the hc_post's.
    timed(first ? "hc_post+hc_pre" : "hc_pre", 0, [&] { b_.hc_pre(x, post, comb, H, fn, scale, base, n, p, first); });
}
void ProfilingBackend::hc_pre_norm(float* x, float* post, float* comb, const float* H, const Weight& fn,
                                   const float* scale, const float* base, int64_t n, const HcParams& p,
                                   const HcPostArgs* first, const float* norm, float eps) {
    timed(first ? "hc_post+hc_pre+rms_norm" : "hc_pre+rms_norm", 0,
          [&] { b_.hc_pre_norm(x, post, comb, H, fn, scale, base, n, p, first, norm, eps); });
}
void ProfilingBackend::hc_post(const HcPostArgs& a, int64_t n, const HcParams& p) {
    timed("hc_post", 0, [&] { b_.hc_post(a, n, p); });
}
void ProfilingBackend::hc_head(float* y, const float* H, const Weight& fn, const float* scale, const float* base,
                               int64_t n, const HcParams& p) {
    timed("hc_head", 0, [&] { b_.hc_head(y, H, fn, scale, base, n, p); });
}
void ProfilingBackend::rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const int32_t* pos,
                            const RopeParams& r, bool inverse) {
    timed("rope", 0, [&] { b_.rope(x, n, n_heads, head_dim, stride, pos, r, inverse); });
}
void ProfilingBackend::fp8_sim(float* x, int64_t n, int64_t n_dims, int64_t stride, int block) {
    timed("fp8_sim", 0, [&] { b_.fp8_sim(x, n, n_dims, stride, block); });
}
void ProfilingBackend::norm_rope(float* x, int64_t n, int n_heads, int head_dim, int64_t stride, const float* weight,
                                 float eps, const int32_t* pos, const RopeParams& r, int fp8_block) {
    timed("norm_rope", 0, [&] { b_.norm_rope(x, n, n_heads, head_dim, stride, weight, eps, pos, r, fp8_block); });
}
void ProfilingBackend::hadamard(float* x, int64_t n, int dim, bool fp4_sim) {
    timed("hadamard", 0, [&] { b_.hadamard(x, n, dim, fp4_sim); });
}
void ProfilingBackend::compressor(const CompressorArgs& a) {
    timed("compressor", 0, [&] { b_.compressor(a); });
}
void ProfilingBackend::indexer_topk(int32_t* idx, const float* q, const float* w, const float* keys,
                                    const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k) {
    timed([&] { return "indexer_topk " + rows_class(n); }, 0,
          [&] { b_.indexer_topk(idx, q, w, keys, n_visible, n, n_heads, head_dim, top_k); });
}
void ProfilingBackend::attention(const AttentionArgs& a) {
    timed([&] { return "attention " + rows_class(a.n); }, 0, [&] { b_.attention(a); });
}
void ProfilingBackend::moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                                 const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k,
                                 float scale, bool norm) {
    timed("moe_route", 0, [&] { b_.moe_route(ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k, scale, norm); });
}
void ProfilingBackend::moe_experts(const MoeArgs& a) {
    // Bytes: when every (token, slot) pair picks a different expert, k*n experts' three matrices are read;
    // the count is an upper bound (shared picks read less).
    const double per_expert = (double)a.gate.rows * a.gate.row_bytes + (double)a.up.rows * a.up.row_bytes +
                              (double)a.down.rows * a.down.row_bytes;
    const double experts = (double)std::min<int64_t>(a.n * a.k, a.gate.n_experts);
    timed([&] { return "moe_experts " + rows_class(a.n); }, per_expert * experts, [&] { b_.moe_experts(a); });
}
void ProfilingBackend::swiglu(float* h, const float* g, const float* u, int64_t n, int64_t f, int64_t gu_stride,
                              float clamp) {
    timed("swiglu", 0, [&] { b_.swiglu(h, g, u, n, f, gu_stride, clamp); });
}
void ProfilingBackend::add(float* y, const float* a, const float* b, int64_t n) {
    timed("add", 0, [&] { b_.add(y, a, b, n); });
}
void ProfilingBackend::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t n,
                                 int64_t cols) {
    timed("copy_rows", 0, [&] { b_.copy_rows(dst, dst_stride, src, src_stride, n, cols); });
}
void ProfilingBackend::gather_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    timed("gather_rows", 0, [&] { b_.gather_rows(dst, src, idx, n, cols); });
}

void ProfilingBackend::scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t cols) {
    timed("scatter_rows", 0, [&] { b_.scatter_rows(dst, src, idx, n, cols); });
}

}  // namespace dsv4
