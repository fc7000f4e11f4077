// Conformance cases of the decode paths: the pipelined GEMV (cuda_gemv.cu) for every format it handles,
// n = 1..8, odd and multi-stage shapes (split-K), K not a multiple of 256 where the block allows, strided
// x/y, row views that start mid-word and activation strides that force the fallback; and the MoE decode
// path (cuda_moe_decode.cu, cuda_moe_gate_up_xreg.cu): small n*k, the boundary n*k = 64 and beyond it, experts
// repeated across and within tokens, mixed gate/up and down formats (V4-Flash: IQ2_XXS and Q2_K), V4-Flash widths.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

// Every format of the pipelined decode kernels (cuda_gemv_codec_list.cuh).
const GgmlType kDecodeTypes[] = {GgmlType::Q8_0,   GgmlType::MXFP4,  GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,
                                 GgmlType::Q5_K,   GgmlType::Q6_K,   GgmlType::Q4_0,   GgmlType::Q4_1,    GgmlType::Q5_0,
                                 GgmlType::Q5_1,   GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                 GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,   GgmlType::IQ1_M,
                                 GgmlType::F16,    GgmlType::BF16,   GgmlType::F32};

std::string type_name(GgmlType t) {
    return std::string(ggml_type_name(t));
}

// K of about `plain` values, a whole number of blocks: an odd count of blocks where it can be.
int64_t cols_near(GgmlType t, int64_t plain) {
    const int64_t be = std::max<int64_t>(ggml_traits(t).block_elems, 8);  // plain formats: whole groups of 8
    return std::max<int64_t>(1, plain / be) * be;
}

// y = x W^T on rows [first, first + M) of a stored matrix of first + M rows (first > 0 makes the matrix
// start mid-word for the 17- and 34-byte formats).
// matmul_norm: y = W (rms_norm(x) * w) for n rows of x (stride xs), w a norm weight (none when !weighted).
CaseGen matmul_norm_case(GgmlType t, int64_t n, int64_t K, int64_t M, int64_t xs, bool weighted, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "matmul_norm";
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s n=%lld K=%lld M=%lld xs=%lld%s", type_name(t).c_str(), (long long)n,
                      (long long)K, (long long)M, (long long)xs, weighted ? "" : " unweighted");
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, M, K, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * xs, -3.0f, 3.0f));
        auto g = std::make_shared<std::vector<float>>(weighted ? rng.vec(K, 0.5f, 1.5f) : std::vector<float>{});
        constexpr float kEps = 1e-6f;
        c.tol = tol_dot((double)K) + kTolElem;  // the norm rounds each input a few times, then a K-term dot
        c.ref_tol = c.tol;
        c.bytes = (double)w->size() + 4.0 * n * (K + M);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const Weight wt = make_weight(b, t, *w, M, K);
            const float* xd = d.f32(*x);
            const float* gd = weighted ? d.f32(*g) : nullptr;
            float* yd = d.f32_out(n * M);
            in.run = [&b, wt, xd, gd, yd, n, xs, M]() { b.matmul_norm(yd, M, xd, xs, gd, kEps, wt, n); };
            in.read = [&d, yd, n, M]() { return Arrays{d.get(yd, n * M)}; };
            return in;
        };
        c.reference = [=]() {
            const std::vector<float> deq = dequant_weight(t, *w, M, K);
            Array y((size_t)(n * M));
            for (int64_t i = 0; i < n; ++i) {
                const float* xi = x->data() + i * xs;
                double ss = 0;
                for (int64_t k = 0; k < K; ++k) ss += (double)xi[k] * xi[k];
                const double r = 1 / std::sqrt(ss / K + kEps);
                for (int64_t m = 0; m < M; ++m) {
                    double s = 0;
                    for (int64_t k = 0; k < K; ++k)
                        s += (double)deq[m * K + k] * xi[k] * r * (weighted ? (double)(*g)[k] : 1.0);
                    y[i * M + m] = s;
                }
            }
            return Arrays{y};
        };
        return c;
    };
}

