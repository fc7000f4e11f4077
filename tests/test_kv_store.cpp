// The quant-sim cache store (model/kv_cache.h): the lightning indexer's keys kept as packed FP4 rows
// (ops/fp4_rows.h) and the compressed KV entries as packed FP8 rows (ops/kv_rows.h). Packing gives back every
// simulated float bit for bit, so quant-sim steps on such a cache give the logits of the f32 store bit for bit on
// the CPU: prefill in chunks, decode, a batched decode group, snapshots with entries and speculative rollback. An
// exact step on it is refused, and it takes the bytes the layout promises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"
#include "util/step_chunks.h"

using namespace dsv4;

namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// A row of dim values as the quant-sim rounding leaves it (fake_quant_block per 32).
std::vector<float> fp4_row(std::mt19937& rng, int dim, float scale) {
    std::normal_distribution<float> n(0.0f, scale);
    std::vector<float> v((size_t)dim);
    for (auto& x : v) x = n(rng);
    for (int j = 0; j < dim; j += kFp4Block) fake_quant_block(v.data() + j, kFp4Block, true);
    return v;
}

void expect_round_trip(const std::vector<float>& v, const char* what) {
    const int dim = (int)v.size();
    std::vector<uint8_t> row((size_t)fp4_row_bytes(dim), 0xAB);
    fp4_pack_row(v.data(), dim, row.data());
    std::vector<float> back((size_t)dim);
    fp4_unpack_row(row.data(), dim, back.data());
    for (int i = 0; i < dim; ++i) {
        if (std::isnan(v[i])) {
            EXPECT_TRUE(std::isnan(back[i])) << what << " value " << i;
            continue;
        }
        ASSERT_EQ(bits(v[i]), bits(back[i])) << what << " value " << i << ": " << v[i] << " came back as " << back[i];
    }
    for (int64_t j = dim / 2 + dim / kFp4Block; j < fp4_row_bytes(dim); ++j) EXPECT_EQ(row[j], 0) << "padding";
}

}  // namespace

TEST(Fp4Rows, PackingGivesBackEveryRoundedFloatBitForBit) {
    std::mt19937 rng(1);
    for (int dim : {32, 64, 96, 128, 512})
        for (float scale : {1e-39f, 1e-30f, 1e-3f, 1.0f, 7.0f, 1e20f, 1e37f})
            for (int r = 0; r < 20; ++r) expect_round_trip(fp4_row(rng, dim, scale), "random row");
    EXPECT_EQ(fp4_row_bytes(128), 68);  // 64 code bytes and 4 scales
    EXPECT_EQ(fp4_row_bytes(64), 36);   // 32 + 2, padded to 4
}

TEST(Fp4Rows, EdgeBlocksComeBackToo) {
    auto rounded = [](std::vector<float> v) {
        for (size_t j = 0; j < v.size(); j += kFp4Block) fake_quant_block(v.data() + j, kFp4Block, true);
        return v;
    };
    std::vector<float> v(64, 0.0f);
    expect_round_trip(rounded(v), "zeros");
    for (auto& x : v) x = -0.0f;
    expect_round_trip(rounded(v), "negative zeros");
    // Largest code 3 (|x| / s in (3, 3.5)): the values are also codes of half the scale.
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 0 ? 3.2f : -0.4f) * (i < 32 ? 1.0f : 1e-5f);
    expect_round_trip(rounded(v), "largest code 3");
    // Below the amax floor (6 * 2^-126) and subnormal values.
    for (size_t i = 0; i < v.size(); ++i) v[i] = (float)(i % 7) * 1e-40f;
    expect_round_trip(rounded(v), "below the floor");
    // One block with an infinity (its scale is infinite) beside a plain one.
    for (size_t i = 0; i < v.size(); ++i) v[i] = (float)i - 20.0f;
    v[5] = INFINITY;
    expect_round_trip(rounded(v), "an infinity");
    // Every code under every sign at scale 1.
    const float grid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i & 8 ? -1.0f : 1.0f) * grid[i % 8];
    v[0] = 6.0f;
    v[32] = -6.0f;
    expect_round_trip(rounded(v), "the grid");
}

