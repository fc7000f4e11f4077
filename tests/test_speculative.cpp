// Speculative decoding with the MTP block: a rolled-back step leaves the cache bit for bit as if it had never
// seen the rejected tokens (window ring, compressor states, entries, MTP block); greedy output through the
// engine is token-identical with and without speculation (golden models with an MTP block, and the tiny
// synthetic model with the real vocabulary), on the reject path (the MTP block's own drafts, which random
// weights rarely get right) and on the accept path (drafts forced right, always or half the time); sampled
// requests complete through the same verify path (their distribution: test_speculative_slow.cpp); models that
// cannot speculate are refused with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "tokenizer/vocab.h"
#include "util/sanitizer.h"
#include "util/tiny_model.h"

using namespace dsv4;

namespace {

const std::string kGolden = std::string(DSV4_SHARED_DIR) + "/golden/";

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> t((size_t)n);
    for (int32_t& x : t) x = (int32_t)(rng() % (uint32_t)vocab);
    return t;
}

// A byte-level vocabulary of `n` tokens for a golden model (whose file has none): the 256 bytes, then
// distinct printable words; the last token is a control end-of-sequence token.
std::unique_ptr<Tokenizer> word_tokenizer(int64_t n) {
    VocabData d;
    for (int b = 0; b < 256; ++b) {
        std::string t;
        const uint32_t cp = byte_level_codepoint((uint8_t)b);
        if (cp < 0x80) {
            t.push_back((char)cp);
        } else {
            t.push_back((char)(0xC0 | (cp >> 6)));
            t.push_back((char)(0x80 | (cp & 0x3F)));
        }
        d.tokens.push_back(t);
        d.types.push_back((int32_t)TokenType::normal);
    }
    while ((int64_t)d.tokens.size() < n - 1) {
        std::string w = "w";  // (not "w" + to_string: GCC 12 misreads that as an overlapping copy)
        w += std::to_string(d.tokens.size());
        d.tokens.push_back(w);
        d.types.push_back((int32_t)TokenType::normal);
    }
    d.tokens.push_back("<eos>");
    d.types.push_back((int32_t)TokenType::control);
    d.eos = (int32_t)n - 1;
    auto v = Vocab::from_data(d);
    EXPECT_TRUE(v.ok()) << v.error();
    auto t = Tokenizer::from_vocab(std::move(*v));
    EXPECT_TRUE(t.ok()) << t.error();
    return std::move(*t);
}

struct Loaded {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
};

Loaded load_golden(const std::string& set) {
    Loaded l;
    l.backend = make_cpu_backend(2);
    auto m = Model::load(kGolden + set + "/model.gguf", *l.backend);
    EXPECT_TRUE(m.ok()) << m.error();
    if (m.ok()) l.model = std::move(*m);
    return l;
}

// ---- rollback -------------------------------------------------------------------------------------------

// Cache A runs n tokens after the prefix and rolls the last k back; cache B runs only the first n - k. Both
// must hold the same bytes (windows, states, entries up to the position) and give the same logits after.
void check_rollback(Model& m, const std::vector<int32_t>& toks, int64_t P, int64_t n, int64_t k, bool quant_sim) {
    SCOPED_TRACE("prefix " + std::to_string(P) + ", step of " + std::to_string(n) + ", " + std::to_string(k) +
                 " rolled back");
    StepOptions opt;
    opt.quant_sim = quant_sim;
    auto a = m.new_cache(256, false), b = m.new_cache(256, false);
    ASSERT_TRUE(m.step(*a, std::span<const int32_t>(toks.data(), P), opt, nullptr).ok());
    ASSERT_TRUE(m.step(*b, std::span<const int32_t>(toks.data(), P), opt, nullptr).ok());
    // The rejected tokens differ from what follows, as a wrong draft does.
    std::vector<int32_t> step(toks.begin() + P, toks.begin() + P + n);
    for (int64_t j = n - k; j < n; ++j) step[j] = (step[j] + 7) % (int32_t)m.config().n_vocab;
    ASSERT_TRUE(a->save_for_rollback(n).ok());
    ASSERT_TRUE(m.step(*a, step, opt, nullptr).ok());
    ASSERT_TRUE(a->rollback(k).ok());
    if (n - k > 0) {
        ASSERT_TRUE(m.step(*b, std::span<const int32_t>(step.data(), n - k), opt, nullptr).ok());
    }
    ASSERT_EQ(a->pos(), b->pos());
    EXPECT_TRUE(a->snapshot(true).data == b->snapshot(true).data);
    for (int i = 0; i < 6; ++i) {  // then both decode on, crossing more boundaries
        const int32_t t = toks[(size_t)(P + n + i)];
        std::vector<float> la, lb;
        ASSERT_TRUE(m.step(*a, std::span<const int32_t>(&t, 1), opt, &la).ok());
        ASSERT_TRUE(m.step(*b, std::span<const int32_t>(&t, 1), opt, &lb).ok());
        ASSERT_TRUE(la == lb) << "logits differ " << i << " tokens after the rollback";
    }
}