CaseGen gemv_case(GgmlType t, int64_t n, int64_t K, int64_t M, int64_t xs, int64_t ys, int64_t first, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "matmul";
        char buf[160];
        std::snprintf(buf, sizeof buf, "decode %s n=%lld K=%lld M=%lld xs=%lld ys=%lld first=%lld",
                      type_name(t).c_str(), (long long)n, (long long)K, (long long)M, (long long)xs, (long long)ys,
                      (long long)first);
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        const int64_t rows = first + M;
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, rows, K, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * xs));
        c.tol = tol_dot((double)K);  // one K-term dot of the exact weights per output
        c.ref_tol = tol_dot((double)K);
        c.bytes = (double)w->size() * M / rows + 4.0 * n * (K + M);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            Weight wt;
            wt.type = t;
            wt.cols = K;
            wt.rows = rows;
            wt.row_bytes = ggml_row_bytes(ggml_traits(t), K);
            wt.data = b.weight_data(w->data(), w->size());
            wt.name = "decode_test";
            wt = wt.row_range(first, M);
            const float* xd = d.f32(*x);
            float* yd = d.f32_out(n * ys);
            in.run = [&b, wt, xd, yd, n, xs, ys]() { b.matmul(yd, ys, xd, xs, wt, n); };
            in.read = [&d, yd, n, M, ys]() { return Arrays{d.get(yd, n, M, ys)}; };
            return in;
        };
        c.reference = [=]() {
            const std::vector<float> deq = dequant_weight(t, *w, rows, K);
            Array y((size_t)(n * M));
            for (int64_t i = 0; i < n; ++i)
                for (int64_t m = 0; m < M; ++m) {
                    double s = 0;
                    for (int64_t k = 0; k < K; ++k) s += (double)deq[(first + m) * K + k] * (*x)[i * xs + k];
                    y[i * M + m] = s;
                }
            return Arrays{y};
        };
        return c;
    };
}

// moe_experts with gate/up of format tg and down of format td; ids: n*k expert ids (or empty: random
// distinct experts per token).
CaseGen moe_case(GgmlType tg, GgmlType td, int64_t n, int E, int k, int64_t D, int64_t F, float clamp,
                 std::vector<int32_t> fixed_ids, const char* note, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "moe_experts";
        char buf[200];
        std::snprintf(buf, sizeof buf, "decode %s/%s n=%lld E=%d k=%d D=%lld F=%lld clamp=%g%s", type_name(tg).c_str(),
                      type_name(td).c_str(), (long long)n, E, k, (long long)D, (long long)F, clamp, note);
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto wg = std::make_shared<std::vector<uint8_t>>(random_weight(tg, (int64_t)E * F, D, rng));
        auto wu = std::make_shared<std::vector<uint8_t>>(random_weight(tg, (int64_t)E * F, D, rng));
        auto wd = std::make_shared<std::vector<uint8_t>>(random_weight(td, (int64_t)E * D, F, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * D));
        auto ids = std::make_shared<std::vector<int32_t>>(fixed_ids);
        if (ids->empty()) {
            for (int64_t i = 0; i < n; ++i) {
                std::vector<int32_t> perm(E);
                std::iota(perm.begin(), perm.end(), 0);
                std::shuffle(perm.begin(), perm.end(), rng.engine());
                ids->insert(ids->end(), perm.begin(), perm.begin() + k);
            }
        }
        auto wts = std::make_shared<std::vector<float>>(rng.vec(n * k, 0.05f, 1.0f));
        // gate and up are D-term dots, SwiGLU adds transcendental error, down is an F-term dot, and each
        // token sums k expert outputs (as cases_moe.cpp).
        c.tol = 2 * tol_dot((double)D) + tol_dot((double)F) + kTolTransc + k * kTolElem;
        c.ref_tol = c.tol;
        c.bytes = (double)n * k * (wg->size() + wu->size() + wd->size()) / E + 8.0 * n * D;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            MoeArgs a;
            a.gate = make_weight(b, tg, *wg, F, D, E);
            a.up = make_weight(b, tg, *wu, F, D, E);
            a.down = make_weight(b, td, *wd, D, F, E);
            a.x = d.f32(*x);
            a.ids = d.i32(*ids);
            a.weights = d.f32(*wts);
            a.out = d.f32_out(n * D);
            a.n = n;
            a.k = k;
            a.clamp = clamp;
            in.run = [&b, a]() { b.moe_experts(a); };
            in.read = [&d, a, n, D]() { return Arrays{d.get(a.out, n * D)}; };
            return in;
        };
        c.reference = [=]() {
            return Arrays{moe_experts_reference(tg, td, *wg, *wu, *wd, *x, *ids, *wts, n, E, k, D, F, clamp)};
        };
        return c;
    };
}

}  // namespace