namespace {

// A KV row of dim values (the last rope of them RoPE dims) as the quant-sim rounding leaves it: fake_quant_block
// per 64 non-RoPE dims from the row's start, the last block possibly short (fp8_sim's rule).
std::vector<float> fp8_rounded(std::vector<float> v, int rope) {
    const int nope = (int)v.size() - rope;
    for (int j = 0; j < nope; j += kFp8Block) fake_quant_block(v.data() + j, std::min(kFp8Block, nope - j), false);
    return v;
}

void expect_kv_round_trip(const std::vector<float>& v, int rope, const char* what) {
    const int dim = (int)v.size();
    std::vector<uint8_t> row((size_t)kv_row_bytes(dim, rope), 0xAB);
    kv_pack_row(v.data(), dim, rope, row.data());
    std::vector<float> back((size_t)dim);
    kv_unpack_row(row.data(), dim, rope, back.data());
    for (int i = 0; i < dim; ++i) {
        if (std::isnan(v[i])) {
            EXPECT_TRUE(std::isnan(back[i])) << what << " value " << i;
            continue;
        }
        ASSERT_EQ(bits(v[i]), bits(back[i])) << what << " (dim " << dim << ", rope " << rope << ") value " << i << ": "
                                             << v[i] << " came back as " << back[i];
    }
    for (int64_t j = 4 * rope + (dim - rope) + kv_row_scales(dim, rope); j < kv_row_bytes(dim, rope); ++j)
        EXPECT_EQ(row[j], 0) << "padding";
}

}  // namespace

TEST(KvRows, PackingGivesBackEveryRoundedFloatBitForBit) {
    std::mt19937 rng(2);
    const int shapes[][2] = {{512, 64}, {128, 64}, {83, 64}, {128, 0}, {130, 2}, {64, 63}, {200, 8}};
    for (const auto& [dim, rope] : shapes)
        for (float scale : {1e-12f, 1e-5f, 1e-3f, 1.0f, 7.0f, 1e20f, 1e36f})
            for (int r = 0; r < 10; ++r) {
                std::normal_distribution<float> n(0.0f, scale);
                std::vector<float> v((size_t)dim);
                for (auto& x : v) x = n(rng);
                expect_kv_round_trip(fp8_rounded(v, rope), rope, "random row");
            }
    EXPECT_EQ(kv_row_bytes(512, 64), 720);  // 256 bytes of RoPE floats, 448 codes, 7 scales, padded to 16
    EXPECT_EQ(kv_row_bytes(83, 64), 288);   // 256 + 19 + 1, padded
    EXPECT_EQ(kv_row_bytes(128, 0), 144);   // 128 + 2, padded
}

TEST(KvRows, EdgeBlocksComeBackToo) {
    const int dim = 192, rope = 64;  // two blocks of 64 non-RoPE dims
    std::vector<float> v(dim, 0.0f);
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "zeros");
    for (auto& x : v) x = -0.0f;
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "negative zeros");
    // The largest code 448 (the recomputed scale is the same), and a block whose largest code rounds to 224 or
    // less (its values are also codes of half the scale).
    for (int i = 0; i < dim; ++i) v[i] = (i % 5 == 0 ? 448.0f : -3.3f) * (i < 64 ? 1.0f : 0.5f);
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "largest code 448");
    for (int i = 0; i < dim; ++i) v[i] = i % 3 == 0 ? 226.0f : -0.01f;
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "largest code rounding down to 224");
    // Below the amax floor (1e-4), with E4M3 subnormal codes and f32 subnormals.
    for (int i = 0; i < dim; ++i) v[i] = (float)(i % 9) * (i < 64 ? 1e-7f : 1e-41f);
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "below the floor");
    // One block with an infinity (its scale is infinite) beside a plain one, and a NaN among the RoPE dims.
    for (int i = 0; i < dim; ++i) v[i] = (float)i - 20.0f;
    v[5] = INFINITY;
    v[70] = -INFINITY;
    v[150] = NAN;
    expect_kv_round_trip(fp8_rounded(v, rope), rope, "infinities");
    // Every finite code under both signs at scale 1 (the block's amax 448 makes the scale 1).
    std::vector<float> all;  // blocks of 448 and 63 codes: 5 blocks of non-RoPE dims, then 64 RoPE dims
    for (uint32_t c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        if (all.size() % 64 == 0) all.push_back(448.0f);
        all.push_back(fp8_e4m3_to_f32((uint8_t)c));
    }
    all.resize(5 * 64 + 64, 1.25f);
    expect_kv_round_trip(fp8_rounded(all, 64), 64, "every code");
    for (uint32_t c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) {
            EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32((uint8_t)c)));
            continue;
        }
        EXPECT_EQ(fp8_code(fp8_e4m3_to_f32((uint8_t)c)), c) << "code " << c;
    }
}

namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = (int32_t)(rng() % vocab);
    return t;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << what << ", logit " << i;
}

