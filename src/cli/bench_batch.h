// `dsv4 bench --batch`: several sequences decoding together, one token each per step, through
// StepRunner::step_batch (the forward pass the generation engine runs for its batch every step; host sampling
// is not included), and the cache filling the benchmark's depths share.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "core/status.h"
#include "exec/profiling_backend.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"

namespace dsv4::cli {

// --skip-fill: every layer's window ring and the entries a cache of `depth` tokens holds get random values in
// [-1, 1] (finite, distinct: the indexer's top-k sees no ties), then the position is set to `depth`.
void fill_cache_randomly(Model& m, KvCache& cache, int64_t depth);

// Bring a fresh cache to `depth` tokens: fill_cache_randomly with skip_fill, else a prefill of random tokens
// (drawn from rng) in steps of `chunk`.
Status reach_depth(Model& m, StepRunner& runner, KvCache& cache, int64_t depth, int64_t chunk, bool skip_fill,
                   const StepOptions& opt, std::mt19937& rng);

// The median of a measurement's repeated timings (the mean of the middle two for an even count); runs is
// not empty.
double median_of(std::vector<double> runs);

struct BatchBench {
    std::vector<int64_t> sizes;   // sequences per step
    std::vector<int64_t> depths;  // context each sequence starts decoding at
    int64_t n_gen = 32;           // steps per measurement
    int64_t repeat = 1;           // measurements per (size, depth); the median is reported
    int64_t chunk = 256;          // prefill chunk when the depth is filled for real
    bool skip_fill = false;
    double peak_gbs = 0;
    // --profile: after each measurement, n_gen more steps with every op timed alone; the table goes into
    // the row ("profile") and is printed with it.
    ProfilingBackend* profiler = nullptr;
};

// One JSON row per (depth, size): tokens/s in all and per stream, the weight bytes a step reads (dense and
// LM head once, the routed experts the batch is expected to touch), the bandwidth that implies, KV bytes per
// sequence. Sequences start at the depth with distinct random tokens.
Result<nlohmann::ordered_json> bench_batches(Model& m, StepRunner& runner, const StepOptions& opt,
                                             const BatchBench& b, std::mt19937& rng);

// Prints the rows bench_batches returned.
void print_batches(const nlohmann::ordered_json& rows, double peak_gbs);

}  // namespace dsv4::cli
