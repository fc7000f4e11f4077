#include "exec/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace dsv4 {

namespace {

// Row counts fall into classes so decode (1 row), small batches and prefill chunks are told apart.
std::string rows_class(int64_t n) {
    if (n == 1) return "n=1";
    if (n <= 8) return "n<=8";
    if (n <= 64) return "n<=64";
    return "n>64";
}

// What a timed call is filed under: its key and the weight bytes it had to read (0 when not known).
struct OpCost {
    std::string key;
    double bytes = 0;
};

// One tag type per op of the list, to pick an op's describe() overload.
namespace tag {
#define DSV4_OP(name, params, args, rec) struct name {};
#define DSV4_FUSED_OP(name, params, args, rec) struct name {};
#include "ops/op_list.h"
}  // namespace tag

// The ops described by more than their name; each has its own describe() below. The plain one refuses
// them, so an overload whose parameters drifted from the op's fails to compile instead of losing its key.
template <class Tag>
constexpr bool kDescribed = false;
template <>
constexpr bool kDescribed<tag::embed> = true;
template <>
constexpr bool kDescribed<tag::matmul> = true;
template <>
constexpr bool kDescribed<tag::matmul_norm> = true;
template <>
constexpr bool kDescribed<tag::matmul_batch> = true;
template <>
constexpr bool kDescribed<tag::hc_pre> = true;
template <>
constexpr bool kDescribed<tag::hc_pre_norm> = true;
template <>
constexpr bool kDescribed<tag::indexer_topk> = true;
template <>
constexpr bool kDescribed<tag::attention> = true;
template <>
constexpr bool kDescribed<tag::moe_experts> = true;

template <class Tag, class... A>
    requires(!kDescribed<Tag>)
OpCost describe(Tag, const char* name, const A&...) {
    return {name, 0};
}

double matrix_bytes(const Weight& w) { return (double)w.rows * (double)w.row_bytes; }

OpCost describe(tag::embed, const char*, float*, const Weight& w, const int32_t*, int64_t n) {
    return {"embed", (double)n * (double)w.row_bytes};
}

OpCost describe(tag::matmul, const char*, float*, int64_t, const float*, int64_t, const Weight& w, int64_t n) {
    return {"matmul " + std::string(ggml_type_name(w.type)) + " " + rows_class(n), matrix_bytes(w)};
}

OpCost describe(tag::matmul_norm, const char*, float*, int64_t, const float*, int64_t, const float*, float,
                const Weight& w, int64_t n) {
    return {"rms_norm+matmul " + std::string(ggml_type_name(w.type)) + " " + rows_class(n), matrix_bytes(w)};
}

OpCost describe(tag::matmul_batch, const char*, std::span<const MatmulJob> jobs, int64_t n) {
    OpCost c{"matmul_batch", 0};  // e.g. "matmul_batch 8xQ8_0 n=1"
    for (const MatmulJob& j : jobs) c.bytes += matrix_bytes(*j.w);
    for (size_t a = 0; a < jobs.size(); ++a) {
        bool seen = false;
        for (size_t b = 0; b < a; ++b) seen |= jobs[b].w->type == jobs[a].w->type;
        if (seen) continue;
        int count = 0;
        for (const MatmulJob& j : jobs) count += j.w->type == jobs[a].w->type;
        c.key += ' ';
        c.key += std::to_string(count);
        c.key += 'x';
        c.key += ggml_type_name(jobs[a].w->type);
    }
    c.key += ' ';
    c.key += rows_class(n);
    return c;
}

// The fused forms under their own names: their time includes the hc_post's (and the norm's).
OpCost describe(tag::hc_pre, const char*, float*, float*, float*, const float*, const Weight&, const float*,
                const float*, int64_t, const HcParams&, const HcPostArgs* first) {
    return {first ? "hc_post+hc_pre" : "hc_pre", 0};
}

OpCost describe(tag::hc_pre_norm, const char*, float*, float*, float*, const float*, const Weight&, const float*,
                const float*, int64_t, const HcParams&, const HcPostArgs* first, const float*, float) {
    return {first ? "hc_post+hc_pre+rms_norm" : "hc_pre+rms_norm", 0};
}

OpCost describe(tag::indexer_topk, const char*, int32_t*, const float*, const float*, const float*, const int32_t*,
                int64_t n, int, int, int, const float* const*, bool fp4_keys) {
    return {std::string(fp4_keys ? "indexer_topk fp4 " : "indexer_topk ") + rows_class(n), 0};
}

// Named by what a query attends to, so a profile at depth tells the layer kinds apart: the window alone, the
// window and entries picked by index lists (CSA), or the window and every compressed entry (HCA).
OpCost describe(tag::attention, const char*, const AttentionArgs& a) {
    const char* kind = !a.kv_comp ? "window " : a.comp_idx ? "indexed " : "all-compressed ";
    return {std::string("attention ") + kind + rows_class(a.n), 0};
}

OpCost describe(tag::moe_experts, const char*, const MoeArgs& a) {
    // Bytes: when every (token, slot) pair picks a different expert, k*n experts' three matrices are read;
    // the count is an upper bound (shared picks read less).
    const double per_expert = matrix_bytes(a.gate) + matrix_bytes(a.up) + matrix_bytes(a.down);
    const double experts = (double)std::min<int64_t>(a.n * a.k, a.gate.n_experts);
    return {"moe_experts " + rows_class(a.n), per_expert * experts};
}

}  // namespace

template <class Describe, class F>
void ProfilingBackend::timed(Describe&& describe, F&& call) {
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
    OpCost c = describe();
    std::string k = std::move(c.key);
    // The kernel the op chose, where the backend chooses between several (it names the one it ran last).
    const char* kernel = b_.last_kernel();
    if (kernel != nullptr) k += std::string(" [") + kernel + "]";
    OpProfileRow& r = rows_[k];
    r.key = k;
    r.calls += 1;
    r.seconds += dt;
    r.bytes += c.bytes;
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
    timed([] { return OpCost{"upload"}; }, [&] { b_.upload(dst, src, bytes); });
}
void ProfilingBackend::download(void* dst, const void* src, size_t bytes) {
    timed([] { return OpCost{"download"}; }, [&] { b_.download(dst, src, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, size_t bytes) {
    timed([] { return OpCost{"copy"}; }, [&] { b_.copy(dst, src, bytes); });
}
void ProfilingBackend::fill(float* dst, float value, int64_t n) {
    timed([] { return OpCost{"fill"}; }, [&] { b_.fill(dst, value, n); });
}

// Every op: timed under describe(); its argument list once more without the parentheses.
#define DSV4_PROFILE_ARGS(...) __VA_ARGS__
#define DSV4_OP(name, params, args, rec)                                                      \
    void ProfilingBackend::name params {                                                      \
        timed([&] { return describe(tag::name{}, #name, DSV4_PROFILE_ARGS args); }, [&] { b_.name args; }); \
    }
#define DSV4_FUSED_OP(name, params, args, rec) DSV4_OP(name, params, args, rec)
#include "ops/op_list.h"
#undef DSV4_PROFILE_ARGS

}  // namespace dsv4
