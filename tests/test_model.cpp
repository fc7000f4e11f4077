// Model-level properties that the golden logits alone do not pin down: batching several sequences in one step
// equals running them alone, cache snapshots restore exactly, multi-token steps from any position equal
// token-by-token decoding, and bad input fails with a message instead of crashing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "ops/graph_support.h"
#include "util/forwarding_backend.h"
#include "util/step_chunks.h"

using namespace dsv4;

namespace {

const std::string kModel = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini/model.gguf";

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = (int32_t)(rng() % vocab);
    return t;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, (double)std::fabs(a[i] - b[i]));
    return m;
}

class ModelTest : public ::testing::Test {
protected:
    void SetUp() override {
        backend_ = make_cpu_backend(2);
        auto m = Model::load(kModel, *backend_);
        ASSERT_TRUE(m.ok()) << m.error();
        model_ = std::move(*m);
        runner_ = std::make_unique<StepRunner>(*model_);
    }
    // Logits of every token, fed as chunks of the given sizes (cycled).
    std::vector<float> run(const std::vector<int32_t>& toks, std::vector<int64_t> chunks, bool qsim = true) {
        auto cache = model_->new_cache((int64_t)toks.size(), false);
        StepOptions opt;
        opt.quant_sim = qsim;
        opt.all_logits = true;
        return test::step_in_chunks(*runner_, *cache, toks, chunks, opt);
    }
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<StepRunner> runner_;  // every step goes through step graphs where StepOptions allow them
};

TEST_F(ModelTest, IrregularChunksEqualOneShot) {
    // Chunk boundaries that straddle window (32) and compression-block (4, 128) edges.
    const auto toks = random_tokens(300, model_->config().n_vocab, 1);
    const auto one = run(toks, {300});
    EXPECT_LT(max_diff(one, run(toks, {1, 3, 29, 5, 130, 2})), 1e-4);
    EXPECT_LT(max_diff(one, run(toks, {127, 1, 1, 200})), 1e-4);
}

TEST_F(ModelTest, BatchedStepEqualsSeparateSteps) {
    const int64_t V = model_->config().n_vocab;
    std::vector<std::vector<int32_t>> seqs = {random_tokens(70, V, 2), random_tokens(5, V, 3),
                                              random_tokens(140, V, 4)};
    StepOptions opt;
    opt.all_logits = true;
    // Separately: each sequence prefilled (first part) then one more token.
    std::vector<std::vector<float>> want(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
        auto cache = model_->new_cache(200, false);
        std::vector<float> l;
        ASSERT_TRUE(runner_->step(*cache, std::span<const int32_t>(seqs[i].data(), seqs[i].size() - 1), opt, &l).ok());
        ASSERT_TRUE(runner_->step(*cache, std::span<const int32_t>(&seqs[i].back(), 1), opt, &l).ok());
        want[i] = l;
    }
    // Batched: the prefills together, then the single decode tokens together.
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<Model::BatchItem> items(seqs.size());
    std::vector<std::vector<float>> got(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
        caches.push_back(model_->new_cache(200, false));
        items[i].cache = caches[i].get();
        items[i].tokens = std::span<const int32_t>(seqs[i].data(), seqs[i].size() - 1);
    }
    ASSERT_TRUE(runner_->step_batch(items, opt).ok());
    for (size_t i = 0; i < seqs.size(); ++i) {
        items[i].tokens = std::span<const int32_t>(&seqs[i].back(), 1);
        items[i].logits = &got[i];
        items[i].all_logits = false;
    }
    ASSERT_TRUE(runner_->step_batch(items, opt).ok());
    for (size_t i = 0; i < seqs.size(); ++i) {
        EXPECT_EQ(caches[i]->pos(), (int64_t)seqs[i].size());
        EXPECT_LT(max_diff(want[i], got[i]), 1e-5) << "sequence " << i;
    }
}

TEST_F(ModelTest, BatchedDecodeEqualsSoloDecodeBitForBit) {
    // Sequences at different depths decode together for 150 steps (through the window (32) and the 4- and
    // 128-token compression blocks, each sequence completing its entries at its own steps): the decode group's
    // per-row cache tables must give every sequence exactly its solo logits on the CPU. Every third step a
    // sequence that prefills a chunk joins the step, so the group shares it with a multi-token sequence.
    const int64_t V = model_->config().n_vocab;
    const std::vector<int64_t> depths = {1, 3, 30, 33, 126, 129};
    const int steps = 150;
    StepOptions opt;
    std::vector<std::vector<int32_t>> toks;
    for (size_t i = 0; i < depths.size(); ++i) toks.push_back(random_tokens(depths[i] + steps, V, 40 + (uint32_t)i));
    const auto chunky = random_tokens(400, V, 50);
    auto prefill = [&](KvCache& cache, size_t i) {
        std::vector<float> l;
        ASSERT_TRUE(runner_->step(cache, std::span<const int32_t>(toks[i].data(), depths[i]), opt, &l).ok());
    };
    // Solo: each sequence alone.
    std::vector<std::vector<float>> want(depths.size());
    for (size_t i = 0; i < depths.size(); ++i) {
        auto cache = model_->new_cache(depths[i] + steps, false);
        prefill(*cache, i);
        std::vector<float> l;
        for (int t = 0; t < steps; ++t) {
            ASSERT_TRUE(runner_->step(*cache, std::span<const int32_t>(&toks[i][depths[i] + t], 1), opt, &l).ok());
            want[i].insert(want[i].end(), l.begin(), l.end());
        }
    }
    // Batched, the chunked sequence in the middle of the items every third step.
    std::vector<std::unique_ptr<KvCache>> caches;
    for (size_t i = 0; i < depths.size(); ++i) {
        caches.push_back(model_->new_cache(depths[i] + steps, false));
        prefill(*caches.back(), i);
    }
    auto chunk_cache = model_->new_cache((int64_t)chunky.size(), false);
    int64_t chunk_pos = 0;
    std::vector<std::vector<float>> got(depths.size()), out(depths.size());
    std::vector<float> chunk_logits;
    for (int t = 0; t < steps; ++t) {
        std::vector<Model::BatchItem> items;
        for (size_t i = 0; i < depths.size(); ++i) {
            Model::BatchItem it;
            it.cache = caches[i].get();
            it.tokens = std::span<const int32_t>(&toks[i][depths[i] + t], 1);
            it.logits = &out[i];
            items.push_back(it);
            if (i == 2 && t % 3 == 0 && chunk_pos + 7 <= (int64_t)chunky.size()) {
                Model::BatchItem c;
                c.cache = chunk_cache.get();
                c.tokens = std::span<const int32_t>(chunky.data() + chunk_pos, 7);
                c.logits = &chunk_logits;
                items.push_back(c);
                chunk_pos += 7;
            }
        }
        ASSERT_TRUE(runner_->step_batch(items, opt).ok()) << "step " << t;
        for (size_t i = 0; i < depths.size(); ++i) got[i].insert(got[i].end(), out[i].begin(), out[i].end());
    }
    for (size_t i = 0; i < depths.size(); ++i) {
        ASSERT_EQ(want[i].size(), got[i].size());
        for (size_t k = 0; k < want[i].size(); ++k)
            ASSERT_EQ(want[i][k], got[i][k]) << "sequence " << i << " (depth " << depths[i] << "), step " << k / V;
    }
    // The chunked sequence's last chunk equals its solo run's rows.
    const auto solo = run(std::vector<int32_t>(chunky.begin(), chunky.begin() + chunk_pos), {7});
    const std::vector<float> last(solo.end() - V, solo.end());
    EXPECT_LT(max_diff(last, chunk_logits), 1e-5);
}

TEST_F(ModelTest, SnapshotRestoreIsExact) {
    const int64_t V = model_->config().n_vocab;
    const auto prefix = random_tokens(150, V, 5);
    const auto a = random_tokens(40, V, 6), b = random_tokens(40, V, 7);
    auto cache = model_->new_cache(400, false);
    StepOptions opt;
    opt.all_logits = true;
    std::vector<float> l;
    ASSERT_TRUE(runner_->step(*cache, prefix, opt, &l).ok());
    const auto snap = cache->snapshot();
    std::vector<float> la, lb;
    ASSERT_TRUE(runner_->step(*cache, a, opt, &la).ok());
    ASSERT_TRUE(cache->restore(snap).ok());
    EXPECT_EQ(cache->pos(), 150);
    ASSERT_TRUE(runner_->step(*cache, b, opt, &lb).ok());
    // Fresh runs of prefix+a and prefix+b give the same rows.
    auto fresh = [&](const std::vector<int32_t>& tail) {
        std::vector<int32_t> all = prefix;
        all.insert(all.end(), tail.begin(), tail.end());
        auto v = run(all, {150, 40});
        return std::vector<float>(v.end() - 40 * V, v.end());
    };
    EXPECT_LT(max_diff(fresh(b), lb), 1e-5);
    EXPECT_LT(max_diff(fresh(a), la), 1e-5);
}

TEST_F(ModelTest, PromptOfALengthSeenBeforeReplaysTheFirstOnesRecording) {
    // A prompt's chunk from position 0 is recorded up to kMaxGraphChunkTokens tokens, so once a length's prompts
    // (other tokens, the same cache) have captured its graph, the next ones replay it. On the CPU a replay runs the
    // first recording's ops with the current step's uploads: logits equal to an unrecorded run show that nothing a
    // prompt chunk passes to an op depends on its tokens, only on its length. Decoding after it checks the
    // cache the replay wrote.
    const int64_t V = model_->config().n_vocab;
    for (const int64_t n : {int64_t{5}, int64_t{33}, kMaxGraphChunkTokens}) {
        SCOPED_TRACE(n);
        const auto gen = random_tokens(6, V, 20);
        std::vector<int64_t> prompt_replays;
        // One cache for every prompt, reset between them, as the engine's slots are (a replay writes the cache
        // its recording wrote).
        auto cache = model_->new_cache(n + 8, false);
        auto answer = [&](StepRunner& runner, const std::vector<int32_t>& prompt, bool graphs) {
            StepOptions opt;
            opt.graphs = graphs;
            opt.all_logits = true;
            cache->reset();
            std::vector<float> all, l;
            const int64_t replays0 = runner.graph_stats() ? runner.graph_stats()->replays : 0;
            EXPECT_TRUE(runner.step(*cache, prompt, opt, &all).ok());
            if (graphs) prompt_replays.push_back(runner.graph_stats()->replays - replays0);
            opt.all_logits = false;
            for (int32_t t : gen) {
                EXPECT_TRUE(runner.step(*cache, std::span<const int32_t>(&t, 1), opt, &l).ok());
                all.insert(all.end(), l.begin(), l.end());
            }
            return all;
        };
        // A chunk of more than kMaxGraphTokens tokens runs as issued kEagerRunsChunk times before its capture.
        const int64_t eager = n > kMaxGraphTokens ? kEagerRunsChunk : kEagerRunsDecode;
        StepRunner runner(*model_);
        for (uint32_t seed = 11; seed < 13 + (uint32_t)eager; ++seed) {
            const auto prompt = random_tokens(n, V, seed + 100 * (uint32_t)n);
            const auto recorded = answer(runner, prompt, true);
            StepRunner plain(*model_);
            const auto want = answer(plain, prompt, false);
            ASSERT_EQ(recorded.size(), want.size());
            for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(recorded[i], want[i]) << "prompt " << seed << " logit " << i;
        }
        // The prompt chunk: as issued `eager` times, then captured and replayed, then replayed.
        std::vector<int64_t> want_replays((size_t)eager, 0);
        want_replays.insert(want_replays.end(), {1, 1});
        EXPECT_EQ(prompt_replays, want_replays);
        const StepGraphStats* st = runner.graph_stats();
        EXPECT_EQ(st->segments, (eager + 2) * (1 + (int64_t)gen.size()));
        EXPECT_EQ(st->eager + st->replays, st->segments);
    }
}

