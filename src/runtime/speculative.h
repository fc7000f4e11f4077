// Speculative decoding with the model's own MTP block: the block drafts K tokens, one main-model step
// verifies the K + 1 rows, the longest agreeing prefix is kept and the cache rolls back past the rest
// (KvCache::rollback). Greedy decoding keeps exactly the tokens plain decoding gives; sampled decoding uses the
// speculative sampling rule (accept a draft d with probability min(1, p(d) / q(d)), else draw from the residual
// max(0, p - q)), so every token follows the model's own distribution p whatever the drafts were. The engine
// runs it (runtime/engine.h: EngineOptions::speculative); these are its parts that need no model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/sampler.h"

namespace dsv4 {

class Model;

// "mtp" (one draft per step) or "mtp:K"; "off" and "" are 0. Anything else is an error naming the value.
Result<int> parse_speculative(const std::string& spec);

// Whether `model` can draft k tokens per step: it needs an MTP block, and a step of k + 1 tokens must be
// undoable (k + 1 at most the window and the smallest compress ratio: KvCache::rollback_limit).
Status check_speculative(const Model& model, int k);

// The token a uniform u in [0, 1) picks from `dist` (probabilities summing to about 1, in the given order; the
// last token takes any rounding remainder).
int32_t draw_from(std::span<const TokenProb> dist, double u);

struct SpeculativeVerdict {
    bool accepted = false;
    int32_t token = -1;  // the draft when accepted, else the residual's draw
};

// The speculative sampling rule for one draft token `d` drawn from q, with target distribution p (both as
// sampling_distribution returns them: the drawable tokens and their probabilities): accept when u_accept <
// p(d) / q(d), else draw with u_residual from max(0, p - q) renormalised (p itself when that is empty, which
// only rounding can cause).
SpeculativeVerdict speculative_accept(std::span<const TokenProb> p, std::span<const TokenProb> q, int32_t d,
                                      double u_accept, double u_residual);

}  // namespace dsv4