TEST(Rollback, LeavesNoTraceOfRejectedTokens) {
    Loaded g = load_golden("flash-mini");  // window 32, compress ratios 4 and 128
    ASSERT_TRUE(g.model);
    Model& m = *g.model;
    ASSERT_EQ(m.new_cache(8)->rollback_limit(), 4);
    std::mt19937 rng(5);
    const auto toks = random_tokens(rng, 200, m.config().n_vocab);
    // Prefixes around ratio-4 blocks, the window's wrap (32, 64) and the ratio-128 block end (128); under a
    // sanitizer one prefix of each kind (tests/util/sanitizer.h says why fewer).
    for (int64_t P : test::cases<int64_t>({1, 5, 30, 31, 62, 63, 125, 126, 127, 128, 130}, {1, 31, 63, 127, 130}))
        for (int64_t n = 2; n <= 4; ++n)
            for (int64_t k = 1; k <= n; ++k) check_rollback(m, toks, P, n, k, true);
    check_rollback(m, toks, 126, 4, 2, false);  // exact mode
}

TEST(Rollback, UndoesChainedMtpSteps) {
    Loaded g = load_golden("quant-mini");
    ASSERT_TRUE(g.model);
    Model& m = *g.model;
    ASSERT_TRUE(m.has_mtp());
    std::mt19937 rng(9);
    const int64_t P = 45;  // past the 32-token window
    const auto toks = random_tokens(rng, P + 1, m.config().n_vocab);
    auto cache = m.new_cache(128, true);
    StepOptions opt;
    std::vector<float> hidden;
    ASSERT_TRUE(m.step(*cache, std::span<const int32_t>(toks.data(), P), opt, nullptr, &hidden).ok());
    ASSERT_TRUE(m.mtp_step(*cache, hidden, std::span<const int32_t>(toks.data() + 1, P), opt, nullptr).ok());
    const KvCache::Snapshot before = cache->snapshot(true);
    const int64_t hc_d = (int64_t)m.config().hc * m.config().n_embd;
    ASSERT_TRUE(cache->save_for_rollback(3, true).ok());
    for (int j = 0; j < 3; ++j) {
        std::vector<float> h(hidden.end() - hc_d, hidden.end());
        for (float& x : h) x *= 1.5f + (float)j;
        const int32_t t = toks[(size_t)j];
        std::vector<float> logits;
        ASSERT_TRUE(m.mtp_step(*cache, h, std::span<const int32_t>(&t, 1), opt, &logits).ok());
    }
    EXPECT_FALSE(cache->snapshot(true).data == before.data);  // the steps did write
    ASSERT_TRUE(cache->rollback(3, true).ok());
    EXPECT_EQ(cache->mtp_pos(), P);
    EXPECT_TRUE(cache->snapshot(true).data == before.data);
}

TEST(Rollback, RefusesWhatItCannotUndo) {
    Loaded g = load_golden("flash-mini");
    ASSERT_TRUE(g.model);
    auto c = g.model->new_cache(64, false);
    EXPECT_FALSE(c->save_for_rollback(5).ok());  // past the smallest compress ratio (4)
    EXPECT_FALSE(c->rollback(1).ok());            // nothing saved
    ASSERT_TRUE(c->save_for_rollback(2).ok());
    const int32_t t[2] = {1, 2};
    ASSERT_TRUE(g.model->step(*c, t, StepOptions{}, nullptr).ok());
    EXPECT_FALSE(c->rollback(3).ok());  // more than the step
    EXPECT_TRUE(c->rollback(2).ok());
    EXPECT_EQ(c->pos(), 0);
    EXPECT_FALSE(c->save_for_rollback(1, true).ok());  // no MTP part in this cache
}

// ---- the engine ------------------------------------------------------------------------------------------

struct Gen {
    std::vector<int32_t> tokens;
    EngineStats stats;
};

