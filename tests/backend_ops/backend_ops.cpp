// test-backend-ops: every Backend op on random inputs over a grid of shapes (odd sizes, every weight format,
// strided views). With a CUDA device: CUDA vs the CPU oracle by normalized MSE, tolerances derived from the
// dtype. Always: the CPU vs a naive double-precision reference. --perf also times each op on the device
// (CUDA if present, else CPU) and prints achieved bandwidth; it adds larger shapes.
//
// usage: test-backend-ops [--perf] [--op NAME] [--seed N] [--verbose] [--threads N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/thread_pool.h"
#include "harness.h"
#if defined(DSV4_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

using namespace dsv4;
using namespace dsv4::backend_ops;

namespace {

struct Options {
    bool perf = false, verbose = false;
    std::string op;  // only cases of this op
    uint64_t seed = 20251130;
    int threads = 0;
};

struct Check {
    bool ok = true;
    std::string detail;
};

// tols: a bound per output (empty: tol for every output).
Check compare(const Case& c, const Arrays& got, const Arrays& want, double tol, const std::vector<double>& tols,
              bool vs_ref) {
    if (c.compare) {
        const std::string err = c.compare(got, want, vs_ref);
        return {err.empty(), err.empty() ? "custom" : err};
    }
    Check r;
    char buf[160];
    if (got.size() != want.size()) return {false, "output count differs"};
    if (!tols.empty() && tols.size() != got.size()) return {false, "the case's bound count differs from its outputs'"};
    for (size_t i = 0; i < got.size(); ++i) {
        const double e = nmse(got[i], want[i]);
        const double t = tols.empty() ? tol : tols[i];
        const bool ok = t == 0 ? got[i] == want[i] : e <= t;
        std::snprintf(buf, sizeof buf, "%sout%zu nmse %.2e (tol %.1e)", i ? ", " : "", i, e, t);
        r.detail += buf;
        r.ok = r.ok && ok;
    }
    return r;
}

// Seconds per call of the op: one warm-up, then repeat until ~50 ms have passed (3..200 calls).
double time_op(Backend& b, Instance& inst) {
    inst.run();
    b.synchronize();
    int iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double secs = 0;
    do {
        inst.run();
        ++iters;
        if (iters % 4 == 0 || iters < 4) {
            b.synchronize();
            secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
    } while ((secs < 0.05 || iters < 3) && iters < 200);
    b.synchronize();
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return secs / iters;
}

// " 123.4 TFLOP/s" for cases that count their arithmetic, else "".
std::string tflops(const Case& c, double secs) {
    if (c.flops <= 0) return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, " %7.1f TFLOP/s", c.flops / secs * 1e-12);
    return buf;
}

int parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "--perf") o.perf = true;
        else if (a == "--verbose" || a == "-v") o.verbose = true;
        else if (a == "--op" && i + 1 < argc) o.op = next();
        else if (a == "--seed" && i + 1 < argc) o.seed = std::strtoull(next(), nullptr, 10);
        else if (a == "--threads" && i + 1 < argc) o.threads = std::atoi(next());
        else {
            std::fprintf(stderr, "usage: test-backend-ops [--perf] [--op NAME] [--seed N] [--verbose] [--threads N]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    if (int rc = parse(argc, argv, opt); rc >= 0) return rc;
    // The CUDA backend sends one-row Q8_0 launches of DSV4_GEMV_XREG_MIN_MB or more to the kernel that holds the
    // row in registers (a speed choice); here every eligible case takes it, so its small and odd shapes are
    // checked too (the pipelined kernel keeps the cases it alone serves: K not a multiple of 512, several rows).
    setenv("DSV4_GEMV_XREG_MIN_MB", "0", 0);

    auto cpu = make_cpu_backend(opt.threads > 0 ? opt.threads : ThreadPool::default_threads());
    std::unique_ptr<Backend> gpu;
    std::string gpu_note = "CUDA skipped: this build has no CUDA backend";
#if defined(DSV4_HAVE_CUDA)
    if (cuda_device_available()) {
        // The f32 GEMM mode: the cases hold the CUDA backend to the f32 bounds; cases_tensor_core.cpp switches
        // to the bf16 mode for its own cases.
        CudaOptions cuda_options;
        cuda_options.gemm = GemmPrecision::F32;
        auto b = make_cuda_backend(0, cuda_options);
        if (b.ok()) {
            gpu = std::move(*b);
            gpu_note = "CUDA device 0 vs CPU";
        } else {
            gpu_note = "CUDA skipped: " + b.error();
        }
    } else {
        gpu_note = "CUDA skipped: no CUDA device";
    }
#endif
    std::printf("test-backend-ops: %s; CPU vs double reference; seed %llu%s\n", gpu_note.c_str(),
                (unsigned long long)opt.seed, opt.perf ? "; perf mode" : "");

    BuildOptions bo;
    bo.perf = opt.perf;
    bo.seed = opt.seed;
    std::vector<CaseGen> gens;
    add_matmul_cases(gens, bo);
    add_moe_cases(gens, bo);
    add_decode_cases(gens, bo);
    add_tensor_core_cases(gens, bo);
    add_elementwise_cases(gens, bo);
    add_hc_cases(gens, bo);
    add_attention_cases(gens, bo);

    struct Tally {
        int cases = 0, failed = 0;
    };
    std::map<std::string, Tally> per_op;
    int n_cases = 0, n_failed = 0, n_gpu = 0, n_ref = 0;
    for (const CaseGen& gen : gens) {
        const Case c = gen();
        if (!opt.op.empty() && c.op != opt.op) continue;
        if (c.perf_only && !opt.perf) continue;
        ++n_cases;
        bool ok = true;
        std::string detail;
        Instance on_cpu = c.make(*cpu);
        on_cpu.run();
        const Arrays cpu_out = on_cpu.read();
        on_cpu = Instance{};
        if (gpu) {
            Instance on_gpu = c.make(*gpu);
            on_gpu.run();
            const Arrays gpu_out = on_gpu.read();
            const Check k = c.tol_of_inputs ? compare(c, gpu_out, cpu_out, c.tol_of_inputs(), {}, false)
                                            : compare(c, gpu_out, cpu_out, c.tol, c.tols, false);
            ok = ok && k.ok;
            detail += "cuda: " + k.detail;
            ++n_gpu;
            if (opt.perf) {
                const double s = time_op(*gpu, on_gpu);
                std::printf("perf %-14s %-52s %10.2f us %9.1f GB/s%s\n", c.op.c_str(), c.shape.c_str(), s * 1e6,
                            c.bytes / s * 1e-9, tflops(c, s).c_str());
            }
        } else if (opt.perf) {
            Instance again = c.make(*cpu);
            const double s = time_op(*cpu, again);
            std::printf("perf %-14s %-52s %10.2f us %9.1f GB/s%s (cpu)\n", c.op.c_str(), c.shape.c_str(), s * 1e6,
                        c.bytes / s * 1e-9, tflops(c, s).c_str());
        }
        if (c.reference && !c.perf_only) {
            const Check k = compare(c, cpu_out, c.reference(), c.ref_tol, c.ref_tols, true);
            ok = ok && k.ok;
            detail += std::string(detail.empty() ? "" : "; ") + "cpu vs ref: " + k.detail;
            ++n_ref;
        }
        Tally& t = per_op[c.op];
        ++t.cases;
        if (!ok) {
            ++t.failed;
            ++n_failed;
        }
        if (!ok || opt.verbose)
            std::printf("%s %s %s: %s\n", ok ? "ok  " : "FAIL", c.op.c_str(), c.shape.c_str(), detail.c_str());
    }
    for (const auto& [op, t] : per_op)
        std::printf("  %-14s %4d cases %s\n", op.c_str(), t.cases, t.failed ? "FAILED" : "ok");
    std::printf("test-backend-ops: %d cases, %d passed, %d failed (%d CUDA vs CPU, %d CPU vs reference; %s)\n", n_cases,
                n_cases - n_failed, n_failed, n_gpu, n_ref, gpu_note.c_str());
    return n_failed == 0 && n_cases > 0 ? 0 : 1;
}
