// Conformance cases of the token draw (Backend::sample, ops/sample_args.h): the CUDA kernel must pick the CPU
// oracle's tokens and top alternatives exactly and its logprobs to a few roundings, for greedy and truncated
// draws, ties, banned tokens, adjustments, peaked and flat rows, one row and batches. (The oracle itself is
// held to the host Sampler's distribution by tests/test_sample_op.cpp.)
#include <cstdio>
#include <cstring>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

struct DrawSpec {
    const char* name;
    float temperature, top_p, min_p;
    int32_t top_k, n_top;
    bool adjust;
};

// Logits of one row: `kind` 0 = random, 1 = ties (few distinct values), 2 = peaked, 3 = with banned tokens,
// 4 = all equal (every cut falls inside one tie), 5 = flat (weights within a few times of each other: top-p
// keeps most of the row, the draw's slowest case).
constexpr int kKinds = 6;
const char* kind_name(int kind) {
    static const char* const names[kKinds] = {"random", "ties", "peaked", "banned", "equal", "flat"};
    return names[kind];
}

std::vector<float> row_logits(Rng& rng, int64_t V, int kind) {
    std::vector<float> l = rng.vec(V, -8, 8);
    for (float& x : l) {
        if (kind == 1) x = (float)(int)(x * 0.5f);
        if (kind == 2) x *= 4.0f;
        if (kind == 4) x = 1.5f;
        if (kind == 5) x *= 1.0f / 16.0f;
    }
    if (kind == 3)
        for (int64_t i = 0; i < V; i += 3) l[i] = -std::numeric_limits<float>::infinity();
    return l;
}

CaseGen draw_case(int64_t V, int64_t rows, const DrawSpec& spec, int kind, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "sample";
        char buf[160];
        std::snprintf(buf, sizeof buf, "V=%lld rows=%lld %s logits=%s", (long long)V, (long long)rows, spec.name,
                      kind_name(kind));
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto logits = std::make_shared<std::vector<float>>();
        for (int64_t r = 0; r < rows; ++r) {
            const std::vector<float> l = row_logits(rng, V, kind);
            logits->insert(logits->end(), l.begin(), l.end());
        }
        auto args = std::make_shared<std::vector<SampleArgs>>((size_t)rows);
        auto adjust = std::make_shared<std::vector<SampleAdjust>>();
        for (int64_t r = 0; r < rows; ++r) {
            SampleArgs& a = (*args)[(size_t)r];
            a.row = rows - 1 - r;  // rows out of order: the row index is honoured
            a.u = (double)rng.uniform(0.0f, 1.0f);
            a.temperature = spec.temperature;
            a.top_k = spec.top_k;
            a.top_p = spec.top_p;
            a.min_p_fixed = spec.min_p > 0 ? (uint64_t)std::ceil((double)spec.min_p * kSampleFixedOne) : 0;
            a.n_top = spec.n_top;
            if (spec.adjust) {
                a.adjust_begin = (int32_t)adjust->size();
                for (int j = 0; j < 24; ++j) {
                    SampleAdjust e;
                    e.token = (int32_t)((r * 131 + j * 977) % V);
                    e.bias = j % 4 == 0 ? -std::numeric_limits<float>::infinity() : rng.uniform(-2, 2);
                    e.rep = j % 2 ? 1.3f : 1.0f;
                    e.sub = j % 3 ? 0.25f * (float)j : 0.0f;
                    adjust->push_back(e);
                }
                a.adjust_count = (int32_t)adjust->size() - a.adjust_begin;
            }
        }
        c.tols = {0, 0, kTolElem, 0, kTolElem};
        c.bytes = 4.0 * (double)(V * rows) * 3;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const float* lg = d.f32(*logits);
            auto* args_d = static_cast<SampleArgs*>(d.bytes(args->size() * sizeof(SampleArgs)));
            b.upload(args_d, args->data(), args->size() * sizeof(SampleArgs));
            auto* adj_d = static_cast<SampleAdjust*>(d.bytes(std::max<size_t>(adjust->size(), 1) * sizeof(SampleAdjust)));
            if (!adjust->empty()) b.upload(adj_d, adjust->data(), adjust->size() * sizeof(SampleAdjust));
            auto* out_d = static_cast<SampleOut*>(d.bytes((size_t)rows * sizeof(SampleOut)));
            in.run = [&b, out_d, lg, V, args_d, rows, adj_d]() { b.sample(out_d, lg, V, args_d, rows, adj_d); };
            in.read = [&b, out_d, rows]() {
                std::vector<SampleOut> o((size_t)rows);
                b.download(o.data(), out_d, o.size() * sizeof(SampleOut));
                Array tok, status, lp, top_ids, top_lp;
                for (const SampleOut& x : o) {
                    tok.push_back(x.token);
                    status.push_back(x.status * 100000.0 + x.bad_token + 1);
                    lp.push_back(x.logprob);
                    top_ids.push_back(x.n_top);
                    for (int i = 0; i < x.n_top; ++i) {
                        top_ids.push_back(x.top_ids[i]);
                        top_lp.push_back(x.top_logprobs[i]);
                    }
                }
                return Arrays{tok, status, lp, top_ids, top_lp};
            };
            return in;
        };
        return c;
    };
}

}  // namespace