// Greedy requests (one per prompt, batched together) through an engine; each request's tokens.
std::vector<std::vector<int32_t>> run_engine(Model& m, const Tokenizer& tok, EngineOptions eo,
                                             const std::vector<std::vector<int32_t>>& prompts, int64_t n_gen,
                                             EngineStats* stats = nullptr, float temperature = 0, int top_k = 0) {
    Engine engine(m, tok, eo);
    std::vector<std::vector<int32_t>> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        GenerationRequest r;
        r.prompt = prompts[i];
        r.max_tokens = n_gen;
        r.ignore_eos = true;
        r.sampling.temperature = temperature;
        r.sampling.top_k = top_k;
        r.sampling.seed = 11 + i;
        auto id = engine.submit(std::move(r), [&out, i](const TokenEvent& ev) {
            if (ev.token >= 0) out[i].push_back(ev.token);
            EXPECT_NE(ev.reason, GenerationEnd::error) << ev.error;
        });
        EXPECT_TRUE(id.ok()) << id.error();
    }
    engine.run_until_idle();
    if (stats) *stats = engine.stats();
    return out;
}

EngineOptions engine_options(int k, int slots) {
    EngineOptions eo;
    eo.n_slots = slots;
    eo.n_ctx = 200;
    eo.prefill_chunk = 24;  // several chunks per prompt: the MTP block catches up across them
    eo.prefix_cache = false;
    eo.speculative = k;
    return eo;
}

// Forces the drafts: the plain run's token with probability `p` (per request, by index), else a wrong one.
std::function<int32_t(uint64_t, int64_t, int32_t)> oracle(const std::vector<std::vector<int32_t>>& plain,
                                                          const std::vector<std::vector<int32_t>>& prompts, double p,
                                                          int32_t vocab, std::shared_ptr<std::mt19937> rng) {
    return [&plain, &prompts, p, vocab, rng](uint64_t id, int64_t index, int32_t proposed) {
        const size_t r = (size_t)(id - 1);  // ids count from 1 in submission order
        const int64_t g = index - (int64_t)prompts[r].size();
        if (g < 0 || g >= (int64_t)plain[r].size()) return proposed;
        const int32_t right = plain[r][(size_t)g];
        return std::uniform_real_distribution<double>(0, 1)(*rng) < p ? right : (right + 1) % vocab;
    };
}

void check_greedy_identity(Model& m, const Tokenizer& tok, const std::vector<std::vector<int32_t>>& prompts,
                           int64_t n_gen, int slots) {
    const auto plain = run_engine(m, tok, engine_options(0, slots), prompts, n_gen);
    for (const auto& p : plain) ASSERT_EQ((int64_t)p.size(), n_gen);
    // Draft lengths 1, 2 and 3; under a sanitizer 1 and 3 (one draft, and drafts chained on drafts).
    for (int k : test::cases<int>({1, 2, 3}, {1, 3})) {
        SCOPED_TRACE("mtp:" + std::to_string(k));
        EngineStats own;
        EXPECT_EQ(run_engine(m, tok, engine_options(k, slots), prompts, n_gen, &own), plain) << "the MTP block's drafts";
        EXPECT_GT(own.spec_steps, 0u);
        for (double p : {1.0, 0.5}) {
            SCOPED_TRACE("drafts forced right with probability " + std::to_string(p));
            EngineOptions eo = engine_options(k, slots);
            eo.draft_override = oracle(plain, prompts, p, (int32_t)m.config().n_vocab, std::make_shared<std::mt19937>(k));
            EngineStats st;
            EXPECT_EQ(run_engine(m, tok, eo, prompts, n_gen, &st), plain);
            ASSERT_GT(st.draft_tokens, 0u);
            if (p == 1.0) {
                EXPECT_EQ(st.accepted_tokens, st.draft_tokens);
            } else {
                EXPECT_GT(st.accepted_tokens, 0u);
                EXPECT_LT(st.accepted_tokens, st.draft_tokens);
            }
        }
    }
}

TEST(SpeculativeEngine, GreedyIsTokenIdenticalOnGoldenModels) {
    for (const char* set : {"flash-mini", "quant-mini"}) {
        SCOPED_TRACE(set);
        Loaded g = load_golden(set);
        ASSERT_TRUE(g.model);
        ASSERT_TRUE(g.model->has_mtp());
        auto tok = word_tokenizer(g.model->config().n_vocab);
        std::mt19937 rng(3);
        // Two requests decoding side by side (verify steps of different lengths in one batch).
        const std::vector<std::vector<int32_t>> prompts = {random_tokens(rng, 57, g.model->config().n_vocab),
                                                           random_tokens(rng, 20, g.model->config().n_vocab)};
        check_greedy_identity(*g.model, *tok, prompts, 70, 2);
    }
}

