// StepRunner: the choice between a recorded and an eager step, and the recording's lifetime around the
// model's forward pass.
#include "exec/step_runner.h"

namespace dsv4 {

Status StepRunner::step(KvCache& cache, std::span<const int32_t> tokens, const StepOptions& opt,
                        std::vector<float>* logits, std::vector<float>* hidden) {
    Model::BatchItem item;
    item.cache = &cache;
    item.tokens = tokens;
    item.all_logits = opt.all_logits;
    item.logits = logits;
    item.hidden = hidden;
    return step_batch(std::span<Model::BatchItem>(&item, 1), opt);
}

Backend* StepRunner::begin_recording(int64_t n, int64_t sequences, bool single_tokens, const StepOptions& opt) {
    // A trace reads intermediates while the step runs: only an eager step has them then. An empty step is
    // refused by the model before it issues anything.
    Backend& b = model_.backend();
    const int64_t most = single_tokens ? kMaxGraphDecodeRows : sequences == 1 ? kMaxGraphChunkTokens : kMaxGraphTokens;
    if (!opt.graphs || opt.trace || n == 0 || n > most || !b.graph_support()) return nullptr;
    if (!graphs_) graphs_ = std::make_unique<StepGraphs>(b, *b.graph_support());
    const int64_t eager_runs = single_tokens || n <= kMaxGraphTokens ? kEagerRunsDecode : kEagerRunsChunk;
    return &graphs_->begin(eager_runs, opt.defer_branches);
}

namespace {

// The recording ends (its last ops run) after the step's scratch went back to the recorder, which is when
// the model's step returns; also when it returns early with an error.
struct RecordingScope {
    StepGraphs& g;
    ~RecordingScope() { g.end(); }
};

}  // namespace

Status StepRunner::step_batch(std::span<Model::BatchItem> items, const StepOptions& opt) {
    int64_t n = 0;
    bool single_tokens = true;
    for (const Model::BatchItem& it : items) {
        n += (int64_t)it.tokens.size();
        single_tokens &= it.tokens.size() == 1;
    }
    Backend* recorder = begin_recording(n, (int64_t)items.size(), single_tokens, opt);
    if (!recorder) return model_.step_batch(items, opt);
    RecordingScope scope{*graphs_};
    return model_.step_batch(items, opt, *recorder);
}

Status StepRunner::mtp_step(const Model::MtpItem& item, const StepOptions& opt) {
    Backend* recorder = begin_recording((int64_t)item.next_tokens.size(), 1, false, opt);
    if (!recorder) return model_.mtp_step(item, opt);
    RecordingScope scope{*graphs_};
    return model_.mtp_step(item, opt, *recorder);
}

}  // namespace dsv4
