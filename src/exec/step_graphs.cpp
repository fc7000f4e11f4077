// StepGraphs: record a step, key it by its ops' arguments, run it eagerly the first time a key is seen and
// as a captured graph from the second time on.
#include "exec/step_graphs.h"

#include <algorithm>

#include "core/check.h"
#include "exec/step_recorder.h"

namespace dsv4 {

namespace {

constexpr size_t kMaxEntries = 32;  // keys remembered (each may hold a graph)

}  // namespace

StepGraphs::StepGraphs(Backend& target, GraphSupport& support)
    : target_(target), support_(support), recorder_(std::make_unique<StepRecorder>(*this, target)) {}

StepGraphs::~StepGraphs() {
    drop_graphs();
    if (arena_) target_.free(arena_);
    if (staging_) support_.free_staging(staging_);
}

Backend& StepGraphs::begin(int64_t eager_runs, bool defer_branches) {
    DSV4_CHECK_MSG(!active_, "StepGraphs::begin: a step is already being recorded");
    // The staging buffer is about to be rewritten: every earlier run must have read it.
    target_.synchronize();
    if (arena_want_ > arena_cap_) {
        drop_graphs();  // they point into the old arena
        if (arena_) target_.free(arena_);
        arena_ = static_cast<uint8_t*>(target_.alloc(arena_want_));
        arena_cap_ = arena_want_;
    }
    if (staging_want_ > staging_cap_) {
        drop_graphs();
        if (staging_) support_.free_staging(staging_);
        staging_ = static_cast<uint8_t*>(support_.alloc_staging(staging_want_));
        staging_cap_ = staging_want_;
    }
    recorder_->reset(arena_, arena_cap_, staging_, staging_cap_, defer_branches);
    eager_runs_ = eager_runs;
    active_ = true;
    return *recorder_;
}

void StepGraphs::end() {
    if (!active_) return;
    flush();
    recorder_->release_overflow();
    if (!recorder_->recordable()) {
        // Make room for a step like this one next time.
        if (recorder_->arena_needed() > arena_cap_) arena_want_ = std::max(arena_want_, 2 * recorder_->arena_needed());
        if (recorder_->staging_needed() > staging_cap_)
            staging_want_ = std::max(staging_want_, 2 * recorder_->staging_needed());
    }
    active_ = false;
}

void StepGraphs::flush() {
    if (recorder_->empty()) return;
    std::string key;
    std::shared_ptr<RecordedOps> ops = recorder_->take_ops(key);
    ++stats_.segments;
    Backend& t = target_;
    auto issue = [ops, &t]() {
        for (const RecordedOp& op : *ops) op(t);
    };
    if (!recorder_->recordable()) {
        issue();
        ++stats_.eager;
        return;
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) {
        if (entries_.size() >= kMaxEntries) evict_one();
        it = entries_.emplace(std::move(key), Entry{}).first;
    }
    Entry& e = it->second;
    e.last_use = ++clock_;
    if (!e.graph && (!e.capturable || e.runs < eager_runs_)) {
        // A graph pays off only for a step that comes back (and a chunk's only for one that comes back often).
        // Ops that wait for the device inside themselves (reading device data to plan their launches) would
        // wait on work a capture does not run: such a step always runs as issued.
        const int64_t waits = support_.host_waits();
        issue();
        if (support_.host_waits() != waits) e.capturable = false;
        ++e.runs;
        ++stats_.eager;
        return;
    }
    if (!e.graph) {
        e.graph = support_.capture(issue);
        if (e.graph)
            ++stats_.captures;
        else
            e.capturable = false;
    }
    if (e.graph) {
        support_.launch(e.graph);
        ++stats_.replays;
    } else {
        issue();
        ++stats_.eager;
    }
}

void StepGraphs::evict_one() {
    auto victim = std::min_element(entries_.begin(), entries_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    if (victim == entries_.end()) return;
    if (victim->second.graph) {
        target_.synchronize();
        support_.destroy(victim->second.graph);
    }
    entries_.erase(victim);
}

void StepGraphs::drop_graphs() {
    target_.synchronize();
    for (auto& [key, e] : entries_)
        if (e.graph) support_.destroy(e.graph);
    entries_.clear();
}

}  // namespace dsv4