class KvStoreTest : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        backend_ = make_cpu_backend(2);
        auto m = Model::load(std::string(DSV4_SHARED_DIR) + "/golden/" + GetParam() + "/model.gguf", *backend_);
        ASSERT_TRUE(m.ok()) << m.error();
        model_ = std::move(*m);
        runner_ = std::make_unique<StepRunner>(*model_);
    }
    // Logits of every token (chunks of the given sizes, cycled) in quant-sim mode on a cache of `store`.
    std::vector<float> run(KvStore store, const std::vector<int32_t>& toks, const std::vector<int64_t>& chunks) {
        auto cache = model_->new_cache((int64_t)toks.size(), false, store);
        StepOptions opt;
        opt.all_logits = true;
        return test::step_in_chunks(*runner_, *cache, toks, chunks, opt);
    }
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<StepRunner> runner_;
};

}  // namespace

TEST_P(KvStoreTest, PackedRowsGiveTheLogitsOfF32RowsBitForBit) {
    // 360 tokens: 90 indexer keys a CSA layer against a top-k of 8-16, so the selection decides; a prompt in
    // irregular chunks, then token by token (decode steps read the packed keys the chunks wrote).
    const auto toks = random_tokens(360, model_->config().n_vocab, 11);
    const std::vector<int64_t> chunks = {37, 1, 130, 5, 1, 1};
    expect_same_bits(run(KvStore::exact, toks, chunks), run(KvStore::quant_sim, toks, chunks), "chunks");
    const std::vector<int64_t> decode = {300, 1};
    expect_same_bits(run(KvStore::exact, toks, decode), run(KvStore::quant_sim, toks, decode), "decode");
}

TEST_P(KvStoreTest, ADecodeGroupOnPackedRowsEqualsSoloF32Runs) {
    // Three sequences at different depths decode together (the group's per-row cache tables and the table form
    // of pack_fp4_rows), against each alone on the f32 store.
    const int64_t V = model_->config().n_vocab;
    const std::vector<int64_t> depths = {70, 131, 257};
    const int steps = 20;
    StepOptions opt;
    std::vector<std::vector<int32_t>> toks;
    for (size_t i = 0; i < depths.size(); ++i) toks.push_back(random_tokens(depths[i] + steps, V, 20 + (uint32_t)i));
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<float> l;
    for (size_t i = 0; i < depths.size(); ++i) {
        caches.push_back(model_->new_cache(depths[i] + steps, false, KvStore::quant_sim));
        ASSERT_TRUE(runner_->step(*caches[i], std::span<const int32_t>(toks[i].data(), depths[i]), opt, &l).ok());
    }
    std::vector<std::vector<float>> got(depths.size()), out(depths.size());
    for (int t = 0; t < steps; ++t) {
        std::vector<Model::BatchItem> items(depths.size());
        for (size_t i = 0; i < depths.size(); ++i) {
            items[i].cache = caches[i].get();
            items[i].tokens = std::span<const int32_t>(&toks[i][depths[i] + t], 1);
            items[i].logits = &out[i];
        }
        ASSERT_TRUE(runner_->step_batch(items, opt).ok()) << "step " << t;
        for (size_t i = 0; i < depths.size(); ++i) got[i].insert(got[i].end(), out[i].begin(), out[i].end());
    }
    for (size_t i = 0; i < depths.size(); ++i) {
        const auto solo = run(KvStore::exact, toks[i], {depths[i], 1});
        expect_same_bits(std::vector<float>(solo.end() - steps * V, solo.end()), got[i],
                         "sequence " + std::to_string(i));
    }
}

TEST_P(KvStoreTest, SnapshotsWithEntriesRestorePackedRows) {
    // A prefix's snapshot with its entries, restored into another packed cache (prefix reuse), continues as
    // the f32 store's full run does.
    const int64_t V = model_->config().n_vocab;
    const auto toks = random_tokens(260, V, 31);
    StepOptions opt;
    opt.all_logits = true;
    std::vector<float> l, tail;
    auto a = model_->new_cache(260, false, KvStore::quant_sim);
    ASSERT_TRUE(runner_->step(*a, std::span<const int32_t>(toks.data(), 200), opt, &l).ok());
    const auto snap = a->snapshot(true);
    auto b = model_->new_cache(260, false, KvStore::quant_sim);
    ASSERT_TRUE(b->restore(snap).ok());
    ASSERT_TRUE(runner_->step(*b, std::span<const int32_t>(toks.data() + 200, 60), opt, &tail).ok());
    const auto full = run(KvStore::exact, toks, {200, 60});
    expect_same_bits(std::vector<float>(full.end() - 60 * V, full.end()), tail, "after the restore");
    // An f32 cache's snapshot with entries has another layout: refused, not misread.
    auto f = model_->new_cache(260, false, KvStore::exact);
    EXPECT_FALSE(f->restore(snap).ok());
}

