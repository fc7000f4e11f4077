// Runs a Model's steps, through step graphs where they pay off: Model::step_batch is the forward pass only,
// and this is the one place that decides whether a step is recorded (StepOptions::graphs, trace,
// the step sizes of exec/step_graphs.h, the backend's GraphSupport) and that owns the graph cache of that model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "exec/step_graphs.h"
#include "model/deepseek4.h"

namespace dsv4 {

class StepRunner {
public:
    explicit StepRunner(Model& model) : model_(model) {}
    StepRunner(const StepRunner&) = delete;
    StepRunner& operator=(const StepRunner&) = delete;

    Model& model() { return model_; }

    // Model::step and Model::step_batch with the same results; a step of at most kMaxGraphTokens tokens (one
    // sequence: kMaxGraphChunkTokens; single-token sequences: kMaxGraphDecodeRows) is recorded and replayed as
    // one unit when it repeats an earlier one (unless opt.graphs is off, opt has a trace, or the backend cannot
    // replay).
    Status step(KvCache& cache, std::span<const int32_t> tokens, const StepOptions& opt, std::vector<float>* logits,
                std::vector<float>* hidden = nullptr);
    Status step_batch(std::span<Model::BatchItem> items, const StepOptions& opt);
    // Model::mtp_step (the backend-memory form), recorded and replayed the same way: a speculative decoder's
    // draft step repeats from one token to the next like a decode step.
    Status mtp_step(const Model::MtpItem& item, const StepOptions& opt);

    // How the recorded steps ran (null before the first recorded step).
    const StepGraphStats* graph_stats() const { return graphs_ ? &graphs_->stats() : nullptr; }

private:
    // A step of n tokens of `sequences` sequences (single_tokens: one each) that is recorded (see step()) starts
    // its recording, with the capture rule of its size (exec/step_graphs.h), and gets the recorder to issue to;
    // null: it runs as issued.
    Backend* begin_recording(int64_t n, int64_t sequences, bool single_tokens, const StepOptions& opt);
    Model& model_;
    std::unique_ptr<StepGraphs> graphs_;  // created at the first step recorded
};

}  // namespace dsv4
