// The --synth options of `bench` and `serve`: a random-weight model of a preset built straight into backend
// memory (model/synth.h's synth_model), with the expert and dense types, layer count, seed and tokenizer a
// benchmark asks for. For machines whose disk cannot hold a 43-layer file.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "model/deepseek4.h"
#include "model/synth.h"

namespace dsv4::cli {

struct SynthOptions {
    std::string preset;  // empty: no --synth model
    int layers = 0;      // 0: the preset's
    uint64_t seed = 0;
    std::string experts_type, dense_type;
    std::string vocab_path;  // a GGUF whose tokenizer (and vocabulary size) the model takes
    bool quantize = false;   // real quantizers instead of random valid blocks
};

// Adds --synth, --layers, --seed, --experts-type, --dense-type, --synth-quantize and --vocab; `what` names the
// command's use of the model in --synth's help ("benchmark", "serve").
void add_synth_options(CLI::App& app, SynthOptions& s, const std::string& what);

// The model the options describe, on `backend`; the types it got in `types` (when non-null). progress: the
// generator's progress line on stderr. threads: the generator's threads (0: all cores).
Result<std::unique_ptr<Model>> make_synth_model(const SynthOptions& s, Backend& backend, int threads, bool progress,
                                                SynthTypes* types = nullptr);

}  // namespace dsv4::cli
