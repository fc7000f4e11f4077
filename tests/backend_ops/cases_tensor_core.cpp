// Conformance cases of the CUDA backend's bf16 GEMM mode (tensor cores, src/kernels/cuda/cuda_gemm_tc.cu):
// matmul on every weight format at prefill-sized row counts (16 .. 1000, strided x and y, K not a multiple
// of 8, weights spanning two decode slabs) and moe_experts with many tokens (experts above and below the
// per-expert tensor-core threshold in one call), each against the CPU oracle with a tolerance derived from
// bf16 rounding. Every other case of this program runs the CUDA backend in the f32 mode. --perf adds the
// prefill shapes of V4-Flash (q_b, wo_b, the routed experts) in both modes and prints TFLOP/s.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/fp16.h"
#include "harness.h"
#if defined(DSV4_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace dsv4::backend_ops {

namespace {

// moe_experts in the bf16 mode rounds x, the three weights and h = silu(min(g, c)) clamp(u, -c, c) to bf16 and
// sums in f32. Each rounding is a relative error of variance at most r = u^2/3 (uniform over [-u, u]),
// independent of the others; to first order a token's output y = sum_j w_j Wd_j h_j has an error of variance
//   sum_j w_j^2 sum_f Wd_df^2 (var dh_f + r h_f^2)             (h's errors, and the rounding of Wd)
//   var dh_f = a_f^2 r sum_i (Wg_fi x_i)^2 + b_f^2 r sum_i (Wu_fi x_i)^2 + r h_f^2
//                                                             (the gate and up weights, h's own rounding;
//                                                              a_f = dh/dg, b_f = dh/du, 0 where clamped)
//   + r sum_i (J_di x_i)^2, J = dy/dx                         (x's rounding, shared by every f, g and u, and
//                                                              the token's experts).
// The last term is E ||J (x * z)||^2 over random signs z, taken from two sign vectors per token (J (x * z) costs
// what a forward pass does). The expected NMSE is the sum of the variances over the sum of the squared outputs:
// a property of the case, not of u alone. Where g and u are large dots that the clamp and SiLU keep only where
// they cancel to O(1) (the random scales of Q6_K and IQ4_XS make weights of up to ~200 and dots of ~1e3 against
// a clamp of 1.5), the terms are far larger than the result and the expectation is ~10x that of the other
// formats; where the weights share an offset (Q4_1, Q5_1), x's rounding reaches every output coherently.
// Estimated from the first tokens (drawn like the rest), at most ~5e8 multiply-adds; bound: 8x the expectation.
double bf16_moe_tol(GgmlType tg, GgmlType td, const std::vector<uint8_t>& gate_bytes,
                    const std::vector<uint8_t>& up_bytes, const std::vector<uint8_t>& down_bytes,
                    const std::vector<float>& x, const std::vector<int32_t>& ids, const std::vector<float>& wts,
                    int64_t n, int E, int k, int64_t D, int64_t F, float clamp, uint64_t seed) {
    constexpr int kProbes = 2;
    const std::vector<float> wg = dequant_weight(tg, gate_bytes, (int64_t)E * F, D);
    const std::vector<float> wu = dequant_weight(tg, up_bytes, (int64_t)E * F, D);
    const std::vector<float> wd = dequant_weight(td, down_bytes, (int64_t)E * D, F);
    const double r = kUb2 / 3;
    const int64_t tokens = std::clamp<int64_t>((int64_t)(5e8 / (3.0 * (1 + kProbes) * k * D * F)), 1, n);
    Rng rng(seed);
    double var_sum = 0, sq_sum = 0;
    std::vector<double> h(F), vh(F), y(D), vy(D), xz((size_t)kProbes * D), hz((size_t)kProbes * F),
        yz((size_t)kProbes * D);
    for (int64_t t = 0; t < tokens; ++t) {
        const float* xt = x.data() + t * D;
        for (int64_t i = 0; i < kProbes * D; ++i) xz[i] = (rng.byte() & 1 ? 1.0 : -1.0) * xt[i % D];
        std::fill(y.begin(), y.end(), 0.0);
        std::fill(vy.begin(), vy.end(), 0.0);
        std::fill(yz.begin(), yz.end(), 0.0);
        for (int j = 0; j < k; ++j) {
            const int64_t e = ids[t * k + j];
            const double w = wts[t * k + j];
            for (int64_t f = 0; f < F; ++f) {
                const float* gr = wg.data() + (e * F + f) * D;
                const float* ur = wu.data() + (e * F + f) * D;
                double g = 0, u = 0, sg = 0, su = 0, gz[kProbes] = {}, uz[kProbes] = {};
                for (int64_t i = 0; i < D; ++i) {
                    const double pg = (double)gr[i] * xt[i], pu = (double)ur[i] * xt[i];
                    g += pg, u += pu, sg += pg * pg, su += pu * pu;
                    for (int p = 0; p < kProbes; ++p) gz[p] += gr[i] * xz[p * D + i], uz[p] += ur[i] * xz[p * D + i];
                }
                const bool g_clamped = clamp > 0 && g > clamp, u_clamped = clamp > 0 && std::fabs(u) > clamp;
                const double gc = g_clamped ? clamp : g, uc = u_clamped ? std::copysign((double)clamp, u) : u;
                const double sig = 1.0 / (1.0 + std::exp(-gc)), silu = gc * sig;
                const double a = g_clamped ? 0.0 : sig * (1.0 + gc * (1.0 - sig)) * uc;
                const double b = u_clamped ? 0.0 : silu;
                h[f] = silu * uc;
                vh[f] = r * (a * a * sg + b * b * su) + 2 * r * h[f] * h[f];
                for (int p = 0; p < kProbes; ++p) hz[p * F + f] = a * gz[p] + b * uz[p];
            }
            for (int64_t d = 0; d < D; ++d) {
                const float* dr = wd.data() + (e * D + d) * F;
                double s = 0, v = 0, sz[kProbes] = {};
                for (int64_t f = 0; f < F; ++f) {
                    s += (double)dr[f] * h[f];
                    v += (double)dr[f] * dr[f] * vh[f];
                    for (int p = 0; p < kProbes; ++p) sz[p] += dr[f] * hz[p * F + f];
                }
                y[d] += w * s;
                vy[d] += w * w * v;
                for (int p = 0; p < kProbes; ++p) yz[p * D + d] += w * sz[p];
            }
        }
        for (int64_t d = 0; d < D; ++d) {
            double xv = 0;
            for (int p = 0; p < kProbes; ++p) xv += yz[p * D + d] * yz[p * D + d];
            var_sum += vy[d] + r * xv / kProbes;
            sq_sum += y[d] * y[d];
        }
    }
    return sq_sum > 0 ? 8 * var_sum / sq_sum : 0.0;
}

CaseGen matmul_case(Mode mode, GgmlType t, int64_t n, int64_t K, int64_t M, int64_t xs, int64_t ys, bool perf_only,
                    uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "matmul";
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %s n=%lld K=%lld M=%lld xs=%lld ys=%lld", mode_name(mode),
                      std::string(ggml_type_name(t)).c_str(), (long long)n, (long long)K, (long long)M, (long long)xs,
                      (long long)ys);
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, M, K, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * xs));
        c.tol = (mode == Mode::BF16 ? kTolBf16Dot : 0.0) + tol_dot((double)K);
        c.ref_tol = tol_dot((double)K);  // the CPU itself computes in f32
        c.bytes = (double)w->size() + 4.0 * n * (K + M);
        c.flops = 2.0 * n * M * K;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const Weight wt = make_weight(b, t, *w, M, K, 1);
            const float* xd = d.f32(*x);
            float* yd = d.f32_out(n * ys);
            in.run = [&b, mode, wt, xd, yd, n, xs, ys]() {
                const ScopedMode scope(b, mode);
                b.matmul(yd, ys, xd, xs, wt, n);
            };
            in.read = [&d, yd, n, M, ys]() { return Arrays{d.get(yd, n, M, ys)}; };
            return in;
        };
        c.reference = [=]() {
            const std::vector<float> deq = dequant_weight(t, *w, M, K);
            Array y((size_t)(n * M));
            for (int64_t i = 0; i < n; ++i)
                for (int64_t m = 0; m < M; ++m) {
                    double s = 0;
                    for (int64_t k = 0; k < K; ++k) s += (double)deq[m * K + k] * (*x)[i * xs + k];
                    y[i * M + m] = s;
                }
            return Arrays{y};
        };
        return c;
    };
}

