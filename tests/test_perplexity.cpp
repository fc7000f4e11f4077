// Sliding-window perplexity: the window plan scores every token after the first exactly once, each with at
// least ctx - stride tokens of context past the first window; and the perplexity of the flash-mini golden
// token sequence in exact mode equals the one computed here, in double, from the official reference's
// exact_fp32 logits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "runtime/perplexity.h"

using namespace dsv4;

namespace {

const std::string kGolden = std::string(DSV4_SHARED_DIR) + "/golden/flash-mini";

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    EXPECT_TRUE(in.good()) << path;
    const auto bytes = static_cast<size_t>(in.tellg());
    std::vector<float> v(bytes / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

TEST(PerplexityWindows, EveryTokenAfterTheFirstIsScoredOnce) {
    for (int64_t n : {2, 3, 10, 57, 100}) {
        for (int64_t ctx : {2, 3, 8, 16, 200}) {
            for (int64_t stride = 1; stride <= ctx; stride += (ctx > 16 ? 37 : 1)) {
                SCOPED_TRACE("n " + std::to_string(n) + " ctx " + std::to_string(ctx) + " stride " +
                             std::to_string(stride));
                auto w = perplexity_windows(n, ctx, stride);
                ASSERT_TRUE(w.ok()) << w.error();
                std::vector<int> scored(static_cast<size_t>(n), 0);
                for (size_t i = 0; i < w->size(); ++i) {
                    const ScoreWindow& x = (*w)[i];
                    EXPECT_EQ(x.begin, static_cast<int64_t>(i) * stride);
                    EXPECT_EQ(x.end, std::min(x.begin + ctx, n));
                    EXPECT_GT(x.first_scored, x.begin);
                    for (int64_t t = x.first_scored; t < x.end; ++t) {
                        ++scored[static_cast<size_t>(t)];
                        if (i > 0) {
                            EXPECT_GE(t - x.begin, ctx - stride) << "context of token " << t;
                        }
                    }
                }
                EXPECT_EQ(w->back().end, n);
                EXPECT_EQ(scored[0], 0);
                for (int64_t t = 1; t < n; ++t) {
                    // Non-overlapping windows (stride == ctx) leave each later window's first token unscored:
                    // nothing in its window comes before it.
                    const bool window_start = stride == ctx && t % ctx == 0;
                    EXPECT_EQ(scored[static_cast<size_t>(t)], window_start ? 0 : 1) << "token " << t;
                }
            }
        }
    }
}

TEST(PerplexityWindows, ExampleAndErrors) {
    auto w = perplexity_windows(10, 4, 2);
    ASSERT_TRUE(w.ok());
    const std::vector<std::vector<int64_t>> want = {{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}};
    ASSERT_EQ(w->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ((*w)[i].begin, want[i][0]);
        EXPECT_EQ((*w)[i].end, want[i][1]);
        EXPECT_EQ((*w)[i].first_scored, want[i][2]);
    }
    EXPECT_FALSE(perplexity_windows(1, 4, 2).ok());  // nothing to score
    EXPECT_FALSE(perplexity_windows(0, 4, 2).ok());
    EXPECT_FALSE(perplexity_windows(10, 1, 1).ok());  // a window needs context and a token
    EXPECT_FALSE(perplexity_windows(10, 4, 0).ok());
    auto e = perplexity_windows(10, 4, 5);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("stride"), std::string::npos) << e.error();
}

class GoldenPerplexity : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::ifstream in(kGolden + "/manifest.json");
        ASSERT_TRUE(in.good());
        const auto m = nlohmann::json::parse(in);
        P_ = m["prefill_len"].get<int64_t>();
        D_ = m["decode_len"].get<int64_t>();
        for (const auto& t : m["tokens"]) tokens_.push_back(t.get<int32_t>());
        backend_ = make_cpu_backend(2).release();
        auto model = Model::load(kGolden + "/model.gguf", *backend_);
        ASSERT_TRUE(model.ok()) << model.error();
        model_ = model->release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete backend_;
    }

    static PerplexityResult run(std::span<const int32_t> ids, int64_t ctx, int64_t stride, int64_t chunk) {
        StepRunner runner(*model_);
        PerplexityOptions o;
        o.ctx = ctx;
        o.stride = stride;
        o.chunk = chunk;
        o.step.quant_sim = false;  // exact mode, compared with exact_fp32
        auto r = perplexity(runner, ids, o);
        EXPECT_TRUE(r.ok()) << r.error();
        return r.ok() ? *r : PerplexityResult{};
    }

    static inline int64_t P_ = 0, D_ = 0;
    static inline std::vector<int32_t> tokens_;
    static inline Backend* backend_ = nullptr;
    static inline Model* model_ = nullptr;
};