void add_sample_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    const DrawSpec specs[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 0, 0, false},
        {"greedy top5", 0.0f, 1.0f, 0.0f, 0, 5, false},
        {"T=1", 1.0f, 1.0f, 0.0f, 0, 0, false},
        {"T=0.6 top_p=0.95", 0.6f, 0.95f, 0.0f, 0, 1, false},
        {"T=0.8 top_k=40", 0.8f, 1.0f, 0.0f, 40, 0, false},
        {"T=1 top_k=50 top_p=0.9 top20", 1.0f, 0.9f, 0.0f, 50, 20, false},
        {"T=0.7 min_p=0.05", 0.7f, 1.0f, 0.05f, 0, 0, false},
        {"T=1.2 top_p=0.5 min_p=0.02 adjust", 1.2f, 0.5f, 0.02f, 0, 3, true},
        {"greedy adjust", 0.0f, 1.0f, 0.0f, 0, 2, true},
        {"T=2 top_k=4000", 2.0f, 1.0f, 0.0f, 4000, 0, false},
        {"T=0.6 top_p=0.95 top20", 0.6f, 0.95f, 0.0f, 0, 20, false},
        {"T=1 top_p=0.95 top_k=200000", 1.0f, 0.95f, 0.0f, 200000, 0, false},  // top_k beyond the row: no cut
    };
    constexpr int kGreedy = 0, kT1 = 2, kTopP = 3, kTopK = 4, kMinP = 6, kAdjust = 7, kTopPTop20 = 10;
    for (const DrawSpec& s : specs)
        for (int kind = 0; kind < kKinds; ++kind) out.push_back(draw_case(1000, 3, s, kind, o.seed));
    for (const DrawSpec& s : specs) out.push_back(draw_case(129280, 2, s, 0, o.seed));
    // One sequence at the model's vocabulary: the latency a single stream sees per step (the perf mode's
    // single-row numbers), on random rows and on the cases that stress the selections: flat weights (top-p
    // keeps most of the row), ties across the cut, one value everywhere.
    for (int si : {kGreedy, kT1, kTopP, kTopK, kMinP, kTopPTop20}) out.push_back(draw_case(129280, 1, specs[si], 0, o.seed));
    for (int kind : {1, 4, 5})
        for (int si : {kTopP, kTopK, kTopPTop20}) out.push_back(draw_case(129280, 1, specs[si], kind, o.seed));
    out.push_back(draw_case(129280, 64, specs[kTopP], 2, o.seed));
    out.push_back(draw_case(129280, 8, specs[kAdjust], 1, o.seed));
    out.push_back(draw_case(129280, 12, specs[kTopPTop20], 5, o.seed));  // past one wave of 16-block clusters
    out.push_back(draw_case(7, 1, specs[5], 1, o.seed));  // fewer tokens than top_k and n_top
    out.push_back(draw_case(20, 1, specs[kTopPTop20], 0, o.seed));  // n_top = V: every token an alternative
}

}  // namespace dsv4::backend_ops
