#include "runtime/slot_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "model/kv_cache.h"

namespace dsv4 {

namespace {

std::string gb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
    return buf;
}

// An upper estimate of the scratch the largest step of `rows` tokens holds at once: the residual streams twice
// (H and the next layer's), a layer's query, attention output and projections, the routed experts' gate/up/
// hidden rows, plus a fixed allowance for library workspaces and step graphs' arenas.
size_t step_activation_bytes(const ModelConfig& c, int64_t rows) {
    const int64_t per_row = 2 * c.hc_dim() + 3 * (int64_t)c.n_head * c.head_dim +
                            3 * (int64_t)std::max(c.n_expert_used, 1) * c.n_ff_exp + 4 * c.n_embd;
    return (size_t)(rows * per_row) * sizeof(float) + (size_t(512) << 20);
}

}  // namespace

Result<SlotPlan> plan_slots(Model& model, const EngineOptions& opt) {
    if (opt.n_slots <= 0 || opt.n_ctx <= 0) return make_error("slots and context must be positive");
    const ModelConfig& cfg = model.config();
    const bool spec = opt.speculative > 0;
    const KvStore store = kv_store_for(opt.quant_sim);  // as Engine makes its caches
    SlotPlan p;
    p.bytes_per_slot = KvCache::bytes_for(cfg, opt.n_ctx, spec, store);
    if (spec) p.bytes_per_slot += (size_t)cfg.hc_dim() * sizeof(float) * (cfg.window + 2);  // Engine's buffers
    if (opt.kv_memory > 0) {
        p.budget = opt.kv_memory;
    } else {
        const size_t free = model.backend().memory_free();
        if (free == SIZE_MAX) {
            p.slots = opt.n_slots;
            p.budget = SIZE_MAX;
            return p;
        }
        const int64_t rows = std::max(resolved_prefill_chunk(opt, model.backend()), (int64_t)opt.n_slots);
        p.reserve = step_activation_bytes(cfg, rows);
        p.budget = free > p.reserve ? free - p.reserve : 0;
    }
    const size_t fit = p.budget / std::max<size_t>(p.bytes_per_slot, 1);
    p.slots = (int)std::min<size_t>((size_t)opt.n_slots, fit);
    if (p.slots == 0) {
        // How long a context one slot could hold, by halving (the size is linear in n_ctx past the windows).
        int64_t ctx = opt.n_ctx;
        while (ctx > 256 && KvCache::bytes_for(cfg, ctx, spec, store) > p.budget) ctx /= 2;
        std::string hint = KvCache::bytes_for(cfg, ctx, spec, store) <= p.budget
                               ? "lower the context (--ctx " + std::to_string(ctx) + " fits)"
                               : "use a smaller model or a device with more memory";
        return make_error("one sequence of " + std::to_string(opt.n_ctx) + " tokens needs " +
                          gb((double)p.bytes_per_slot) + " of KV cache, but " + gb((double)p.budget) +
                          " is free beside the weights" +
                          (p.reserve ? " and " + gb((double)p.reserve) + " kept for a step's activations" : "") +
                          ": " + hint);
    }
    return p;
}

std::string describe_slot_limit(const SlotPlan& plan, const EngineOptions& opt) {
    return std::to_string(opt.n_slots) + " slots of " + std::to_string(opt.n_ctx) + " tokens need " +
           gb((double)plan.bytes_per_slot * opt.n_slots) + " of KV cache (" + gb((double)plan.bytes_per_slot) +
           " each); " + gb((double)plan.budget) + " is free for it, so " + std::to_string(plan.slots) +
           " run at once and further requests wait in the queue (a shorter --ctx fits more)";
}

}  // namespace dsv4
