// The whole model against the official reference's logits (shared/golden): exact mode vs exact_fp32 and
// quantization-simulation mode vs qat_fp32, for prefill+decode, stepwise and MTP runs, with several prefill
// chunk sizes (the result must not depend on them), plus per-block outputs to localize errors.
// Thresholds are the acceptance thresholds of shared/golden/README.md.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "exec/step_runner.h"
#include "model/deepseek4.h"

using namespace dsv4;

namespace {

const std::string kGolden = std::string(DSV4_SHARED_DIR) + "/golden/";

struct Golden {
    nlohmann::json m;
    std::string dir;
    int64_t V = 0, P = 0, D = 0, S = 0;
    std::vector<int32_t> tokens;

    explicit Golden(const std::string& name) : dir(kGolden + name + "/") {
        std::ifstream in(dir + "manifest.json");
        m = nlohmann::json::parse(in);
        V = m["config"]["vocab_size"];
        P = m["prefill_len"];
        D = m["decode_len"];
        S = m["stepwise_len"];
        tokens = m["tokens"].get<std::vector<int32_t>>();
    }
    bool has(const std::string& key) const { return m["files"].contains(key); }
    std::vector<float> load(const std::string& key) const {
        const auto& f = m["files"][key];
        std::ifstream in(dir + f["file"].get<std::string>(), std::ios::binary);
        int64_t count = 1;
        for (int64_t d : f["shape"]) count *= d;
        std::vector<float> v(count);
        in.read(reinterpret_cast<char*>(v.data()), count * sizeof(float));
        return v;
    }
};

struct Metrics {
    double max_abs = 0, mean_kl = 0, max_kl = 0, top1 = 0;
};

// KL(reference || engine) per row from log-softmax in double, as golden_check.py computes it.
Metrics compare(const std::vector<float>& want, const std::vector<float>& got, int64_t V) {
    Metrics r;
    const int64_t rows = (int64_t)want.size() / V;
    int agree = 0;
    for (int64_t i = 0; i < rows; ++i) {
        const float* a = want.data() + i * V;
        const float* b = got.data() + i * V;
        double ma = -1e300, mb = -1e300;
        int64_t aa = 0, ab = 0;
        for (int64_t j = 0; j < V; ++j) {
            if (a[j] > ma) ma = a[j], aa = j;
            if (b[j] > mb) mb = b[j], ab = j;
            r.max_abs = std::max(r.max_abs, (double)std::fabs(a[j] - b[j]));
        }
        double sa = 0, sb = 0;
        for (int64_t j = 0; j < V; ++j) sa += std::exp(a[j] - ma), sb += std::exp(b[j] - mb);
        const double la0 = ma + std::log(sa), lb0 = mb + std::log(sb);
        double kl = 0;
        for (int64_t j = 0; j < V; ++j) {
            const double la = a[j] - la0, lb = b[j] - lb0;
            kl += std::exp(la) * (la - lb);
        }
        r.mean_kl += kl / rows;
        r.max_kl = std::max(r.max_kl, kl);
        agree += aa == ab;
    }
    r.top1 = (double)agree / rows;
    return r;
}

enum class Kind { kMain, kStepwise, kMtp };

// Run one golden case the way `dsv4 logits` does, with prefill chunks of `chunk` tokens.
std::vector<float> run(Model& m, const Golden& g, Kind kind, bool quant_sim, int64_t chunk) {
    StepOptions opt;
    opt.quant_sim = quant_sim;
    opt.all_logits = true;
    const bool mtp = kind == Kind::kMtp;
    const int64_t rows = kind == Kind::kStepwise ? g.S : g.P + g.D;
    const int64_t P = kind == Kind::kStepwise ? 0 : g.P;
    auto cache = m.new_cache(rows + 2, mtp);
    StepRunner runner(m);  // as `dsv4 logits`: the decode steps through step graphs
    std::vector<float> out, logits, hidden, mlogits;
    auto step = [&](int64_t b, int64_t e) {
        std::span<const int32_t> toks(g.tokens.data() + b, e - b);
        Status s = runner.step(*cache, toks, opt, mtp ? nullptr : &logits, mtp ? &hidden : nullptr);
        EXPECT_TRUE(s.ok()) << s.error();
        if (mtp) {
            s = m.mtp_step(*cache, hidden, std::span<const int32_t>(g.tokens.data() + b + 1, e - b), opt, &mlogits);
            EXPECT_TRUE(s.ok()) << s.error();
            out.insert(out.end(), mlogits.begin(), mlogits.end());
        } else {
            out.insert(out.end(), logits.begin(), logits.end());
        }
    };
    for (int64_t b = 0; b < P; b += chunk) step(b, std::min(P, b + chunk));
    for (int64_t t = P; t < rows; ++t) step(t, t + 1);
    return out;
}

std::vector<float> reference(const Golden& g, const std::string& run_name, Kind kind) {
    if (kind == Kind::kStepwise) return g.load(run_name + ".stepwise");
    const std::string a = kind == Kind::kMtp ? "mtp_prefill" : "prefill", b = kind == Kind::kMtp ? "mtp_decode" : "decode";
    std::vector<float> v = g.load(run_name + "." + a), d = g.load(run_name + "." + b);
    v.insert(v.end(), d.begin(), d.end());
    return v;
}

struct Case {
    std::string set;
    int64_t chunk;
};

class GoldenTest : public ::testing::TestWithParam<Case> {};

TEST_P(GoldenTest, MatchesReference) {
    const Case& c = GetParam();
    Golden g(c.set);
    auto backend = make_cpu_backend(0);
    auto model = Model::load(g.dir + "model.gguf", *backend);
    ASSERT_TRUE(model.ok()) << model.error();
    Model& m = **model;
    const bool quantized = g.m.contains("tensor_types");
    std::vector<Kind> kinds = {Kind::kMain, Kind::kStepwise};
    if (g.has("exact_fp32.mtp_prefill")) kinds.push_back(Kind::kMtp);
    ASSERT_EQ(m.has_mtp(), g.has("exact_fp32.mtp_prefill"));
    for (bool qsim : {false, true}) {
        for (Kind kind : kinds) {
            // The chunk size only matters where there is a multi-token prefill.
            if (kind == Kind::kStepwise && c.chunk != 64) continue;
            const std::string run_name = qsim ? "qat_fp32" : "exact_fp32";
            Metrics r = compare(reference(g, run_name, kind), run(m, g, kind, qsim, c.chunk), g.V);
            const char* kname = kind == Kind::kMain ? "prefill+decode" : kind == Kind::kStepwise ? "stepwise" : "mtp";
            SCOPED_TRACE(c.set + " " + kname + (qsim ? " quant-sim" : " exact") + " chunk " + std::to_string(c.chunk));
            RecordProperty(std::string(kname) + (qsim ? "_qsim" : "_exact") + "_mean_kl", std::to_string(r.mean_kl));
            if (!qsim) {
                EXPECT_LE(r.max_abs, 2e-3);
                EXPECT_LE(r.mean_kl, 1e-6);
            } else if (quantized) {
                EXPECT_LE(r.mean_kl, 5e-4);
                EXPECT_GE(r.top1, 0.95);
            } else {
                EXPECT_LE(r.mean_kl, 5e-5);
                EXPECT_LE(r.max_kl, 5e-3);
                EXPECT_GE(r.top1, 0.98);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Sets, GoldenTest,
                         ::testing::Values(Case{"flash-mini", 1}, Case{"flash-mini", 7}, Case{"flash-mini", 64},
                                           Case{"pro-mini", 1}, Case{"pro-mini", 7}, Case{"pro-mini", 64},
                                           Case{"quant-mini", 1}, Case{"quant-mini", 7}, Case{"quant-mini", 64}),
                         [](const auto& info) {
                             std::string s = info.param.set + "_chunk" + std::to_string(info.param.chunk);
                             for (char& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

// Every main block's output streams during the exact prefill, against the reference's: relative error
// ||got - want|| / ||want|| <= 1e-4 per block.
class LayerOutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerOutTest, BlockOutputsMatch) {
    Golden g(GetParam());
    ASSERT_TRUE(g.has("exact_fp32.prefill_layer_out"));
    auto backend = make_cpu_backend(0);
    auto model = Model::load(g.dir + "model.gguf", *backend);
    ASSERT_TRUE(model.ok()) << model.error();
    Model& m = **model;
    const auto& cfg = m.config();
    const std::vector<float> want = g.load("exact_fp32.prefill_layer_out");
    const int64_t per_layer = g.P * cfg.hc * cfg.n_embd;
    ASSERT_EQ((int64_t)want.size(), per_layer * cfg.n_layer);
    std::vector<float> got(want.size());
    StepOptions opt;
    opt.quant_sim = false;
    opt.trace = [&](const char* name, int layer, const float* data, int64_t count) {
        if (std::string(name) == "block_out") std::copy(data, data + count, got.begin() + layer * per_layer);
    };
    auto cache = m.new_cache(g.P, false);
    Status s = m.step(*cache, std::span<const int32_t>(g.tokens.data(), g.P), opt, nullptr);
    ASSERT_TRUE(s.ok()) << s.error();
    for (int l = 0; l < cfg.n_layer; ++l) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < per_layer; ++i) {
            const double d = got[l * per_layer + i] - want[l * per_layer + i];
            num += d * d;
            den += (double)want[l * per_layer + i] * want[l * per_layer + i];
        }
        EXPECT_LE(std::sqrt(num / den), 1e-4) << "block " << l;
    }
}

INSTANTIATE_TEST_SUITE_P(Sets, LayerOutTest, ::testing::Values("flash-mini", "pro-mini"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

// The official acceptance script drives the CLI the same way (registered in tests/golden.cmake).

}  // namespace
