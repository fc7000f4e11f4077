// Internal to the random-weight generator (synth.cpp writes files, synth_memory.cpp builds models in memory):
// the row generator both paths share, so a tensor's bytes are the same whichever way it is delivered, and
// the progress line both print.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/synth.h"

namespace dsv4 {

// Progress on stderr: percent of the tensor bytes, GB done, GB/s; at most a few lines a second.
class SynthProgress {
public:
    SynthProgress(bool enabled, uint64_t total, std::string label);
    void add(uint64_t bytes);
    // The final line (with its newline), once.
    void finish();
    double seconds() const;

private:
    using Clock = std::chrono::steady_clock;
    void print(char end);
    bool enabled_;
    bool finished_ = false;
    uint64_t total_, done_ = 0;
    std::string label_;
    Clock::time_point start_, last_;
};

// Fills rows of the plan's tensors on a thread pool. Every row has its own PRNG stream seeded from (seed,
// tensor name, row), so the bytes depend on neither the chunking nor the thread count.
class SynthGenerator {
public:
    // random_quantized: see SynthWriteOptions.
    SynthGenerator(const std::vector<SynthTensor>& plan, const SynthHparams& hp, uint64_t seed, int n_threads,
                   bool random_quantized = false);

    // Rows [r0, r0 + n) of plan[index] into dst (n * its row bytes).
    void fill(size_t index, int64_t r0, int64_t n, uint8_t* dst);

private:
    // Whether t's rows are random valid blocks (else values drawn and quantized).
    bool random_rows(const SynthTensor& t) const;

    const std::vector<SynthTensor>& plan_;
    const SynthHparams& hp_;
    uint64_t seed_;
    bool random_quantized_;
    ThreadPool pool_;
    std::vector<std::vector<float>> scratch_;  // one row of floats per thread
    std::map<GgmlType, float> unit_rms_;       // random-block scale per type written as random blocks
};

// Total tensor bytes of a plan.
uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan);

// The GGUF description shared by the file and the in-memory paths: validates hp and the types, then puts the
// metadata (with the vocab's tokenizer keys when opt.vocab is set) and every tensor of synth_plan into `w`,
// tensor i's bytes coming from produce(i, out) when w writes a file. Returns the plan. One function, so a
// model built in memory cannot drift from its file.
Result<std::vector<SynthTensor>> synth_describe(GgufWriter& w, const SynthHparams& hp, const SynthTypes& types,
                                                const SynthWriteOptions& opt,
                                                std::function<Status(size_t index, std::FILE* out)> produce);

}  // namespace dsv4
