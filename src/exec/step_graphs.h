// Step graphs: a small step (decode) issues the same ~30 ops per layer from one token to the next; only
// the index lists it uploads change. StepGraphs records a step's ops through a recording Backend instead
// of running them, keys the recording by every op's arguments (pointers, sizes, scalars; not the uploaded
// bytes), and runs it: eagerly the first time a key is seen, then as one captured unit (a CUDA graph) that
// is replayed whenever the key comes back, with the new uploads written where the graph reads them. A step
// that differs in any argument gets another key, so a replay is never wrong, only missed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/backend.h"
#include "ops/graph_support.h"

namespace dsv4 {

// Steps of at most this many tokens are recorded (decode, small batches, speculative verify steps); larger
// ones run as issued ...
constexpr int64_t kMaxGraphTokens = 8;
// ... except a step of one sequence (a short prompt, or a long one's last chunk), recorded up to this many
// tokens: a fresh prompt's chunk starts at position 0 of a slot's cache, so prompts of one length repeat one
// key. Steps of several sequences rarely repeat past a few tokens.
constexpr int64_t kMaxGraphChunkTokens = 64;
// ... except a step of single-token sequences only (batched decode, whose attention runs once for all of them:
// its ops do not depend on the sequences' positions), recorded up to this many sequences.
constexpr int64_t kMaxGraphDecodeRows = 256;
// Times a key runs as issued before it is captured: a decode step's key repeats every few tokens, so the second
// sighting captures it; a chunk's of more than kMaxGraphTokens tokens repeats only as often as prompts of its
// length come, and its capture costs about what 8 replays save (H100, 30 layers, a 32-token chunk: 38.2 ms as
// issued, ~34 ms replayed, ~69 ms for the run that captures), so it is captured at its 9th sighting: whatever
// the lengths users send, the chunks cost at most twice what the best choice in hindsight would have.
constexpr int64_t kEagerRunsDecode = 1;
constexpr int64_t kEagerRunsChunk = 8;

struct StepGraphStats {
    int64_t segments = 0;  // recorded runs (a step is one, or more when it downloads in the middle)
    int64_t eager = 0;     // run op by op (first sighting of a key, or not recordable)
    int64_t captures = 0;  // graphs captured
    int64_t replays = 0;   // segments run by replaying a captured graph (including right after capture)
};

class StepRecorder;

class StepGraphs {
public:
    StepGraphs(Backend& target, GraphSupport& support);
    ~StepGraphs();
    StepGraphs(const StepGraphs&) = delete;
    StepGraphs& operator=(const StepGraphs&) = delete;

    // Start a step: ops issued through the returned backend are recorded; a download or synchronize through
    // it runs what was recorded so far, end() runs the rest. Scratch it allocates lives until end(). A key is
    // run as issued `eager_runs` times before it is captured (kEagerRunsDecode, kEagerRunsChunk); one whose ops
    // wait for the device inside themselves (GraphSupport::host_waits) is never captured.
    // defer_branches: see StepRecorder::reset (tests).
    Backend& begin(int64_t eager_runs = kEagerRunsDecode, bool defer_branches = false);
    void end();
    const StepGraphStats& stats() const { return stats_; }

private:
    friend class StepRecorder;
    struct Entry {
        void* graph = nullptr;
        bool capturable = true;
        int64_t last_use = 0;
        int64_t runs = 0;  // as issued
    };
    void flush();  // run the ops recorded so far
    void drop_graphs();
    void evict_one();

    Backend& target_;
    GraphSupport& support_;
    std::unique_ptr<StepRecorder> recorder_;
    std::unordered_map<std::string, Entry> entries_;
    StepGraphStats stats_;
    bool active_ = false;
    int64_t eager_runs_ = kEagerRunsDecode;  // of the step being recorded
    int64_t clock_ = 0;
    // Device scratch of the recorded steps (a stack, so a step's addresses repeat) and host staging.
    uint8_t* arena_ = nullptr;
    size_t arena_cap_ = 0, arena_want_ = size_t(32) << 20;
    uint8_t* staging_ = nullptr;
    size_t staging_cap_ = 0, staging_want_ = size_t(1) << 20;
};

}  // namespace dsv4