TEST(SpeculativeEngine, LargeBatchesDecodePlainlyAndSpeculateAgainWhenSmall) {
    Loaded g = load_golden("flash-mini");
    ASSERT_TRUE(g.model);
    auto tok = word_tokenizer(g.model->config().n_vocab);
    std::mt19937 rng(6);
    const int64_t V = g.model->config().n_vocab;
    // Four requests at mtp:2 (12 verify rows: past the step graphs' 8) of different lengths: the batch decodes
    // plainly while all four decode, and the two left after the short ones finish speculate.
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t len : {12, 30, 9, 41}) prompts.push_back(random_tokens(rng, len, V));
    std::vector<std::vector<int32_t>> outs[2];
    for (int w = 0; w < 2; ++w) outs[w].resize(prompts.size());
    for (int w = 0; w < 2; ++w) {
        Engine engine(*g.model, *tok, engine_options(w == 0 ? 0 : 2, 4));
        for (size_t i = 0; i < prompts.size(); ++i) {
            GenerationRequest r;
            r.prompt = prompts[i];
            r.max_tokens = i < 2 ? 10 : 60;
            r.ignore_eos = true;
            r.sampling.temperature = 0;
            auto& o = outs[w][i];
            ASSERT_TRUE(engine.submit(std::move(r), [&o](const TokenEvent& ev) {
                if (ev.token >= 0) o.push_back(ev.token);
            }).ok());
        }
        engine.run_until_idle();
        if (w == 1) {
            EXPECT_GT(engine.stats().spec_steps, 0u);  // speculation came back
        }
    }
    EXPECT_EQ(outs[1], outs[0]);
}

TEST(SpeculativeEngine, GreedyIsTokenIdenticalWithTheRealVocabulary) {
    auto t = test::make_tiny_model("speculative_test", 3);
    ASSERT_TRUE(t.ok()) << t.error();
    Model& m = *(*t)->model;
    ASSERT_TRUE(m.has_mtp());
    std::mt19937 rng(4);
    check_greedy_identity(m, *(*t)->tokenizer, {random_tokens(rng, 40, m.config().n_vocab)}, 40, 1);
}

TEST(SpeculativeEngine, SampledRunsComplete) {
    Loaded g = load_golden("flash-mini");
    ASSERT_TRUE(g.model);
    auto tok = word_tokenizer(g.model->config().n_vocab);
    std::mt19937 rng(8);
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(rng, 30, g.model->config().n_vocab)};
    EngineStats st;
    const auto out = run_engine(*g.model, *tok, engine_options(2, 1), prompts, 50, &st, 0.8f);
    ASSERT_EQ(out[0].size(), 50u);
    EXPECT_GT(st.spec_steps, 0u);
    // Sampling with top-k 1 through the sampled verify path, the drafts forced to the greedy tokens half the
    // time: p is then the argmax's point mass, so the rule accepts exactly the right drafts and the output is
    // the greedy one.
    const auto greedy = run_engine(*g.model, *tok, engine_options(0, 1), prompts, 50);
    EngineOptions eo = engine_options(2, 1);
    eo.draft_override = oracle(greedy, prompts, 0.5, (int32_t)g.model->config().n_vocab, std::make_shared<std::mt19937>(1));
    EXPECT_EQ(run_engine(*g.model, *tok, eo, prompts, 50, &st, 0.8f, 1), greedy);
    EXPECT_GT(st.accepted_tokens, 0u);
    EXPECT_LT(st.accepted_tokens, st.draft_tokens);
}

TEST(SpeculativeEngine, ModelsThatCannotSpeculateAreRefused) {
    Loaded pro = load_golden("pro-mini");  // no MTP block
    ASSERT_TRUE(pro.model);
    Status s = check_speculative(*pro.model, 1);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("no MTP block"), std::string::npos) << s.error();
    Loaded flash = load_golden("flash-mini");
    ASSERT_TRUE(flash.model);
    EXPECT_TRUE(check_speculative(*flash.model, 3).ok());
    s = check_speculative(*flash.model, 4);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("K <= 3"), std::string::npos) << s.error();
    EXPECT_EQ(*parse_speculative("mtp"), 1);
    EXPECT_EQ(*parse_speculative("mtp:3"), 3);
    EXPECT_EQ(*parse_speculative(""), 0);
    for (const char* bad : {"mtp:0", "mtp:x", "eagle", "mtp:2x"}) EXPECT_FALSE(parse_speculative(bad).ok()) << bad;
}

}  // namespace
