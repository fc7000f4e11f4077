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

Status StepRunner::step_batch(std::span<Model::BatchItem> items, const StepOptions& opt) {
    int64_t n = 0;
    for (const Model::BatchItem& it : items) n += (int64_t)it.tokens.size();
    Backend& b = model_.backend();
    // A trace reads intermediates while the step runs: only an eager step has them then. An empty step is
    // refused by the model before it issues anything.
    if (!opt.graphs || opt.trace || n == 0 || n > kMaxGraphTokens || !b.graph_support())
        return model_.step_batch(items, opt);
    if (!graphs_) graphs_ = std::make_unique<StepGraphs>(b, *b.graph_support());
    // The recording ends (its last ops run) after the step's scratch went back to the recorder, which is
    // when Model::step_batch returns; also when it returns early with an error.
    struct Scope {
        StepGraphs& g;
        ~Scope() { g.end(); }
    } scope{*graphs_};
    return model_.step_batch(items, opt, graphs_->begin(opt.defer_branches));
}

}  // namespace dsv4
