// The op conformance test's harness: a case runs one Backend op on inputs it owns, on any backend, and
// reads its outputs back; the runner compares CUDA with the CPU oracle (and the CPU with a double-precision
// reference) by normalized MSE, and in --perf mode times the op. No GoogleTest: the GPU machine lacks it.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/ggml_type.h"
#include "ops/backend.h"

namespace dsv4::backend_ops {

using Array = std::vector<double>;
using Arrays = std::vector<Array>;

// Unit roundoff of f32: every tolerance below is a multiple of u^2 (NMSE is a squared relative error).
constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr double kU2 = kU * kU;
// A few roundings per element (relative error <= 4u): NMSE <= (4u)^2.
constexpr double kTolElem = 16 * kU2;
// Element-wise transcendentals (expf/sinf/log1pf: CUDA <= 2 ulp, glibc <= 1 ulp) plus a few roundings:
// relative error <= 8u, NMSE <= (8u)^2.
constexpr double kTolTransc = 64 * kU2;
// A dot product of k terms in any summation order: with random-sign terms the expected squared relative
// error of one f32 sum is about u^2 k / 2; two independent sums (backend vs oracle), 16x margin.
inline double tol_dot(double k) { return 16 * kU2 * k; }

// Backend buffers of one case; freed with the object.
class Dev {
public:
    explicit Dev(Backend& b) : b_(b) {}
    ~Dev() {
        for (void* p : ptrs_) b_.free(p);
    }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    Backend& backend() { return b_; }

    float* f32(const std::vector<float>& host);
    // An output buffer pre-filled with NaN, so any element the op fails to write fails the comparison.
    float* f32_out(int64_t n);
    int32_t* i32(const std::vector<int32_t>& host);
    int32_t* i32_out(int64_t n);  // pre-filled with a poison value
    void* bytes(size_t n);        // uninitialised
    // A pointer table in backend memory: entry i = base + i * stride floats, for i < n (per-row sources).
    float* const* rows(float* base, int64_t n, int64_t stride);
    // Rows [0, n) x cols [0, cols) of a strided buffer, as doubles.
    Array get(const float* p, int64_t n, int64_t cols = 1, int64_t stride = 0);
    Array get_i(const int32_t* p, int64_t n);

private:
    Backend& b_;
    std::vector<void*> ptrs_;
};

// One set-up run of a case on a backend: `run` executes the op (repeatable, for timing), `read` returns
// the outputs.
struct Instance {
    std::unique_ptr<Dev> dev;
    std::function<void()> run;
    std::function<Arrays()> read;
};

struct Case {
    std::string op;     // op name, e.g. "matmul"
    std::string shape;  // the parameters, e.g. "Q4_K n=7 K=256 M=83"
    // NMSE bounds (0: bit-identical): CUDA vs CPU, and CPU vs the double reference.
    double tol = 0;
    double ref_tol = 0;
    // Optional: one bound per output in place of tol / ref_tol, for an op whose outputs come from different
    // computations (hc_pre with a fused hc_post).
    std::vector<double> tols, ref_tols;
    // Optional: a CUDA vs CPU bound computed from the case's inputs, in place of `tol`; called only when a CUDA
    // backend runs the case (it may cost as much as the op).
    std::function<double()> tol_of_inputs;
    double bytes = 0;       // bytes an ideal kernel moves: weights + inputs + outputs (perf mode)
    double flops = 0;       // arithmetic of the op, when it is compute-bound (perf mode prints TFLOP/s)
    bool perf_only = false; // a large shape run only with --perf
    std::function<Instance(Backend&)> make;
    std::function<Arrays()> reference;  // optional
    // Optional custom comparison of got against want (e.g. top-k lists up to near-ties): "" when they agree.
    // `vs_ref` tells whether want is the double reference (else the CPU's output).
    std::function<std::string(const Arrays& got, const Arrays& want, bool vs_ref)> compare;
};

// Normalized MSE of got against want: sum (g-w)^2 / sum w^2 (absolute when want is all zero); NaN in got
// or a size mismatch gives +inf.
double nmse(const Array& got, const Array& want);

// Random numbers for case inputs; each case draws from its own seeded stream.
class Rng {
public:
    explicit Rng(uint64_t seed) : g_(seed) {}
    float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_); }
    int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }  // [lo, hi]
    std::vector<float> vec(int64_t n, float lo = -1.0f, float hi = 1.0f);
    uint8_t byte() { return (uint8_t)(g_() & 0xff); }
    std::mt19937_64& engine() { return g_; }

private:
    std::mt19937_64 g_;
};