void add_decode_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    for (GgmlType t : kDecodeTypes) {
        const int64_t be = ggml_traits(t).block_elems;
        // About 1200 values: 37 blocks of 32 (not a multiple of 256), 3 of 256, 150 groups of 8.
        const int64_t K = cols_near(t, be == 256 ? 768 : 1200);
        for (int64_t n = 1; n <= 8; ++n) out.push_back(gemv_case(t, n, K, 83, K + 4, 83 + 3, 0, o.seed));
        // Many stages per row, a partial last stage and split-K over the block's warps.
        const int64_t big = cols_near(t, be == 256 ? 17 * 256 : 4450);
        for (int64_t n : {1, 5, 8}) out.push_back(gemv_case(t, n, big, 300, big, 300, 0, o.seed));
        // One block per row; a single output row.
        for (int64_t n : {1, 4}) out.push_back(gemv_case(t, n, cols_near(t, be), 7, cols_near(t, be), 7, 0, o.seed));
        out.push_back(gemv_case(t, 2, K, 1, K, 1, 0, o.seed));
        // A row view starting at row 1 (mid-word for MXFP4 and Q8_0 rows) and, separately, an activation
        // stride that is not a multiple of 4 floats (the generic kernel takes over).
        out.push_back(gemv_case(t, 2, K, 33, K, 33, 1, o.seed));
        out.push_back(gemv_case(t, 3, K, 33, K + 5, 33, 0, o.seed));
    }
    const GgmlType q8 = GgmlType::Q8_0;
    // matmul_norm: the row normed inside that kernel (Q8_0, one row; with and without a norm weight, half and
    // whole blocks per lane, a strided x) and the shapes left to rms_norm + matmul (several rows, another format).
    out.push_back(matmul_norm_case(q8, 1, 1024, 83, 1024, true, o.seed));
    out.push_back(matmul_norm_case(q8, 1, 512, 33, 512 + 4, true, o.seed));
    out.push_back(matmul_norm_case(q8, 1, 4096, 130, 4096, false, o.seed));
    out.push_back(matmul_norm_case(q8, 3, 1024, 83, 1024 + 4, true, o.seed));
    out.push_back(matmul_norm_case(GgmlType::F16, 1, 1024, 83, 1024, true, o.seed));
    // The Q8_0 kernel with the activation in registers (cuda_gemv_q8_xreg.cu: n = 1, K a multiple of 512 up to
    // 16384): half a block per lane (K = 512, 1536, 15872 = 31 warps) and a whole one (1024, 4096, 16384), fewer
    // rows than a stage (1, 3), a row view (first = 1), and 5000 rows of K = 16384 (one block per SM on an
    // H200: 40 rows per block, so the warps' sums are flushed twice, the second time for a partial chunk).
    for (int64_t K : {512, 1024, 1536, 4096, 15872}) out.push_back(gemv_case(q8, 1, K, 83, K + 4, 83, 0, o.seed));
    out.push_back(gemv_case(q8, 1, 1024, 1, 1024, 1, 0, o.seed));
    out.push_back(gemv_case(q8, 1, 4096, 3, 4096, 3, 0, o.seed));
    out.push_back(gemv_case(q8, 1, 2048, 33, 2048, 33, 1, o.seed));
    out.push_back(gemv_case(q8, 1, 16384, 5000, 16384, 5000, 0, o.seed));
    // The GEMV of one row in registers for the lane-codec formats (cuda_gemv_lane_xreg.cu: K a multiple of 512):
    // half blocks per lane (K = 1536, rows at other offsets in their 16-byte word for most formats), whole ones
    // (K = 4096, 300 rows: several stages and chunks), a partial stage (3 rows) and a row view from row 1.
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                       GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q2_K}) {
        out.push_back(gemv_case(t, 1, 1536, 83, 1536 + 4, 83, 0, o.seed));
        out.push_back(gemv_case(t, 1, 4096, 300, 4096, 300, 0, o.seed));
        out.push_back(gemv_case(t, 1, 1024, 3, 1024, 3, 0, o.seed));
        out.push_back(gemv_case(t, 1, 2048, 33, 2048, 33, 1, o.seed));
    }
    // The same kernel for the 2-4 tokens of a speculative verify step (every row's digits in registers, up to
    // 16 warps: K <= 8192), strided activations and outputs, a partial stage, and the normed form.
    for (int64_t n : {2, 3, 4}) {
        for (int64_t K : {512, 1536, 4096, 8192}) out.push_back(gemv_case(q8, n, K, 83, K + 4, 83 + 5, 0, o.seed));
        out.push_back(gemv_case(q8, n, 1024, 3, 1024, 3, 0, o.seed));
        out.push_back(matmul_norm_case(q8, n, 1024, 83, 1024 + 4, true, o.seed));
    }
    // MoE: every decode format for all three stacks, one token and seven tokens of 6 slots (42 pairs).
    for (GgmlType t : kDecodeTypes) {
        const int64_t be = ggml_traits(t).block_elems;
        const int64_t D = cols_near(t, be == 256 ? 512 : 96), F = cols_near(t, be == 256 ? 256 : 40);
        out.push_back(moe_case(t, t, 1, 16, 6, D, F, 0.0f, {}, "", o.seed));
        out.push_back(moe_case(t, t, 7, 16, 6, D, F, 1.5f, {}, "", o.seed));
    }
    const GgmlType iq = GgmlType::IQ2_XXS, q2 = GgmlType::Q2_K;
    // V4-Flash formats: gate/up IQ2_XXS, down Q2_K; experts shared across tokens and repeated within one.
    out.push_back(moe_case(iq, q2, 1, 16, 6, 512, 256, 10.0f, {}, "", o.seed));
    out.push_back(
        moe_case(iq, q2, 3, 8, 4, 512, 256, 10.0f, {5, 1, 7, 2, 1, 5, 0, 3, 2, 7, 5, 1}, " shared ids", o.seed));
    out.push_back(moe_case(iq, q2, 2, 8, 3, 512, 256, 0.0f, {3, 3, 1, 6, 0, 6}, " repeated ids", o.seed));
    out.push_back(moe_case(iq, q2, 8, 32, 8, 512, 256, 10.0f, {}, " n*k=64", o.seed));   // the largest decode case
    out.push_back(moe_case(iq, q2, 13, 32, 5, 512, 256, 10.0f, {}, " n*k=65", o.seed));  // the grouped path
    out.push_back(moe_case(iq, q2, 1, 8, 6, 4096, 2048, 10.0f, {}, " V4-Flash widths", o.seed));
    out.push_back(moe_case(GgmlType::Q8_0, GgmlType::Q6_K, 2, 8, 6, 1024, 512, 0.0f, {}, " mixed", o.seed));
    // The kernels with the activation in registers (one token), V4-Flash's formats: IQ2_XXS gate/up
    // (cuda_moe_gate_up_xreg.cu, D a multiple of 512) and Q2_K down (cuda_moe_down_xreg.cu, F a multiple of 512,
    // k * F / 512 <= 32 warps),
    // whole 32-value blocks per lane where D (F) is a multiple of 1024, else halves. D = 1536 and 3072: rows
    // of 396 and 792 bytes (each row starts at another offset in its 16-byte word); F = 1536 with 5 slots (15
    // warps, down rows of 504 bytes); repeated experts in a token (the summation order's ties); 8 slots.
    out.push_back(moe_case(iq, GgmlType::Q8_0, 1, 8, 3, 1536, 96, 10.0f, {}, " xreg odd widths", o.seed));
    out.push_back(moe_case(iq, q2, 1, 8, 6, 3072, 1024, 10.0f, {}, " xreg whole blocks", o.seed));
    out.push_back(moe_case(iq, q2, 1, 8, 6, 512, 512, 0.0f, {3, 3, 1, 6, 0, 6}, " repeated ids, xreg", o.seed));
    out.push_back(moe_case(iq, q2, 1, 32, 8, 512, 512, 10.0f, {}, " k=8, xreg", o.seed));
    out.push_back(moe_case(GgmlType::Q8_0, q2, 1, 8, 5, 512, 1536, 0.0f, {}, " xreg down odd widths", o.seed));
    // The register kernels of every format with a LaneCodec (cuda_gemv_xreg_lanes.cuh), gate/up and down of the
    // format: half blocks per lane for gate/up (D = 1536; rows starting at other offsets in their 16-byte word
    // for most formats) with whole ones for down (F = 1024); the other way round with 5 slots (F = 1536: 15
    // warps); 3 tokens with experts shared between them.
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                       GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q2_K}) {
        out.push_back(moe_case(t, t, 1, 8, 6, 1536, 1024, 10.0f, {}, " xreg", o.seed));
        out.push_back(moe_case(t, t, 1, 8, 5, 3072, 1536, 0.0f, {}, " xreg", o.seed));
        out.push_back(moe_case(t, t, 3, 8, 4, 1024, 512, 10.0f, {5, 1, 7, 2, 1, 5, 0, 3, 2, 7, 5, 1}, " shared ids, xreg",
                               o.seed));
    }
    // The register kernels for 2-4 tokens (a speculative verify step), with experts shared between tokens.
    out.push_back(moe_case(iq, q2, 2, 8, 6, 3072, 1024, 10.0f, {}, " 2 tokens, xreg", o.seed));
    out.push_back(moe_case(iq, q2, 3, 8, 4, 512, 512, 10.0f, {5, 1, 7, 2, 1, 5, 0, 3, 2, 7, 5, 1}, " shared ids, xreg",
                           o.seed));
    out.push_back(moe_case(iq, q2, 4, 16, 6, 1536, 512, 0.0f, {}, " 4 tokens, xreg", o.seed));
    // Batches of decoding tokens on the decode kernels (up to 512 pairs): experts with 1 to 17 pairs, a token
    // using one expert in two slots, 512 pairs over 256 experts, V4-Flash's widths, other formats.
    out.push_back(moe_case(iq, q2, 8, 32, 6, 512, 256, 10.0f, {}, " 8 tokens", o.seed));
    {
        // Experts 0..6 with 1, 2, 3, 4, 5, 8 and 17 pairs, in order: token 0 is {0, 1, 1, 2} (one expert in two
        // slots), later tokens repeat experts too.
        std::vector<int32_t> ids;
        const int pairs_of[] = {1, 2, 3, 4, 5, 8, 17};
        for (int e = 0; e < 7; ++e) ids.insert(ids.end(), pairs_of[e], e);
        out.push_back(moe_case(iq, q2, 10, 8, 4, 512, 256, 10.0f, ids, " 1 to 17 pairs per expert", o.seed));
    }
    out.push_back(moe_case(iq, q2, 64, 8, 6, 512, 512, 0.0f, {}, " 48 pairs per expert", o.seed));
    out.push_back(moe_case(iq, q2, 64, 256, 8, 512, 256, 10.0f, {}, " 512 pairs", o.seed));
    out.push_back(moe_case(iq, q2, 12, 16, 6, 4096, 2048, 10.0f, {}, " 12 tokens, V4-Flash widths", o.seed));
    out.push_back(moe_case(GgmlType::Q4_K, GgmlType::Q6_K, 16, 16, 6, 1024, 512, 0.0f, {}, " 16 tokens", o.seed));
    out.push_back(moe_case(GgmlType::Q8_0, GgmlType::MXFP4, 12, 8, 6, 1024, 512, 10.0f, {}, " 12 tokens", o.seed));
    // Pruned and re-routed files (fewer routed experts, any number used): one token on the register kernels, a
    // few tokens on the pipelined ones, more than 64 pairs on the grouped path.
    for (auto [E, k] : {std::pair{24, 4}, std::pair{7, 7}, std::pair{1, 1}, std::pair{256, 4}}) {
        out.push_back(moe_case(iq, q2, 1, E, k, 512, 512, 10.0f, {}, " pruned, xreg", o.seed));
        out.push_back(moe_case(GgmlType::Q4_K, GgmlType::IQ1_M, 5, E, k, 512, 256, 10.0f, {}, " pruned", o.seed));
        out.push_back(moe_case(GgmlType::IQ1_S, GgmlType::Q5_K, 70 / k, E, k, 512, 256, 10.0f, {}, " pruned, grouped",
                               o.seed));
    }
}

}  // namespace dsv4::backend_ops
