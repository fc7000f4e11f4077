// Expert parallelism without a GPU: a golden model split over 2 and 3 ranks (CPU backends, a thread each,
// joined by the in-process collective), every rank holding its share of the routed experts, gives every rank
// the one-rank model's logits bit for bit, through a prefill in chunks and token-by-token decoding with step
// graphs (the collective is an op, so a replayed step runs it too), and also in exact mode.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "exec/step_runner.h"
#include "exec/thread_collective.h"
#include "model/deepseek4.h"

using namespace dsv4;

namespace {

struct RankRun {
    std::vector<float> logits;  // every row of the prefill chunks, then every decode step's
    size_t weight_bytes = 0;
};

// The tokens: the first `prefill` in chunks of 37, then the rest one at a time.
Status run_rank(const std::string& model_path, const ExpertShard& shard, Collective* coll, bool quant_sim,
                const std::vector<int32_t>& tokens, int64_t prefill, RankRun& out) {
    auto backend = make_cpu_backend(1);
    DSV4_TRY(backend->set_collective(coll));
    ModelLoadOptions lo;
    lo.shard = shard;
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::load(model_path, *backend, lo));
    out.weight_bytes = m->weights().bytes_matrices;
    StepRunner runner(*m);
    auto cache = m->new_cache((int64_t)tokens.size(), false);
    StepOptions opt;
    opt.quant_sim = quant_sim;
    std::vector<float> l;
    for (int64_t p = 0; p < (int64_t)tokens.size();) {
        const int64_t n = p < prefill ? std::min<int64_t>(37, prefill - p) : 1;
        opt.all_logits = n > 1;
        DSV4_TRY(runner.step(*cache, std::span<const int32_t>(tokens.data() + p, n), opt, &l));
        out.logits.insert(out.logits.end(), l.begin(), l.end());
        p += n;
    }
    return {};
}

// The golden set's token sequence (manifest.json: its prefill, then its decode tokens).
std::vector<int32_t> golden_tokens(const std::string& set, int64_t& prefill) {
    std::ifstream f(std::string(DSV4_SHARED_DIR) + "/golden/" + set + "/manifest.json");
    const auto m = nlohmann::json::parse(f);
    prefill = m["prefill_len"].get<int64_t>();
    const int64_t n = prefill + m["decode_len"].get<int64_t>();
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(m["tokens"][i].get<int32_t>());
    return t;
}

class ExpertParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertParallel, SplitModelGivesTheWholeModelsLogits) {
    const std::string set = GetParam();
    const std::string path = std::string(DSV4_SHARED_DIR) + "/golden/" + set + "/model.gguf";
    int64_t prefill = 0;
    const auto tokens = golden_tokens(set, prefill);
    for (bool quant_sim : {true, false}) {
        RankRun whole;
        ASSERT_TRUE(run_rank(path, {}, nullptr, quant_sim, tokens, prefill, whole).ok());
        for (int ranks : {2, 3}) {
            auto colls = make_thread_collectives(ranks);
            std::vector<RankRun> runs((size_t)ranks);
            std::vector<Status> st((size_t)ranks);
            std::vector<std::thread> threads;
            for (int r = 0; r < ranks; ++r)
                threads.emplace_back([&, r] {
                    st[r] = run_rank(path, ExpertShard{r, ranks}, colls[r].get(), quant_sim, tokens, prefill, runs[r]);
                });
            for (auto& t : threads) t.join();
            size_t split_bytes = 0;
            for (int r = 0; r < ranks; ++r) {
                ASSERT_TRUE(st[r].ok()) << set << " rank " << r << ": " << st[r].error();
                ASSERT_EQ(runs[r].logits.size(), whole.logits.size());
                for (size_t i = 0; i < whole.logits.size(); ++i)
                    ASSERT_EQ(runs[r].logits[i], whole.logits[i])
                        << set << (quant_sim ? "" : " exact") << ", " << ranks << " ranks, rank " << r << ", logit " << i;
                split_bytes += runs[r].weight_bytes;
                EXPECT_LT(runs[r].weight_bytes, whole.weight_bytes) << "a rank holds only its experts";
            }
            // The experts are held once in all, everything else by every rank.
            EXPECT_GT(split_bytes, whole.weight_bytes);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Golden, ExpertParallel, ::testing::Values("flash-mini", "pro-mini", "quant-mini"));

TEST(ExpertShardLoad, TooManyRanksIsRefused) {
    auto b = make_cpu_backend(1);
    ModelLoadOptions lo;
    lo.shard = ExpertShard{0, 9};  // quant-mini has 8 routed experts
    auto m = Model::load(std::string(DSV4_SHARED_DIR) + "/golden/quant-mini/model.gguf", *b, lo);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("too few to split over 9 ranks"), std::string::npos) << m.error();
}

}  // namespace
