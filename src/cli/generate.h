// Shared by `dsv4 run` and `dsv4 chat`: load a model with its tokenizer, run one request to completion on a
// single-slot engine while streaming its text, and time prompt processing and generation separately.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "cli/common.h"
#include "model/deepseek4.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

struct Loaded {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
};
Result<Loaded> load_model_and_tokenizer(const ModelOptions& model, const DeviceOptions& dev);

struct SamplingOptions {
    float temperature = 0.6f;
    float top_p = 0.95f;
    int top_k = 0;
    float min_p = 0.0f;
    float repeat_penalty = 1.0f;
    int64_t seed = -1;  // -1: from the clock
};
void add_sampling_options(CLI::App& app, SamplingOptions& s);
SamplingParams to_sampling_params(const SamplingOptions& s);

struct GenerationResult {
    GenerationEnd reason = GenerationEnd::none;
    std::string error;
    int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    double prompt_seconds = 0, generation_seconds = 0;
};

// Submit `req`, step the engine until it finishes, pass each piece of text to on_text. If `interrupt` becomes
// true the request is cancelled (reason `cancelled`).
GenerationResult generate_sync(Engine& engine, GenerationRequest req,
                               const std::function<void(std::string_view)>& on_text,
                               const std::atomic<bool>* interrupt = nullptr);

// "prompt: 12 tokens in 0.10 s (120.0 tok/s) | generation: 64 tokens in 2.00 s (32.0 tok/s)" on stderr.
void print_speed(const GenerationResult& r);

// --speculative mtp[:K] (speculative decoding with the model's MTP block).
void add_speculative_option(CLI::App& app, std::string& spec);
// The drafts per step it asks for, checked against the model (0 when off).
Result<int> speculative_drafts(const std::string& spec, const Model& model);
// "speculation: 1 draft per step, 812 of 1000 accepted (81.2%), 1.81 tokens per step" on stderr, when any
// verify step ran.
void print_speculation(const EngineStats& s, int drafts);

}  // namespace dsv4::cli