TEST_P(KvStoreTest, RollbackOnPackedRowsEqualsNeverSeeingTheRejectedTokens) {
    const int64_t V = model_->config().n_vocab;
    const auto toks = random_tokens(140, V, 41);
    StepOptions opt;
    opt.all_logits = true;
    std::vector<float> l, after;
    auto c = model_->new_cache(160, false, KvStore::quant_sim);
    const int64_t n = std::min<int64_t>(3, c->rollback_limit());
    ASSERT_GE(n, 2);
    ASSERT_TRUE(runner_->step(*c, std::span<const int32_t>(toks.data(), 120), opt, &l).ok());
    ASSERT_TRUE(c->save_for_rollback(n).ok());
    const auto wrong = random_tokens(n, V, 42);
    ASSERT_TRUE(runner_->step(*c, wrong, opt, &l).ok());
    ASSERT_TRUE(c->rollback(n - 1).ok());  // keep the first of them
    std::vector<int32_t> seen(toks.begin(), toks.begin() + 120);
    seen.push_back(wrong[0]);
    ASSERT_TRUE(runner_->step(*c, std::span<const int32_t>(toks.data() + 120, 20), opt, &after).ok());
    seen.insert(seen.end(), toks.begin() + 120, toks.end());
    const auto full = run(KvStore::exact, seen, {121, 20});
    expect_same_bits(std::vector<float>(full.end() - 20 * V, full.end()), after, "after the rollback");
}

TEST_P(KvStoreTest, AnExactStepOnAPackedCacheIsRefused) {
    auto c = model_->new_cache(64, false, KvStore::quant_sim);
    StepOptions opt;
    opt.quant_sim = false;
    std::vector<float> l;
    const std::vector<int32_t> toks = {1, 2, 3};
    Status s = runner_->step(*c, toks, opt, &l);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("exact"), std::string::npos) << s.error();
    EXPECT_EQ(c->pos(), 0);
    // Caches of both stores in one step are refused too.
    auto e = model_->new_cache(64, false, KvStore::exact);
    std::vector<Model::BatchItem> items(2);
    items[0].cache = c.get();
    items[1].cache = e.get();
    items[0].tokens = items[1].tokens = std::span<const int32_t>(toks.data(), 1);
    EXPECT_FALSE(runner_->step_batch(items, StepOptions{}).ok());
}

TEST_P(KvStoreTest, PackedRowsTakeTheBytesOfTheirRows) {
    const ModelConfig& cfg = model_->config();
    const int64_t cap = 4096;
    int csa = 0;
    size_t entry_rows = 0;  // compressed entries of every layer
    for (int il = 0; il < cfg.n_layer; ++il) {
        csa += cfg.ratio(il) == 4 ? 1 : 0;
        if (cfg.ratio(il) > 0) entry_rows += (size_t)(cap / cfg.ratio(il));
    }
    ASSERT_GT(csa, 0);
    ASSERT_TRUE(KvCache::packs_comp(cfg, KvStore::quant_sim));
    EXPECT_FALSE(KvCache::packs_comp(cfg, KvStore::exact));
    const size_t f32 = KvCache::bytes_for(cfg, cap, false, KvStore::exact);
    const size_t packed = KvCache::bytes_for(cfg, cap, false, KvStore::quant_sim);
    const size_t per_layer_f32 = (size_t)(cap / 4) * cfg.index_head_dim * 4;
    const size_t per_layer_packed = (size_t)(cap / 4) * fp4_row_bytes(cfg.index_head_dim) + 16;
    const size_t entry_saving = entry_rows * (4 * (size_t)cfg.head_dim - kv_row_bytes(cfg.head_dim, cfg.rope_dim));
    EXPECT_EQ(f32 - packed, (size_t)csa * (per_layer_f32 - per_layer_packed) + entry_saving);
    auto c = model_->new_cache(cap, false, KvStore::quant_sim);
    EXPECT_EQ(c->bytes(), packed);
}

INSTANTIATE_TEST_SUITE_P(Golden, KvStoreTest, ::testing::Values("flash-mini", "pro-mini", "quant-mini"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (auto& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });
