// The generation engine on a synthetic tiny model with the real DeepSeek vocabulary: greedy output is the
// same with and without the prefix cache (also for multi-turn conversations that extend an earlier turn),
// requests batched together give the same output as alone, cancel and limits behave.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "format/gguf.h"
#include "model/synth.h"
#include "runtime/engine.h"

using namespace dsv4;

namespace {

const std::string kVocab = std::string(DSV4_SHARED_DIR) + "/fixtures/tokenizer/deepseek_v3/vocab.gguf";

// One tiny model for the whole suite, written once into the temp folder.
class EngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        path_ = (std::filesystem::temp_directory_path() / ("dsv4_engine_test_" + std::to_string(getpid()) + ".gguf")).string();
        auto vocab = GgufFile::open(kVocab);
        ASSERT_TRUE(vocab.ok()) << vocab.error();
        auto hp = synth_preset("tiny");
        ASSERT_TRUE(hp.ok()) << hp.error();
        auto nv = synth_vocab_size(**vocab);
        ASSERT_TRUE(nv.ok());
        hp->n_vocab = *nv;
        SynthWriteOptions wo;
        wo.seed = 7;
        wo.vocab = vocab->get();
        ASSERT_TRUE(synth_write(*hp, SynthTypes{}, wo, path_).ok());
        backend_ = make_cpu_backend(2).release();
        auto m = Model::load(path_, *backend_);
        ASSERT_TRUE(m.ok()) << m.error();
        model_ = m->release();
        auto t = Tokenizer::from_gguf(model_->file());
        ASSERT_TRUE(t.ok()) << t.error();
        tok_ = t->release();
    }
    static void TearDownTestSuite() {
        delete tok_;
        delete model_;
        delete backend_;
        std::remove(path_.c_str());
    }

    struct Out {
        std::vector<int32_t> tokens;
        std::string text;
        TokenEvent last;
    };
    static GenerationRequest greedy(std::vector<int32_t> prompt, int64_t n) {
        GenerationRequest r;
        r.prompt = std::move(prompt);
        r.max_tokens = n;
        r.sampling.temperature = 0;
        r.ignore_eos = true;
        return r;
    }
    static uint64_t submit(Engine& e, GenerationRequest r, Out& out) {
        auto id = e.submit(std::move(r), [&out](const TokenEvent& ev) {
            if (ev.token >= 0) out.tokens.push_back(ev.token);
            out.text += ev.text;
            if (ev.finished) out.last = ev;
        });
        EXPECT_TRUE(id.ok()) << id.error();
        return id.ok() ? *id : 0;
    }
    static Out generate(Engine& e, GenerationRequest r) {
        Out o;
        submit(e, std::move(r), o);
        e.run_until_idle();
        return o;
    }
    static EngineOptions options(bool prefix) {
        EngineOptions o;
        o.n_slots = 4;
        o.n_ctx = 512;
        o.prefill_chunk = 48;
        o.prefix_cache = prefix;
        o.prefix_block = 16;
        return o;
    }

    static inline std::string path_;
    static inline Backend* backend_ = nullptr;
    static inline Model* model_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
};

TEST_F(EngineTest, PrefixCacheGivesIdenticalOutputAcrossTurns) {
    Engine plain(*model_, *tok_, options(false));
    Engine cached(*model_, *tok_, options(true));
    std::vector<int32_t> turn = tok_->encode("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Plan a trip to Paris in three steps, and explain each.<｜Assistant｜>", true);
    // Three turns: each prompt is the previous prompt + its answer + a new user message.
    for (int t = 0; t < 3; ++t) {
        Out a = generate(plain, greedy(turn, 12));
        Out b = generate(cached, greedy(turn, 12));
        ASSERT_EQ(a.tokens, b.tokens) << "turn " << t;
        EXPECT_EQ(a.text, b.text);
        EXPECT_EQ(a.last.reason, GenerationEnd::length);
        if (t > 0) {
            EXPECT_GT(b.last.cached_tokens, 0) << "turn " << t << " should reuse the earlier turn";
        }
        EXPECT_EQ(a.last.cached_tokens, 0);
        turn.insert(turn.end(), a.tokens.begin(), a.tokens.end());
        auto more = tok_->encode("<｜User｜>And then what about step " + std::to_string(t + 2) + "?<｜Assistant｜>", true);
        turn.insert(turn.end(), more.begin(), more.end());
    }
    EXPECT_GT(cached.stats().prefix_cache_hits, 0u);
}

TEST_F(EngineTest, BatchedRequestsMatchSoloRuns) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 6; ++i)
        prompts.push_back(tok_->encode("Request number " + std::to_string(i) + std::string(i * 7, 'x') + " says hello", false));
    std::vector<Out> solo;
    {
        Engine e(*model_, *tok_, options(false));
        for (auto& p : prompts) solo.push_back(generate(e, greedy(p, 10)));
    }
    Engine e(*model_, *tok_, options(false));
    std::vector<Out> together(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) submit(e, greedy(prompts[i], 10), together[i]);
    e.run_until_idle();
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(solo[i].tokens, together[i].tokens) << "request " << i;
        EXPECT_EQ(together[i].last.completion_tokens, 10);
        EXPECT_TRUE(together[i].last.finished);
    }
    EXPECT_EQ(e.stats().requests_finished, prompts.size());
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
    Engine e(*model_, *tok_, options(true));
    auto req = [&](uint64_t seed) {
        GenerationRequest r = greedy(tok_->encode("Once upon a time", false), 16);
        r.sampling.temperature = 1.0f;
        r.sampling.seed = seed;
        return r;
    };
    Out a = generate(e, req(123)), b = generate(e, req(123)), c = generate(e, req(124));
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_NE(a.tokens, c.tokens);
}

TEST_F(EngineTest, CancelAndLimits) {
    EngineOptions o = options(false);
    o.max_queue = 2;
    o.n_slots = 1;
    Engine e(*model_, *tok_, o);
    Out a, b;
    const uint64_t ida = submit(e, greedy(tok_->encode("first", false), 200), a);
    submit(e, greedy(tok_->encode("second", false), 5), b);
    // Queue holds 2: a third is rejected.
    auto r = e.submit(greedy(tok_->encode("third", false), 5), [](const TokenEvent&) {});
    EXPECT_FALSE(r.ok());
    for (int i = 0; i < 5; ++i) e.step();
    e.cancel(ida);
    e.run_until_idle();
    EXPECT_EQ(a.last.reason, GenerationEnd::cancelled);
    EXPECT_LT(a.tokens.size(), 200u);
    EXPECT_EQ(b.last.reason, GenerationEnd::length);
    EXPECT_EQ(b.tokens.size(), 5u);
    // Prompt + max_tokens beyond the context: rejected with a message naming the sizes.
    auto big = e.submit(greedy(std::vector<int32_t>(500, 100), 100), [](const TokenEvent&) {});
    ASSERT_FALSE(big.ok());
    EXPECT_NE(big.error().find("context"), std::string::npos);
    auto bad = e.submit(greedy(std::vector<int32_t>{-5}, 1), [](const TokenEvent&) {});
    EXPECT_FALSE(bad.ok());
}

TEST_F(EngineTest, StopStringsEndGeneration) {
    Engine e(*model_, *tok_, options(false));
    Out a = generate(e, greedy(tok_->encode("Count with me", false), 12));
    ASSERT_GE(a.text.size(), 4u);
    // Use a piece of the text the model produces greedily as a stop string: output must end before it.
    const std::string stop = a.text.substr(a.text.size() / 2, 3);
    GenerationRequest r = greedy(tok_->encode("Count with me", false), 12);
    r.stop = {stop};
    Out b = generate(e, std::move(r));
    EXPECT_EQ(b.last.reason, GenerationEnd::stop);
    EXPECT_EQ(b.text.find(stop), std::string::npos);
    EXPECT_EQ(a.text.substr(0, b.text.size()), b.text);
}

}  // namespace
