// test-backend-ops: every Backend op on random inputs over a grid of shapes (odd sizes, every weight format,
// strided views). With a CUDA device: CUDA vs the CPU oracle by normalized MSE, tolerances derived from the
// dtype. Always: the CPU vs a naive double-precision reference. --perf also times each op on the device
// (CUDA if present, else CPU) and prints achieved bandwidth; it adds larger shapes.
//
// usage: test-backend-ops [--perf] [--op NAME] [--shape TEXT] [--seed N] [--verbose] [--threads N]
// (--shape: only cases whose shape contains TEXT, e.g. "keys=262144", to profile one case's kernels)
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
    std::string op;     // only cases of this op
    std::string shape;  // only cases whose shape contains this
    uint64_t seed = 20251130;
    int threads = 0;
};

struct Check {
    bool ok = true;
    std::string detail;
};

#if defined(DSV4_HAVE_CUDA)
// The op whose CUDA kernel choice a case exercises (cuda_kernels.h), or "" when its op has one kernel.
std::string choice_op(const std::string& op) {
    if (op == "matmul" || op == "matmul_batch" || op == "matmul_norm") return "matmul";
    if (op == "moe_experts" || op == "attention" || op == "hc_pre_norm" || op == "sample") return op;
    return "";
}
#endif

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

// One perf line: the case timed at secs per call, then what ran it (e.g. " [cluster8]", " (cpu)").
void print_perf(const Case& c, double secs, const std::string& ran) {
    std::printf("perf %-14s %-52s %10.2f us %9.1f GB/s%s%s\n", c.op.c_str(), c.shape.c_str(), secs * 1e6,
                c.bytes / secs * 1e-9, tflops(c, secs).c_str(), ran.c_str());
}

int parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "--perf") o.perf = true;
        else if (a == "--verbose" || a == "-v") o.verbose = true;
        else if (a == "--op" && i + 1 < argc) o.op = next();
        else if (a == "--shape" && i + 1 < argc) o.shape = next();
        else if (a == "--seed" && i + 1 < argc) o.seed = std::strtoull(next(), nullptr, 10);
        else if (a == "--threads" && i + 1 < argc) o.threads = std::atoi(next());
        else {
            std::fprintf(stderr,
                         "usage: test-backend-ops [--perf] [--op NAME] [--shape TEXT] [--seed N] [--verbose] [--threads N]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    if (int rc = parse(argc, argv, opt); rc >= 0) return rc;
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

    set_case_filter(CaseFilter{opt.op, opt.shape, opt.perf});
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
    add_sample_cases(gens, bo);

    struct Tally {
        int cases = 0, failed = 0;
    };
    std::map<std::string, Tally> per_op;
    int n_cases = 0, n_failed = 0, n_gpu = 0, n_ref = 0, n_forced = 0;
    std::map<std::string, int> kernel_cases;  // "op/kernel" -> CUDA cases that ran it (chosen or forced)
    for (const CaseGen& gen : gens) {
        const Case c = gen();
        if (!case_wanted(c)) continue;
        ++n_cases;
        bool ok = true;
        std::string detail;
        Instance on_cpu = c.make(*cpu);
        on_cpu.run();
        const Arrays cpu_out = on_cpu.read();
        on_cpu = Instance{};
        if (gpu) {
            const double tol = c.tol_of_inputs ? c.tol_of_inputs() : c.tol;
            const std::vector<double> no_tols;
            const std::vector<double>& tols = c.tol_of_inputs ? no_tols : c.tols;
            Instance on_gpu = c.make(*gpu);
            gpu->clear_last_kernel();
            on_gpu.run();
            [[maybe_unused]] const char* chosen = gpu->last_kernel();
            const Arrays gpu_out = on_gpu.read();
            const Check k = compare(c, gpu_out, cpu_out, tol, tols, false);
            ok = ok && k.ok;
            detail += "cuda: " + k.detail;
            ++n_gpu;
#if defined(DSV4_HAVE_CUDA)
            const std::string cop = choice_op(c.op);
            if (chosen) {
                detail += std::string(" [") + chosen + "]";
                ++kernel_cases[cop + "/" + chosen];
            }
            // Every other kernel of the op, forced, on the same inputs where it serves the case.
            for (const std::string& kn : kernel_names(cop)) {
                if (chosen && kn == chosen) continue;
                set_cuda_kernel_force(*gpu, cop, kn);
                Instance forced = c.make(*gpu);
                gpu->clear_last_kernel();
                forced.run();
                const char* ran = gpu->last_kernel();
                if (ran && kn == ran) {
                    const Check f = compare(c, forced.read(), cpu_out, tol, tols, false);
                    ok = ok && f.ok;
                    detail += "; forced " + kn + ": " + f.detail;
                    ++kernel_cases[cop + "/" + kn];
                    ++n_forced;
                    if (opt.perf)  // the same case on every kernel that serves it: A/B in one run
                        print_perf(c, time_op(*gpu, forced), " [forced " + kn + "]");
                }
                forced = Instance{};
                set_cuda_kernel_force(*gpu, cop, "");
            }
#endif
            if (opt.perf) print_perf(c, time_op(*gpu, on_gpu), chosen ? std::string(" [") + chosen + "]" : "");
        } else if (opt.perf) {
            Instance again = c.make(*cpu);
            print_perf(c, time_op(*cpu, again), " (cpu)");
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
    // Every kernel of every op that chooses, with the CUDA cases that ran it; with every case run, a kernel no
    // case reached is a gap in the cases and fails the run.
    int unreached = 0;
#if defined(DSV4_HAVE_CUDA)
    if (gpu) {
        for (const std::string& op : kernel_choice_ops()) {
            if (!opt.op.empty() && choice_op(opt.op) != op) continue;
            for (const std::string& kn : kernel_names(op)) {
                const std::string key = op + "/" + kn;
                const int n = kernel_cases.count(key) ? kernel_cases.at(key) : 0;
                const bool gap = n == 0 && opt.op.empty() && opt.shape.empty();
                unreached += gap;
                std::printf("  kernel %-28s %4d cases%s\n", key.c_str(), n, gap ? " NOT REACHED" : "");
            }
        }
    }
#endif
    std::printf("test-backend-ops: %d cases, %d passed, %d failed (%d CUDA vs CPU, %d of them again with a forced "
                "kernel, %d CPU vs reference; %s)\n",
                n_cases, n_cases - n_failed, n_failed, n_gpu, n_forced, n_ref, gpu_note.c_str());
    if (unreached) std::printf("test-backend-ops: %d selectable kernels reached by no case\n", unreached);
    return n_failed == 0 && unreached == 0 && n_cases > 0 ? 0 : 1;
}
