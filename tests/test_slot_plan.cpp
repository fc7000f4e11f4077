// Memory planning of the engine's KV-cache slots (runtime/slot_plan.h): the planned size of a cache is the
// size a constructed cache has, for every golden model's layout (with and without the MTP block's window);
// a budget takes as many slots as fit and no more; one that holds none is refused with the sizes and a
// context that would fit.
#include <gtest/gtest.h>

#include "model/deepseek4.h"
#include "model/kv_cache.h"
#include "runtime/slot_plan.h"

using namespace dsv4;

namespace {

std::unique_ptr<Model> load(Backend& b, const std::string& set) {
    auto m = Model::load(std::string(DSV4_SHARED_DIR) + "/golden/" + set + "/model.gguf", b);
    EXPECT_TRUE(m.ok()) << m.error();
    return m.ok() ? std::move(*m) : nullptr;
}

TEST(SlotPlan, PlannedBytesAreTheConstructedCachesBytes) {
    auto b = make_cpu_backend(1);
    for (const char* set : {"flash-mini", "pro-mini", "quant-mini"}) {
        auto m = load(*b, set);
        ASSERT_TRUE(m);
        for (int64_t cap : {1, 3, 100, 129, 4096, 5001})
            for (bool mtp : {false, true})
                for (KvStore store : {KvStore::exact, KvStore::quant_sim}) {
                    KvCache c(m->config(), *b, cap, mtp, store);
                    EXPECT_EQ(KvCache::bytes_for(m->config(), cap, mtp, store), c.bytes())
                        << set << " capacity " << cap << (mtp ? " with the MTP window" : "")
                        << (store == KvStore::quant_sim ? ", quant-sim store" : "");
                }
    }
}

TEST(SlotPlan, BudgetTakesTheSlotsThatFit) {
    auto b = make_cpu_backend(1);
    auto m = load(*b, "flash-mini");
    ASSERT_TRUE(m);
    EngineOptions o;
    o.n_ctx = 2048;
    o.n_slots = 64;
    // The engine's caches: the quant-sim store (packed indexer keys) unless it runs exact mode.
    const size_t per = KvCache::bytes_for(m->config(), o.n_ctx, false, KvStore::quant_sim);
    EXPECT_LT(per, KvCache::bytes_for(m->config(), o.n_ctx, false, KvStore::exact));
    o.kv_memory = 3 * per + per / 2;
    auto p = plan_slots(*m, o);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(p->slots, 3);
    EXPECT_EQ(p->bytes_per_slot, per);
    const std::string msg = describe_slot_limit(*p, o);
    EXPECT_NE(msg.find("64 slots of 2048 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("so 3 run at once"), std::string::npos) << msg;
    // Room for more than asked: the slots asked for.
    o.n_slots = 2;
    p = plan_slots(*m, o);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->slots, 2);
    // The free memory of the backend when no budget is given: this machine has room for one small cache.
    o.kv_memory = 0;
    o.n_ctx = 64;
    p = plan_slots(*m, o);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_GE(p->slots, 1);
    EXPECT_GT(p->reserve, 0u);
    // Exact mode plans the f32 store's size.
    o.quant_sim = false;
    o.kv_memory = 0;
    p = plan_slots(*m, o);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(p->bytes_per_slot, KvCache::bytes_for(m->config(), 64, false, KvStore::exact));
}

TEST(SlotPlan, NoSlotFitsIsAClearError) {
    auto b = make_cpu_backend(1);
    auto m = load(*b, "flash-mini");
    ASSERT_TRUE(m);
    EngineOptions o;
    o.n_ctx = 1 << 20;
    o.n_slots = 4;
    o.kv_memory = KvCache::bytes_for(m->config(), 8192, false, KvStore::quant_sim);
    auto p = plan_slots(*m, o);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().find("one sequence of 1048576 tokens needs"), std::string::npos) << p.error();
    EXPECT_NE(p.error().find("--ctx 8192 fits"), std::string::npos) << p.error();
}

}  // namespace