TEST_F(GoldenPerplexity, EqualsTheReferenceLogits) {
    // tokens[0:P+D]: the reference's prefill rows 0..P-1 then its decode rows P..P+D-1 are one causal run
    // from position 0 (golden/README.md), so row t is the distribution of token t + 1.
    const int64_t n = P_ + D_;
    const std::vector<float> prefill = read_f32(kGolden + "/exact_fp32.prefill.f32");
    const std::vector<float> decode = read_f32(kGolden + "/exact_fp32.decode.f32");
    const int64_t V = model_->config().n_vocab;
    ASSERT_EQ(static_cast<int64_t>(prefill.size()), P_ * V);
    ASSERT_EQ(static_cast<int64_t>(decode.size()), D_ * V);
    double nll = 0;
    for (int64_t t = 1; t < n; ++t) {
        const float* row = t - 1 < P_ ? prefill.data() + (t - 1) * V : decode.data() + (t - 1 - P_) * V;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
        nll -= static_cast<double>(row[tokens_[static_cast<size_t>(t)]]) - (mx + std::log(sum));
    }
    const double ref_mean = nll / static_cast<double>(n - 1);

    // The acceptance bound of exact mode is max |dlogit| <= 2e-3 on every row (golden/README.md); a token's
    // logprob l_t - logsumexp(l) then moves by at most 2 * 2e-3, and so does the mean over tokens.
    const double tol = 2 * 2e-3;
    std::span<const int32_t> ids(tokens_.data(), static_cast<size_t>(n));
    // One window over all of it, in prefill chunks of 64 and of 7 tokens (the result must not depend on them).
    for (int64_t chunk : {64, 7}) {
        SCOPED_TRACE("chunk " + std::to_string(chunk));
        const PerplexityResult r = run(ids, n, n, chunk);
        EXPECT_EQ(r.n_scored, n - 1);
        EXPECT_EQ(r.n_windows, 1u);
        EXPECT_NEAR(r.mean_nll(), ref_mean, tol);
        EXPECT_NEAR(std::log(r.perplexity()), ref_mean, tol);
        RecordProperty("mean_nll_error_chunk_" + std::to_string(chunk), ::testing::PrintToString(std::abs(r.mean_nll() - ref_mean)));
    }
}

TEST_F(GoldenPerplexity, WindowsAddTheirOwnTokensOnly) {
    // Each window runs on a fresh cache from its own first token, so what it adds is the NLL of its tokens
    // [first_scored, end) given [begin, t): a single-window run over [begin, end) minus one over
    // [begin, first_scored) (causal, so that prefix's tokens score the same in both).
    const int64_t n = P_ + D_;
    std::span<const int32_t> ids(tokens_.data(), static_cast<size_t>(n));
    const int64_t ctx = 100, stride = 60;
    const PerplexityResult slid = run(ids, ctx, stride, 64);
    auto windows = perplexity_windows(n, ctx, stride);
    ASSERT_TRUE(windows.ok());
    EXPECT_EQ(slid.n_windows, windows->size());
    EXPECT_EQ(slid.n_scored, n - 1);
    double sum = 0;
    for (const ScoreWindow& w : *windows) {
        auto part = [&](int64_t end) {
            const int64_t len = end - w.begin;
            return len < 2 ? 0.0 : run(ids.subspan(static_cast<size_t>(w.begin), static_cast<size_t>(len)), len, len, 64).nll_sum;
        };
        sum += part(w.end) - part(w.first_scored);
    }
    // Only float summation order differs: the NLLs are ~7 nats each, 399 of them, summed in double.
    EXPECT_NEAR(slid.nll_sum, sum, 1e-9 * std::abs(sum));
    // Less context than one window over all: a different total.
    EXPECT_NE(slid.nll_sum, run(ids, n, n, 64).nll_sum);

    // Bad options are errors, not crashes.
    StepRunner runner(*model_);
    PerplexityOptions o;
    o.ctx = 8;
    o.stride = 9;
    EXPECT_FALSE(perplexity(runner, ids, o).ok());
    o.stride = 4;
    std::vector<int32_t> bad = {1, 2, static_cast<int32_t>(model_->config().n_vocab)};
    auto r = perplexity(runner, bad, o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("vocabulary"), std::string::npos) << r.error();
}

}  // namespace