// moe_experts with gate/up stacks of type tg and a down stack of type td. The CPU vs double reference of
// this op is checked by cases_moe.cpp; these cases compare the CUDA modes with the CPU only.
CaseGen experts_case(Mode mode, GgmlType tg, GgmlType td, int64_t n, int E, int k, int64_t D, int64_t F, float clamp,
                     bool perf_only, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "moe_experts";
        const std::string types = tg == td ? std::string(ggml_type_name(tg))
                                           : std::string(ggml_type_name(tg)) + "/" + std::string(ggml_type_name(td));
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %s n=%lld E=%d k=%d D=%lld F=%lld clamp=%g", mode_name(mode), types.c_str(),
                      (long long)n, E, k, (long long)D, (long long)F, clamp);
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto wg = std::make_shared<std::vector<uint8_t>>(random_weight(tg, (int64_t)E * F, D, rng));
        auto wu = std::make_shared<std::vector<uint8_t>>(random_weight(tg, (int64_t)E * F, D, rng));
        auto wd = std::make_shared<std::vector<uint8_t>>(random_weight(td, (int64_t)E * D, F, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * D));
        auto ids = std::make_shared<std::vector<int32_t>>();
        std::vector<int32_t> perm(E);
        for (int64_t i = 0; i < n; ++i) {
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng.engine());
            ids->insert(ids->end(), perm.begin(), perm.begin() + k);
        }
        auto wts = std::make_shared<std::vector<float>>(rng.vec(n * k, 0.05f, 1.0f));
        // The f32 mode's bound (cases_moe.cpp), plus the bf16 chain's.
        c.tol = 2 * tol_dot((double)D) + tol_dot((double)F) + kTolTransc + k * kTolElem;
        if (mode == Mode::BF16) {
            const double f32_tol = c.tol;
            const uint64_t signs = case_seed(seed, "signs " + c.shape);
            c.tol_of_inputs = [=]() {
                return f32_tol + bf16_moe_tol(tg, td, *wg, *wu, *wd, *x, *ids, *wts, n, E, k, D, F, clamp, signs);
            };
        }
        const double per_expert = (double)(wg->size() + wu->size() + wd->size()) / E;
        c.bytes = std::min<double>(E, (double)n * k) * per_expert + 8.0 * n * D;
        c.flops = 2.0 * n * k * 3.0 * D * F;
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
            in.run = [&b, mode, a]() {
                const ScopedMode scope(b, mode);
                b.moe_experts(a);
            };
            in.read = [&d, a, n, D]() { return Arrays{d.get(a.out, n * D)}; };
            return in;
        };
        return c;
    };
}