// A random weight matrix [rows, cols] of type t as GGUF bytes: plain types from uniform values, block
// formats from random bytes whose scale fields are replaced by sane ones (no inf/NaN, moderate size).
std::vector<uint8_t> random_weight(GgmlType t, int64_t rows, int64_t cols, Rng& rng);
// The same bytes dequantized with the CPU codec (validated against the fixtures by test_quant).
std::vector<float> dequant_weight(GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols);
// A weight of `rows` x `cols` (per expert when n_experts > 1) from GGUF bytes, made resident in b.
Weight make_weight(Backend& b, GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                   int64_t n_experts = 1);
// moe_experts in double precision from the dequantized stacks (gate/up of type tg [E*F, D], down of type td
// [E*D, F]): out[i] = sum_j wts[i,j] * down_e(silu(g) * u) with e = ids[i,j], g and u clamped when clamp > 0.
Array moe_experts_reference(GgmlType tg, GgmlType td, const std::vector<uint8_t>& gate, const std::vector<uint8_t>& up,
                            const std::vector<uint8_t>& down, const std::vector<float>& x,
                            const std::vector<int32_t>& ids, const std::vector<float>& wts, int64_t n, int E, int k,
                            int64_t D, int64_t F, float clamp);
// Every float weight format the engine decodes.
std::vector<GgmlType> weight_types();
// Column count that suits type t: a whole number of blocks, `blocks` blocks of at least 256 values for
// 256-value formats; for plain types `plain` itself.
int64_t cols_for(GgmlType t, int blocks, int64_t plain);

// The CUDA backend's GEMM mode a case runs in (GemmPrecision in kernels/cuda/cuda_backend.h): F32 is the
// exact path every other case uses; BF16 sends prefill-sized matmuls, expert passes and attention calls to
// the tensor cores.
enum class Mode { F32, BF16 };
// Unit roundoff of bf16 (8 significant bits, to nearest): the tensor-core tolerances are multiples of kUb2.
constexpr double kUb = 1.0 / 256.0;  // 2^-8
constexpr double kUb2 = kUb * kUb;
// Tolerances of the bf16 path (NMSE, a squared relative error). Rounding a value to bf16 (8 significant
// bits, to nearest) makes a relative error of at most u = 2^-8, with variance at most u^2/3 (uniform over
// [-u, u]). A dot product of the rounded weight and activation: each term w_k x_k carries a relative error
// d_k + e_k of variance 2u^2/3, independent across terms; the test's activations are zero-mean and
// independent of the weights, so the terms are zero-mean and independent and the error of the sum, relative
// to the sum, has the same variance whatever K: NMSE ~ 2u^2/3 (~1.0e-5). (The worst case over adversarial
// inputs grows like u sqrt(K) relative to |w||x|; random inputs sit at the expectation.) Bound: 8x that,
// 16u^2/3 = 8.1e-5, plus the f32 accumulation's own bound. cuBLAS accumulates in f32.
constexpr double kTolBf16Dot = 16.0 / 3.0 * kUb2;
inline const char* mode_name(Mode m) {
    return m == Mode::BF16 ? "bf16" : "f32";
}

// Puts a CUDA backend in `mode` for the lifetime of the object (the op runs inside it, also when timed)
// and restores its previous mode; does nothing on the CPU backend.
class ScopedMode {
public:
    ScopedMode(Backend& b, Mode mode);
    ~ScopedMode();
    ScopedMode(const ScopedMode&) = delete;
    ScopedMode& operator=(const ScopedMode&) = delete;

private:
    // Read only where CUDA is built (the CPU backend has one mode).
    [[maybe_unused]] Backend& b_;
    [[maybe_unused]] Mode restore_ = Mode::F32;
    [[maybe_unused]] bool active_ = false;
};

// Cases are built one at a time by generators (inputs can be large in --perf mode, so only the running
// case holds its buffers). Builders, one per op family (cases_*.cpp), append generators.
using CaseGen = std::function<Case()>;
struct BuildOptions {
    bool perf = false;   // add the large perf-only shapes
    uint64_t seed = 1;   // base seed of every case's input stream
};
void add_matmul_cases(std::vector<CaseGen>& out, const BuildOptions& o);
void add_elementwise_cases(std::vector<CaseGen>& out, const BuildOptions& o);
void add_hc_cases(std::vector<CaseGen>& out, const BuildOptions& o);
void add_attention_cases(std::vector<CaseGen>& out, const BuildOptions& o);
void add_moe_cases(std::vector<CaseGen>& out, const BuildOptions& o);
// The decode paths: n <= 8 GEMV of every format it handles, the MoE decode path (cases_decode.cpp).
void add_decode_cases(std::vector<CaseGen>& out, const BuildOptions& o);
// The CUDA bf16 GEMM mode (tensor cores); every other case runs the CUDA backend in the f32 mode.
void add_tensor_core_cases(std::vector<CaseGen>& out, const BuildOptions& o);
// The token draw (cases_sample.cpp).
void add_sample_cases(std::vector<CaseGen>& out, const BuildOptions& o);

// Which cases the run takes (--op, --shape, --perf). A builder asks as soon as the case's op, shape and
// perf_only are set and returns the bare case when the run does not take it, so that a filtered run makes
// only its own cases' inputs (every perf shape's inputs took 100 s of a two-core machine to make).
struct CaseFilter {
    std::string op, shape;  // empty: any
    bool perf = false;
};
void set_case_filter(const CaseFilter& f);
bool case_wanted(const Case& c);

// Seed of a case's input stream: the run's seed mixed with the case's name, so cases stay independent.
uint64_t case_seed(uint64_t base, const std::string& name);

}  // namespace dsv4::backend_ops
