// The engine's per-request state, shared by the engine's step (engine.cpp) and its speculative part
// (engine_speculative.cpp). Private to the runtime folder.
#pragma once

#include <optional>
#include <vector>

#include "runtime/engine.h"

namespace dsv4 {

struct Engine::Sequence {
    uint64_t id = 0;
    GenerationRequest req;
    Callback cb;
    int slot = -1;
    KvCache* cache = nullptr;
    std::vector<int32_t> tokens;     // prompt, then every sampled token
    int64_t n_prompt = 0;
    int64_t n_fed = 0;               // tokens already in the cache
    int64_t cached = 0;              // prompt tokens restored from the prefix cache
    std::vector<int32_t> generated;
    std::optional<Sampler> sampler;
    std::optional<StopChecker> stop;
    std::optional<GrammarMatcher> matcher;  // constrained decoding
    int32_t stop_index = -1;         // which stop string ended the generation
    std::optional<KvCache::Snapshot> block_snap;  // state at the last block boundary (no entries)
    bool done = false;
    std::vector<float> logits;
    // Speculative decoding (EngineOptions::speculative): the MTP block's proposals after tokens.back() and the
    // verify step's tokens (tokens.back(), then the drafts).
    bool spec = false;
    std::vector<int32_t> drafts;
    std::vector<int32_t> feed;
};

}  // namespace dsv4