// The bf16 decoders of the tensor-core paths (cuda_dequant_bf16.cuh) with `run` values per thread: bit-identical
// (tol 0) to the CPU codec's value rounded to bf16 to nearest even, which is what the CPU instance returns;
// the CUDA instance reads the decoders' output through a test hook.
CaseGen weight_bf16_case(GgmlType t, int run, int64_t M, int64_t K, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "weight_bf16";
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s run=%d M=%lld K=%lld", std::string(ggml_type_name(t)).c_str(), run,
                      (long long)M, (long long)K);
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, M, K, rng));
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            const Weight wt = make_weight(b, t, *w, M, K, 1);
            auto got = std::make_shared<Array>();
            in.run = [&b, wt, got, t, w, run, M, K]() {
#if defined(DSV4_HAVE_CUDA)
                std::vector<uint16_t> bits;
                if (cuda_decode_weight_bf16(b, wt, run, &bits)) {
                    got->assign(bits.size(), 0.0);
                    for (size_t i = 0; i < bits.size(); ++i) (*got)[i] = bf16_to_f32(bits[i]);
                    return;
                }
                DSV4_CHECK_MSG(!cuda_gemm_precision(b), "weight_bf16: the CUDA hook refused %s run=%d",
                               std::string(ggml_type_name(t)).c_str(), run);
#else
                (void)b, (void)wt, (void)run;
#endif
                const std::vector<float> v = dequant_weight(t, *w, M, K);
                got->assign(v.size(), 0.0);
                for (size_t i = 0; i < v.size(); ++i) (*got)[i] = round_bf16(v[i]);
            };
            in.read = [got]() { return Arrays{*got}; };
            return in;
        };
        return c;
    };
}

}  // namespace

