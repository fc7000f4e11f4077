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

bool StepRunner::records(int64_t n, int64_t sequences, bool single_tokens, const StepOptions& opt) {
    // A trace reads intermediates while the step runs: only an eager step has them then. An empty step is
    // refused by the model before it issues anything.
    Backend& b = model_.backend();
    const int64_t most = single_tokens ? kMaxGraphDecodeRows : sequences == 1 ? kMaxGraphChunkTokens : kMaxGraphTokens;
    if (!opt.graphs || opt.trace || n == 0 || n > most || !b.graph_support()) return false;
    if (!graphs_) graphs_ = std::make_unique<StepGraphs>(b, *b.graph_support());
    return true;
}

int64_t StepRunner::eager_runs(int64_t n, bool single_tokens) {
    return single_tokens || n <= kMaxGraphTokens ? kEagerRunsDecode : kEagerRunsChunk;
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
    if (!records(n, (int64_t)items.size(), single_tokens, opt)) return model_.step_batch(items, opt);
    RecordingScope scope{*graphs_};
    return model_.step_batch(items, opt, graphs_->begin(eager_runs(n, single_tokens), opt.defer_branches));
}

Status StepRunner::mtp_step(const Model::MtpItem& item, const StepOptions& opt) {
    const int64_t n = (int64_t)item.next_tokens.size();
    if (!records(n, 1, false, opt)) return model_.mtp_step(item, opt);
    RecordingScope scope{*graphs_};
    return model_.mtp_step(item, opt, graphs_->begin(eager_runs(n, false), opt.defer_branches));
}

}  // namespace dsv4
