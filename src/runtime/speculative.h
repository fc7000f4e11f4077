// Speculative decoding with the model's own MTP block: the block drafts K tokens, one main-model step
// verifies the K + 1 rows, the longest agreeing prefix is kept and the cache rolls back past the rest
// (KvCache::rollback). The engine runs it (runtime/engine.h: EngineOptions::speculative; the loop is in
// engine_speculative.cpp); this header has its parts that need no model.
//
// The drafts are deterministic: the MTP block's most likely token (the proposal distribution q is a point
// mass). The verify step draws every row's token exactly as plain decoding would (same bias, penalties,
// temperature, truncation; greedy is the argmax) and keeps a draft while the row's draw equals it. For a
// deterministic draft d this is the speculative sampling rule itself (accept with probability
// min(1, p(d) / q(d)) = p(d), else draw from max(0, p - q), which is p without d, renormalised): a draw t ~ p
// equals d with probability p(d), and otherwise is a draw from p without d. So every emitted token follows
// the model's own distribution, greedy output is exactly plain decoding's, and the draws run on the device
// like a plain step's.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace dsv4 {

class Model;

// "mtp" (one draft per step) or "mtp:K"; "off" and "" are 0. Anything else is an error naming the value.
Result<int> parse_speculative(const std::string& spec);

// Whether `model` can draft k tokens per step: it needs an MTP block, and a step of k + 1 tokens must be
// undoable (k + 1 at most kv_rollback_limit: the window and the smallest compress ratio).
Status check_speculative(const Model& model, int k);

}  // namespace dsv4