void add_tensor_core_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    const Mode bf16 = Mode::BF16, f32 = Mode::F32;
    for (GgmlType t : weight_types()) {
        // K of 1..3 blocks (plain types: 7, 83, 769, not multiples of 8); odd M; strided x and y, odd strides.
        const int64_t k1 = cols_for(t, 1, 7), k2 = cols_for(t, 2, 83), k3 = cols_for(t, 3, 769);
        out.push_back(matmul_case(bf16, t, 16, k2, 83, k2, 83, false, o.seed));
        out.push_back(matmul_case(bf16, t, 33, k3, 130, k3 + 5, 130 + 3, false, o.seed));
        out.push_back(matmul_case(bf16, t, 64, k1, 7, k1, 7, false, o.seed));
        out.push_back(matmul_case(bf16, t, 200, k2, 257, k2 + 1, 257 + 1, false, o.seed));
        out.push_back(matmul_case(bf16, t, 1000, k1, 96, k1, 96, false, o.seed));
        // Many tokens over 64 experts: ~19 rows per expert, so some experts take the tensor cores and some the
        // f32 kernels within one call.
        const int64_t D = cols_for(t, 1, 83), F = cols_for(t, 2, 7);
        out.push_back(experts_case(bf16, t, t, 200, 64, 6, D, F, 1.5f, false, o.seed));
    }
    // The decoders of the bf16 paths at every run length a kernel uses (8: the bf16 weight decode; 16, 32: the
    // expert kernels' down and gate/up), 3 blocks per row.
    for (GgmlType t : weight_types()) {
        const int64_t block = ggml_traits(t).block_elems;
        for (int run : {8, 16, 32})
            if ((block == 1 && run == 8) || (block > 1 && block % run == 0))
                out.push_back(weight_bf16_case(t, run, 67, cols_for(t, 3, 96), o.seed));
    }
    // 16..64 rows of a block format or a 16-bit plain type (the compressors' F16) with K a multiple of 256: the
    // kernel that decodes the blocks in shared memory (cuda_gemm_blocks.cu) where it serves, split over K (few
    // rows) or not (the two-slab case below); partial tiles of rows and activation rows, strided x and y, a
    // V4-Flash width; 24 rows: 64-row blocks with three activation tiles (40: 128-row blocks).
    for (GgmlType t : weight_types())
        if (ggml_traits(t).block_elems > 1 || t == GgmlType::F16 || t == GgmlType::BF16) {
            out.push_back(matmul_case(bf16, t, 40, 1024, 200, 1024 + 5, 200 + 3, false, o.seed));
            out.push_back(matmul_case(bf16, t, 24, 2048, 333, 2048 + 3, 333 + 1, false, o.seed));
        }
    out.push_back(matmul_case(bf16, GgmlType::Q8_0, 17, 4096, 1000, 4096, 1000, false, o.seed));
    out.push_back(matmul_case(bf16, GgmlType::Q8_0, 64, 4096, 515, 4096 + 4, 515, false, o.seed));
    // A weight of two decode slabs (2^25 values each): 131072 + 77 rows of 256.
    out.push_back(matmul_case(bf16, GgmlType::Q8_0, 16, 256, 131072 + 77, 256, 131072 + 77, false, o.seed));
    // Below the threshold the bf16 mode keeps the f32 kernels.
    out.push_back(matmul_case(bf16, GgmlType::Q8_0, 8, 256, 83, 256, 83, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::Q8_0, GgmlType::Q8_0, 7, 16, 6, 256, 512, 1.5f, false, o.seed));
    // Many tokens, every expert on the tensor cores; mixed expert formats as in the files people run.
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::IQ2_XXS})
        out.push_back(experts_case(bf16, t, t, 1000, 16, 6, 512, 256, 10.0f, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::IQ2_XXS, GgmlType::Q2_K, 300, 16, 6, 512, 256, 10.0f, false, o.seed));
    // Pruned files (fewer routed experts, any number used) on the tensor cores.
    for (auto [E, k] : {std::pair{24, 4}, std::pair{7, 7}, std::pair{1, 1}, std::pair{256, 4}})
        out.push_back(experts_case(bf16, GgmlType::IQ1_M, GgmlType::Q5_K, 300, E, k, 512, 256, 10.0f, false, o.seed));

    // A batch of decoding streams or a short chunk (16 tokens or more, up to 1024 pairs): the expert kernels
    // that read each touched expert once per tile of its rows (cuda_moe_blocks.cu), for every block format, at
    // 8-row tiles (<= 2 rows per expert on average), 16-row tiles (<= 8) and 32-row tiles, partial tiles and
    // experts spanning several tiles among them; mixed formats as in V4-Flash.
    for (GgmlType t : weight_types())
        if (ggml_traits(t).block_elems > 1 && 256 % ggml_traits(t).block_elems == 0)
            out.push_back(experts_case(bf16, t, t, 20, 64, 6, 512, 256, 10.0f, false, o.seed));
    // The register kernels' two-plane activations (a batch below tc_blocks' pairs) with whole blocks per lane, for
    // every format they take.
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                       GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q2_K})
        out.push_back(experts_case(bf16, t, t, 20, 64, 6, 1024, 1024, 10.0f, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::IQ2_XXS, GgmlType::Q2_K, 16, 256, 6, 1024, 512, 10.0f, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::IQ2_XXS, GgmlType::Q2_K, 40, 32, 6, 512, 512, 10.0f, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::Q8_0, GgmlType::Q4_K, 64, 8, 4, 768, 256, 10.0f, false, o.seed));
    out.push_back(experts_case(bf16, GgmlType::MXFP4, GgmlType::MXFP4, 170, 64, 6, 256, 256, 1.5f, false, o.seed));

    if (o.perf) {
        // V4-Flash prefill shapes: attn_q_b (Q8_0 32768 x 1024), attn_output_b (Q8_0 4096 x 8192), and the
        // routed experts (256, k = 6, D 4096, F 2048, IQ2_XXS gate/up, Q2_K down). The f32 mode for
        // comparison where its run time stays reasonable.
        // A batch of 16 / 64 decoding streams (the same experts).
        for (int64_t n : {16, 64})
            out.push_back(
                experts_case(bf16, GgmlType::IQ2_XXS, GgmlType::Q2_K, n, 256, 6, 4096, 2048, 10.0f, true, o.seed));
        for (int64_t n : {512, 2048, 8192}) {
            for (Mode m : {bf16, f32}) {
                if (m == f32 && n > 2048) continue;
                out.push_back(matmul_case(m, GgmlType::Q8_0, n, 1024, 32768, 1024, 32768, true, o.seed));
                out.push_back(matmul_case(m, GgmlType::Q8_0, n, 8192, 4096, 8192, 4096, true, o.seed));
                out.push_back(
                    experts_case(m, GgmlType::IQ2_XXS, GgmlType::Q2_K, n, 256, 6, 4096, 2048, 10.0f, true, o.seed));
            }
        }
    }
}

}  // namespace dsv4::backend_ops
