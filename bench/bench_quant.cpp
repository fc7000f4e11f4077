// Quantizer speed per core: MB/s of output (and of f32 input) per CPU-second for every type quantize_row supports, on
// Gaussian rows of 4096 values, one thread and then all threads of the pool. The targets: K types
// >= 10 MB/s and IQ2_XXS / IQ2_XS / IQ1_S >= 1.5 MB/s of output per core.
//   build/bin/bench_quant [seconds per type, default 0.5] [threads, default all cores]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "format/quant.h"

using namespace dsv4;

namespace {

constexpr int64_t kRow = 4096;
constexpr int64_t kRows = 64;

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Runs for `seconds` of wall time; returns the wall time and sets the CPU time used (all threads).
double run(GgmlType t, const std::vector<float>& x, std::vector<uint8_t>& out, ThreadPool& pool, double seconds,
           int64_t* bytes, double* cpu) {
    const size_t row_bytes = ggml_row_bytes(ggml_traits(t), kRow);
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    int64_t reps = 0;
    double el = 0;
    do {
        pool.parallel_for(kRows, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; ++r) quantize_row(t, x.data() + r * kRow, out.data() + r * row_bytes, kRow);
        });
        ++reps;
        el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < seconds);
    *bytes = reps * kRows * (int64_t)row_bytes;
    *cpu = cpu_seconds() - c0;
    return el;
}

}  // namespace

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
    const int threads = argc > 2 ? std::atoi(argv[2]) : ThreadPool::default_threads();
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> x((size_t)(kRow * kRows));
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> out((size_t)(kRow * kRows * 4));
    ThreadPool one(1), all(threads);
    // Per-core rates divide by the CPU time the thread used, so a machine shared with other work still gives
    // the per-core figure; the last column is wall-clock throughput on all threads.
    std::printf("%-8s %14s %14s %16s\n", "type", "out MB/s/core", "in MB/s/core", "out MB/s (all)");
    for (uint32_t id = 0; id < 64; ++id) {
        const auto tr = ggml_type_from_id(id);
        if (!tr || !has_quantizer(tr->type) || tr->type == GgmlType::F32) continue;
        {  // warm-up (builds the IQ grid tables once)
            std::vector<uint8_t> tmp(ggml_row_bytes(*tr, kRow));
            quantize_row(tr->type, x.data(), tmp.data(), kRow);
        }
        int64_t b1 = 0, bn = 0;
        double c1 = 0, cn = 0;
        run(tr->type, x, out, one, seconds, &b1, &c1);
        const double s1 = c1;
        const double sn = run(tr->type, x, out, all, seconds, &bn, &cn);
        const double in1 = (double)b1 / (double)ggml_row_bytes(*tr, kRow) * kRow * 4;
        std::printf("%-8s %14.2f %14.2f %16.2f\n", tr->name, b1 / s1 / 1e6, in1 / s1 / 1e6, bn / sn / 1e6);
    }
    return 0;
}