// The CPU backend with the routed experts' op first waiting for the device, as a CUDA kernel path does that
// reads device data (per-expert row counts) to plan its launches; its waits are counted for the step graphs.
class WaitingBackend final : public test::ForwardingBackend, public GraphSupport {
public:
    WaitingBackend() : ForwardingBackend(2) {}
    const char* name() const override { return "cpu-waiting"; }
    void download(void* dst, const void* src, size_t bytes) override {
        ++waits_;
        ForwardingBackend::download(dst, src, bytes);
    }
    void synchronize() override {
        ++waits_;
        ForwardingBackend::synchronize();
    }
    GraphSupport* graph_support() override { return this; }
    void* alloc_staging(size_t bytes) override { return stored_.alloc_staging(bytes); }
    void free_staging(void* p) override { stored_.free_staging(p); }
    void* capture(const std::function<void()>& issue) override { return stored_.capture(issue); }
    void launch(void* graph) override { stored_.launch(graph); }
    void destroy(void* graph) override { stored_.destroy(graph); }
    int64_t host_waits() const override { return waits_; }

private:
    void before_op(const char* op) override {
        if (std::string(op) == "moe_experts") synchronize();
    }
    StoredOpsSupport stored_;
    int64_t waits_ = 0;
};

TEST(StepGraphs, AStepWhoseOpsWaitForTheDeviceIsNeverCaptured) {
    // A capture does not run the ops, so one that waits inside it would wait on nothing (CUDA refuses: the
    // stream is capturing). Such a step keeps running as issued, with the logits of a run without graphs.
    WaitingBackend backend;
    auto m = Model::load(kModel, backend);
    ASSERT_TRUE(m.ok()) << m.error();
    Model& model = **m;
    const int64_t V = model.config().n_vocab;
    auto cache = model.new_cache(64, false);
    auto answer = [&](StepRunner& runner, const std::vector<int32_t>& prompt, bool graphs) {
        StepOptions opt;
        opt.graphs = graphs;
        cache->reset();
        std::vector<float> l;
        EXPECT_TRUE(runner.step(*cache, prompt, opt, &l).ok());
        return l;
    };
    StepRunner runner(model), plain(model);
    for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto prompt = random_tokens(5, V, 40 + seed);
        const auto recorded = answer(runner, prompt, true);
        ASSERT_EQ(recorded, answer(plain, prompt, false)) << "prompt " << seed;
    }
    const StepGraphStats* st = runner.graph_stats();
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->segments, 4);
    EXPECT_EQ(st->captures, 0);
    EXPECT_EQ(st->eager, 4);
}

TEST_F(ModelTest, StepGraphReplaysEqualStepsRunAsIssued) {
    // Decode through the window (32) and several compressor blocks (4 and 128): with step graphs on, the CPU
    // backend replays the first recording of a step's ops (not the current ones) with the new uploads, so
    // equal logits show that a decode step's op arguments do not depend on the position.
    const int64_t V = model_->config().n_vocab;
    const auto prompt = random_tokens(kMaxGraphChunkTokens + 6, V, 7), gen = random_tokens(280, V, 8);
    auto decode = [&](bool graphs) {
        StepOptions opt;
        opt.graphs = graphs;
        auto cache = model_->new_cache(400, false);
        std::vector<float> l, all;
        EXPECT_TRUE(runner_->step(*cache, prompt, opt, &l).ok());  // more than kMaxGraphChunkTokens: as issued
        all = l;
        for (int32_t t : gen) {
            EXPECT_TRUE(runner_->step(*cache, std::span<const int32_t>(&t, 1), opt, &l).ok());
            all.insert(all.end(), l.begin(), l.end());
        }
        return all;
    };
    const auto plain = decode(false);
    EXPECT_EQ(runner_->graph_stats(), nullptr);
    const auto graphed = decode(true);
    ASSERT_EQ(plain.size(), graphed.size());
    for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i], graphed[i]) << "logit " << i;
    const StepGraphStats* st = runner_->graph_stats();
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->segments, (int64_t)gen.size());
    // Three kinds of decode step (no entry completes, a ratio-4 entry does, both do): each runs as issued the
    // first time, is captured the second; every other step is a replay.
    EXPECT_LE(st->captures, 3);
    EXPECT_GE(st->replays, (int64_t)gen.size() - 6);
    EXPECT_EQ(st->eager + st->replays, st->segments);
}

