// Memory planning of the generation engine's KV-cache slots: how many sequences of n_ctx tokens the backend
// can hold beside what it holds already (the weights), keeping room for the largest step's activations, so
// that a server asked for more slots than fit starts with fewer (and queues the rest of its requests)
// instead of failing an allocation.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"
#include "model/deepseek4.h"
#include "runtime/engine.h"

namespace dsv4 {

struct SlotPlan {
    int slots = 0;              // min(opt.n_slots, what fits)
    size_t bytes_per_slot = 0;  // one sequence's KV cache (and its speculative buffers)
    size_t budget = 0;          // bytes the slots may take
    size_t reserve = 0;         // kept back from the free memory for activations (0 with an explicit budget)
};

// The plan for opt (opt.kv_memory bytes when set, else the backend's free memory less the reserve). An error,
// naming the sizes and what to change, when not even one slot fits.
Result<SlotPlan> plan_slots(Model& model, const EngineOptions& opt);

// "N slots of X GB ..." for a plan that took fewer slots than asked: what the CLI prints.
std::string describe_slot_limit(const SlotPlan& plan, const EngineOptions& opt);

}  // namespace dsv4
