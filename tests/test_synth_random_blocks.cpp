// The generator's random valid blocks for quantizable types (SynthWriteOptions::random_quantized, used by
// `dsv4 bench --synth` and `dsv4 synth --random-blocks`): for the legacy formats, Q8_0 and every K-quant the
// blocks decode to finite values with the wanted spread and about zero mean, the bytes depend only on the seed,
// the option really changes how the tensor is made, and a whole model built this way runs and gives finite
// logits; the blocks of every other block type (MXFP4, IQ*, TQ*) decode to finite values too. Prints the rate
// rows are made at (not asserted: it depends on the machine).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "format/ggml_type.h"
#include "format/quant.h"
#include "model/deepseek4.h"
#include "model/synth.h"
#include "model/synth_generator.h"

namespace dsv4 {
namespace {

struct Moments {
    double mean = 0, std = 0;
    bool finite = true;
};

std::vector<uint8_t> generate(const std::vector<SynthTensor>& plan, const SynthHparams& hp, bool random, uint64_t seed) {
    SynthGenerator gen(plan, hp, seed, 2, random);
    std::vector<uint8_t> bytes(plan[0].n_bytes());
    gen.fill(0, 0, plan[0].n_rows(), bytes.data());
    return bytes;
}

Moments moments(GgmlType type, const std::vector<uint8_t>& bytes, int64_t cols, int64_t rows) {
    const size_t row_bytes = ggml_row_bytes(ggml_traits(type), cols);
    std::vector<float> row(cols);
    Moments m;
    double s = 0, ss = 0;
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, bytes.data() + r * row_bytes, row.data(), cols);
        for (float v : row) {
            if (!std::isfinite(v)) m.finite = false;
            s += v;
            ss += (double)v * v;
        }
    }
    const double n = (double)cols * (double)rows;
    m.mean = s / n;
    m.std = std::sqrt(std::max(0.0, ss / n - m.mean * m.mean));
    return m;
}

TEST(SynthRandomBlocks, QuantizableTypesDecodeToTheWantedSpread) {
    auto hp = synth_preset("tiny");
    ASSERT_TRUE(hp.ok());
    const float target = 0.02f;
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,
                       GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
        SCOPED_TRACE(std::string(ggml_type_name(t)));
        SynthTensor st;
        st.name = "blk.0.test.weight";
        st.type = t;
        st.ne = {256 * 8, 64};
        st.std = target;
        const std::vector<SynthTensor> plan{st};
        const auto a = generate(plan, *hp, true, 7);
        EXPECT_EQ(a, generate(plan, *hp, true, 7)) << "same seed, same bytes";
        EXPECT_NE(a, generate(plan, *hp, true, 8)) << "another seed, other bytes";
        EXPECT_NE(a, generate(plan, *hp, false, 7)) << "the option changes how the tensor is made";
        const Moments m = moments(t, a, st.ne[0], st.ne[1]);
        EXPECT_TRUE(m.finite);
        // 131072 values: the sample std is within a few percent of the block scale's design; the bound is
        // loose for the fp16 rounding of d and the per-block offsets of the types with a min.
        EXPECT_GT(m.std, 0.8 * target);
        EXPECT_LT(m.std, 1.25 * target);
        EXPECT_LT(std::fabs(m.mean), 0.2 * target);
    }
}

// The formats written as random blocks with or without the option. MXFP4's scale is a power of two, the one
// nearest the wanted scale: its spread is within a factor sqrt(2) of the target.
TEST(SynthRandomBlocks, EveryOtherBlockTypeDecodesToFiniteValues) {
    auto hp = synth_preset("tiny");
    ASSERT_TRUE(hp.ok());
    const float target = 0.02f;
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                       GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M,
                       GgmlType::TQ1_0, GgmlType::TQ2_0}) {
        SCOPED_TRACE(std::string(ggml_type_name(t)));
        SynthTensor st;
        st.name = "blk.0.test.weight";
        st.type = t;
        st.ne = {256 * 8, 64};
        st.std = target;
        const std::vector<SynthTensor> plan{st};
        const auto a = generate(plan, *hp, true, 7);
        const Moments m = moments(t, a, st.ne[0], st.ne[1]);
        EXPECT_TRUE(m.finite);
        EXPECT_GT(m.std, 0.7 * target);
        EXPECT_LT(m.std, 1.45 * target);
    }
}

// Rows of a few MB per type on 2 threads, the rate printed.
TEST(SynthRandomBlocks, PrintsTheRateRowsAreMadeAt) {
    auto hp = synth_preset("tiny");
    ASSERT_TRUE(hp.ok());
    for (GgmlType t : {GgmlType::MXFP4, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K,
                       GgmlType::IQ2_XXS, GgmlType::IQ1_M, GgmlType::IQ4_XS}) {
        SynthTensor st;
        st.name = "blk.0.ffn_gate_exps.weight";
        st.type = t;
        st.ne = {4096, 1024};
        st.std = 0.02f;
        const std::vector<SynthTensor> plan{st};
        SynthGenerator gen(plan, *hp, 5, 2, true);
        std::vector<uint8_t> bytes(st.n_bytes());
        const auto t0 = std::chrono::steady_clock::now();
        gen.fill(0, 0, st.n_rows(), bytes.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_GT(s, 0.0);
        std::printf("%-8s %6.2f MB in %7.2f ms: %5.2f GB/s\n", std::string(ggml_type_name(t)).c_str(),
                    (double)bytes.size() / 1e6, 1e3 * s, (double)bytes.size() / 1e9 / s);
    }
}

TEST(SynthRandomBlocks, ModelBuiltFromRandomBlocksRuns) {
    auto hp = synth_preset("tiny");
    ASSERT_TRUE(hp.ok());
    auto backend = make_cpu_backend(2);
    SynthWriteOptions opt;
    opt.seed = 3;
    opt.n_threads = 2;
    opt.random_quantized = true;
    auto fast = synth_model(*hp, SynthTypes{}, opt, *backend);
    ASSERT_TRUE(fast.ok()) << fast.error();
    opt.random_quantized = false;
    auto quantized = synth_model(*hp, SynthTypes{}, opt, *backend);
    ASSERT_TRUE(quantized.ok()) << quantized.error();
    const std::vector<int32_t> tokens{1, 5, 9, 200, 7};
    std::vector<float> a, b;
    for (auto* m : {fast->get(), quantized->get()}) {
        auto cache = m->new_cache(16, false);
        StepOptions so;
        ASSERT_TRUE(m->step(*cache, tokens, so, m == fast->get() ? &a : &b).ok());
    }
    ASSERT_EQ(a.size(), b.size());
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(a[i]));
        diff += std::fabs(a[i] - b[i]);
    }
    EXPECT_GT(diff, 0.0) << "the dense Q8_0 and Q2_K weights differ between the two builds";
}

}  // namespace
}  // namespace dsv4