TEST_F(ModelTest, MixedStepsEqualSoloStepsBitForBit) {
    // A multi-token sequence listed before single-token ones (a speculative verify step beside plain decodes):
    // the step lays the single-token rows out first, and every sequence still gets its solo logits exactly.
    const int64_t V = model_->config().n_vocab;
    const auto pa = random_tokens(40, V, 81), pb = random_tokens(9, V, 82), pc = random_tokens(70, V, 83);
    const auto more = random_tokens(30, V, 84);
    StepOptions opt;
    auto prep = [&](const std::vector<int32_t>& p) {
        auto c = model_->new_cache(200, false);
        std::vector<float> l;
        EXPECT_TRUE(runner_->step(*c, p, opt, &l).ok());
        return c;
    };
    for (int round = 0; round < 2; ++round) {
        auto a = prep(pa), b = prep(pb), c = prep(pc);
        auto a1 = prep(pa), b1 = prep(pb), c1 = prep(pc);
        for (int step = 0; step < 6; ++step) {
            const int64_t na = 1 + (step + round) % 4;  // 1..4 tokens: sometimes single, sometimes not
            std::span<const int32_t> ta(more.data() + step * 4, na), tb(more.data() + 24 + step % 3, 1),
                tc(more.data() + 27 - step % 2, 1);
            std::vector<float> la, lb, lc, sa, sb, sc;
            std::vector<Model::BatchItem> items(3);
            items[0].cache = a.get();
            items[0].tokens = ta;
            items[0].all_logits = true;
            items[0].logits = &la;
            items[1].cache = b.get();
            items[1].tokens = tb;
            items[1].logits = &lb;
            items[2].cache = c.get();
            items[2].tokens = tc;
            items[2].logits = &lc;
            ASSERT_TRUE(runner_->step_batch(items, opt).ok());
            StepOptions all = opt;
            all.all_logits = true;
            ASSERT_TRUE(runner_->step(*a1, ta, all, &sa).ok());
            ASSERT_TRUE(runner_->step(*b1, tb, opt, &sb).ok());
            ASSERT_TRUE(runner_->step(*c1, tc, opt, &sc).ok());
            ASSERT_EQ(la, sa) << "round " << round << " step " << step << ": the multi-token sequence";
            ASSERT_EQ(lb, sb) << "round " << round << " step " << step;
            ASSERT_EQ(lc, sc) << "round " << round << " step " << step;
        }
    }
}

TEST_F(ModelTest, ABatchedDecodeGraphServesAnySequencesOfItsSize) {
    // Steps of two single-token sequences drawn from four at different depths, a different pair each step:
    // the decode group reaches its caches through tables uploaded with the step, so one recording serves every
    // pair (its key depends on the group's size only), and the replays give the eager steps' logits exactly.
    const int64_t V = model_->config().n_vocab;
    const int pairs[][2] = {{0, 1}, {2, 3}, {1, 2}, {3, 0}, {0, 2}, {1, 3}};
    auto run = [&](bool graphs, const StepGraphStats** stats) {
        StepOptions opt;
        opt.graphs = graphs;
        std::vector<std::unique_ptr<KvCache>> caches;
        std::vector<float> l, all;
        for (int i = 0; i < 4; ++i) {
            caches.push_back(model_->new_cache(200, false));
            const auto p = random_tokens(5 + 31 * i, V, 60 + (uint32_t)i);
            EXPECT_TRUE(runner_->step(*caches.back(), p, opt, &l).ok());
        }
        const auto gen = random_tokens(2 * 48, V, 70);
        for (int s = 0; s < 48; ++s) {
            std::vector<std::vector<float>> out(2);
            std::vector<Model::BatchItem> items(2);
            for (int i = 0; i < 2; ++i) {
                items[i].cache = caches[pairs[s % 6][i]].get();
                items[i].tokens = std::span<const int32_t>(&gen[2 * s + i], 1);
                items[i].logits = &out[i];
            }
            EXPECT_TRUE(runner_->step_batch(items, opt).ok());
            for (auto& o : out) all.insert(all.end(), o.begin(), o.end());
        }
        *stats = runner_->graph_stats();
        return all;
    };
    const StepGraphStats* st = nullptr;
    const auto plain = run(false, &st);
    const int64_t replays0 = st ? st->replays : 0;
    const auto graphed = run(true, &st);
    ASSERT_EQ(plain.size(), graphed.size());
    for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i], graphed[i]) << "logit " << i;
    ASSERT_NE(st, nullptr);
    EXPECT_GE(st->replays - replays0, 47) << "eager " << st->eager << ", captures " << st->captures;  // all but the first
}

TEST_F(ModelTest, StepGraphsOfABatchedDecodeEqualStepsRunAsIssued) {
    const int64_t V = model_->config().n_vocab;
    auto run = [&](bool graphs) {
        StepOptions opt;
        opt.graphs = graphs;
        std::vector<std::unique_ptr<KvCache>> caches;
        std::vector<std::vector<int32_t>> prompts = {random_tokens(9, V, 11), random_tokens(40, V, 12),
                                                     random_tokens(3, V, 13)};
        std::vector<float> l, all;
        for (auto& p : prompts) {
            caches.push_back(model_->new_cache(200, false));
            EXPECT_TRUE(runner_->step(*caches.back(), p, opt, &l).ok());
        }
        const auto gen = random_tokens(3 * 60, V, 14);
        for (int s = 0; s < 60; ++s) {
            std::vector<std::vector<float>> out(3);
            std::vector<Model::BatchItem> items(3);
            for (int i = 0; i < 3; ++i) {
                items[i].cache = caches[i].get();
                items[i].tokens = std::span<const int32_t>(&gen[3 * s + i], 1);
                items[i].logits = &out[i];
            }
            EXPECT_TRUE(runner_->step_batch(items, opt).ok());
            for (auto& o : out) all.insert(all.end(), o.begin(), o.end());
        }
        return all;
    };
    const auto plain = run(false), graphed = run(true);
    ASSERT_EQ(plain.size(), graphed.size());
    for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i], graphed[i]) << "logit " << i;
    EXPECT_GT(runner_->graph_stats()->replays, 30);
}

