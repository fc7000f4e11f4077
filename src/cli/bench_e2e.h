// `dsv4 bench --e2e`: what a user of `run` or of one server request sees, measured through the same loop
// (the generation engine: prompt processing, sampling, detokenizing, stop checks, streamed text), one request
// at a time: time to the first token and generation tokens/s, to set beside the raw decode rows.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "core/status.h"
#include "model/deepseek4.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

struct E2eBench {
    std::vector<int64_t> prompts = {32};  // random prompt tokens per request, one set of rows each
    int64_t n_gen = 64;      // generated tokens per request
    int64_t repeat = 3;      // requests per row; medians are reported
    bool quant_sim = true;
    // A JSON schema (runtime/json_schema.h): the rows are then constrained to it (the grammar's masks on the
    // host over the step's downloaded logits, as the server runs response_format), and each row also reports
    // how many answers parsed as JSON.
    std::string schema_path;
};

// One request through `engine`, run to its end, as a user sees it: its generated tokens and text, the time
// from submission to the first token and the tokens/s after it. `what` names the caller in errors.
struct TimedRequest {
    std::vector<int32_t> tokens;
    std::string text;
    double ttft_s = 0, tokens_per_s = 0;  // tokens_per_s: 0 with fewer than two tokens
};
Result<TimedRequest> run_timed(Engine& engine, GenerationRequest req, const char* what);

// For every prompt length, three samplings (with a schema: greedy and temperature 1) (greedy; `run`'s default temperature 0.6 with top-p 0.95;
// temperature 1 over the whole vocabulary), each a row of: ttft_ms (submit to the first token's event) and
// generation tokens/s (first to last token), medians of `repeat` requests.
Result<nlohmann::ordered_json> bench_e2e(Model& m, const Tokenizer& tok, const E2eBench& b, std::mt19937& rng);
void print_e2e(const nlohmann::ordered_json& rows);

// `--batch LIST --e2e`: for each size N, N greedy requests (random prompts of the first --e2e prompt length,
// n_gen tokens each) submitted at once to one engine of N slots and run to their end, as N server clients
// are: tokens/s in all while every request decodes (the tokens after the last first token, over that time),
// per stream, and the first token's p50 and slowest time.
Result<nlohmann::ordered_json> bench_e2e_batches(Model& m, const Tokenizer& tok, const E2eBench& b,
                                                 const std::vector<int64_t>& sizes, std::mt19937& rng);
void print_e2e_batches(const nlohmann::ordered_json& rows);

}  // namespace dsv4::cli
