// `dsv4 bench --speculative mtp:K`: what speculative decoding with the MTP block costs and gains. Two parts:
// the main model's verify steps of 1 .. K+1 tokens at the prompt's depth (each undone by a rollback, so the
// depth stays; every row's token drawn on the backend, as a greedy verify does), and greedy generation
// through the engine without speculation and with K = 1 .. K drafts per step: tokens/s, acceptance, tokens per
// step, and whether the tokens equal the plain run's. A random-weight model accepts almost nothing, so
// `--draft-oracle P` proposes the plain run's next token with probability P instead of the MTP block's (the
// block still runs; only the drafts' source is not real).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>

#include "core/status.h"
#include "exec/profiling_backend.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

struct SpecBench {
    int max_drafts = 1;    // rows for K = 1 .. max_drafts
    double oracle = -1;    // --draft-oracle P in [0, 1]; < 0: the MTP block's own drafts
    int64_t n_prompt = 128, n_gen = 64, repeat = 3;
    bool quant_sim = true;
    // --profile: after the measurements, one verify step of each size 1 .. K+1 with every op timed one at a
    // time (where a multi-token step's extra time goes); the model must run on this profiler.
    ProfilingBackend* profiler = nullptr;
};

Result<nlohmann::ordered_json> bench_speculative(Model& m, StepRunner& runner, const Tokenizer& tok, const SpecBench& b,
                                                 std::mt19937& rng);
void print_speculative(const nlohmann::ordered_json& j);

}  // namespace dsv4::cli