TEST_F(ModelTest, StepGraphBranchesDeclareEveryDependency) {
    // The model marks independent chains of a step as branches (Backend::branch), which the CUDA backend runs
    // concurrently inside step graphs. Deferring every branch to its join (the latest order the interface
    // allows; several branches of one join latest first) must give the same logits as issue order: a branch
    // that read what the ops beside it write (or the reverse), or an output read before the join, would differ.
    const int64_t V = model_->config().n_vocab;
    const auto prompt = random_tokens(20, V, 21), gen = random_tokens(150, V, 22);  // past a 128-token block
    auto decode = [&](bool defer) {
        StepOptions opt;
        opt.defer_branches = defer;
        std::vector<std::unique_ptr<KvCache>> caches;
        std::vector<float> l, all;
        for (int i = 0; i < 2; ++i) {
            caches.push_back(model_->new_cache(400, false));
            EXPECT_TRUE(runner_->step(*caches.back(), std::span<const int32_t>(prompt.data(), 20 - 7 * i), opt, &l).ok());
        }
        for (size_t t = 0; t + 1 < gen.size(); t += 2) {
            // One sequence alone, then both in one step (a batch's sequences share the branches).
            EXPECT_TRUE(runner_->step(*caches[0], std::span<const int32_t>(&gen[t], 1), opt, &l).ok());
            all.insert(all.end(), l.begin(), l.end());
            std::vector<std::vector<float>> out(2);
            std::vector<Model::BatchItem> items(2);
            for (int i = 0; i < 2; ++i) {
                items[i].cache = caches[i].get();
                items[i].tokens = std::span<const int32_t>(&gen[t + 1 - i], 1);
                items[i].logits = &out[i];
            }
            EXPECT_TRUE(runner_->step_batch(items, opt).ok());
            for (auto& o : out) all.insert(all.end(), o.begin(), o.end());
        }
        return all;
    };
    const auto issued = decode(false), deferred = decode(true);
    ASSERT_EQ(issued.size(), deferred.size());
    for (size_t i = 0; i < issued.size(); ++i) ASSERT_EQ(issued[i], deferred[i]) << "logit " << i;
    EXPECT_GT(runner_->graph_stats()->replays, 100);
}

TEST_F(ModelTest, ModelStepsRunAsIssuedOnlyTheRunnerRecords) {
    // Model::step is the forward pass alone: it never records, whatever StepOptions::graphs says, and gives the
    // runner's logits bit for bit.
    const int64_t V = model_->config().n_vocab;
    const auto gen = random_tokens(12, V, 31);
    auto decode = [&](bool direct) {
        StepOptions opt;
        auto cache = model_->new_cache(16, false);
        std::vector<float> l, all;
        for (int32_t t : gen) {
            const std::span<const int32_t> tok(&t, 1);
            EXPECT_TRUE((direct ? model_->step(*cache, tok, opt, &l) : runner_->step(*cache, tok, opt, &l)).ok());
            all.insert(all.end(), l.begin(), l.end());
        }
        return all;
    };
    const auto direct = decode(true);
    EXPECT_EQ(runner_->graph_stats(), nullptr);
    const auto run = decode(false);
    ASSERT_NE(runner_->graph_stats(), nullptr);
    EXPECT_EQ(runner_->graph_stats()->segments, (int64_t)gen.size());
    ASSERT_EQ(direct.size(), run.size());
    for (size_t i = 0; i < direct.size(); ++i) ASSERT_EQ(direct[i], run[i]) << "logit " << i;
}

TEST_F(ModelTest, BadInputIsAnError) {
    auto cache = model_->new_cache(8, false);
    StepOptions opt;
    std::vector<float> l;
    const int32_t bad = (int32_t)model_->config().n_vocab;
    Status s = runner_->step(*cache, std::vector<int32_t>{1, bad}, opt, &l);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("out of range"), std::string::npos);
    EXPECT_EQ(cache->pos(), 0);
    s = runner_->step(*cache, std::vector<int32_t>(9, 1), opt, &l);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("context full"), std::string::npos);
    EXPECT_FALSE(runner_->step(*cache, std::vector<int32_t>{}, opt, &l).ok());
}

TEST(ModelLoad, MissingFileAndWrongArchitectureFailCleanly) {
    auto backend = make_cpu_backend(1);
    auto m = Model::load("/nonexistent/model.gguf", *backend);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().find("/nonexistent/model.gguf"), std::string::npos);
    // A vocab-only GGUF has no deepseek4 config.
    auto v = Model::load(std::string(DSV4_SHARED_DIR) + "/fixtures/tokenizer/deepseek_v3/vocab.gguf", *backend);
    ASSERT_FALSE(v.ok());
}

}  // namespace
