// Conformance cases of the hyper-connection ops: hc_pre (mix projection, Sinkhorn, collapse; alone and with the
// previous sublayer's hc_post fused in), hc_post (with and without a second addend) and hc_head, over stream
// counts, widths and the f32/f16/bf16/Q8_0 projection formats.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct HcInputs {
    int hc = 4;
    int64_t D = 0, n = 0;
    GgmlType fn_type = GgmlType::F32;
    std::vector<uint8_t> fn;  // [n_mix, hc*D] in fn_type
    std::vector<float> fn_f32, H, scale, base;
};

std::shared_ptr<HcInputs> hc_inputs(int hc, int64_t D, int64_t n, GgmlType t, int n_mix, Rng& rng) {
    auto in = std::make_shared<HcInputs>();
    in->hc = hc;
    in->D = D;
    in->n = n;
    in->fn_type = t;
    const int64_t flat = hc * D;
    in->fn = random_weight(t, n_mix, flat, rng);  // entries in [-1, 1]: mixes are O(sqrt(flat)) before the scale
    in->fn_f32 = dequant_weight(t, in->fn, n_mix, flat);
    in->H = rng.vec(n * flat, -2, 2);
    // Scales bring the mixes to O(1) so sigmoid and softmax see a useful range.
    const float s = 1.0f / std::sqrt((float)flat);
    in->scale = {s * rng.uniform(0.5f, 2), s * rng.uniform(0.5f, 2), s * rng.uniform(0.5f, 2)};
    in->base = rng.vec(n_mix, -1, 1);
    return in;
}

Weight fn_weight(Backend& b, const HcInputs& in, int n_mix) {
    Weight w;
    w.type = in.fn_type;
    w.rows = n_mix;
    w.cols = in.hc * in.D;
    w.row_bytes = ggml_row_bytes(ggml_traits(in.fn_type), w.cols);
    w.data = b.weight_data(in.fn.data(), in.fn.size());
    w.name = "hc_fn";
    return w;
}

// hc_pre's projection, scale and base on the device, and its outputs x [n, D], post [n, hc], comb [n, hc, hc].
struct HcPreDev {
    Weight fn;
    const float *scale, *base;
    float *x, *post, *comb;
};
HcPreDev hc_pre_dev(Backend& b, Dev& d, const HcInputs& in, int n_mix) {
    return {.fn = fn_weight(b, in, n_mix),
            .scale = d.f32(in.scale),
            .base = d.f32(in.base),
            .x = d.f32_out(in.n * in.D),
            .post = d.f32_out(in.n * in.hc),
            .comb = d.f32_out(in.n * in.hc * in.hc)};
}

// mixes[m] = (H_i . fn_m) / sqrt(mean(H_i^2) + eps), in double, for token i of H [n, hc, D] (f32 inputs or a
// double reference's streams).
template <class V>
std::vector<double> ref_mixes(const HcInputs& in, const V* H, int64_t i, int n_mix, double eps) {
    const int64_t flat = in.hc * in.D;
    const V* h = H + i * flat;
    double ss = 0;
    for (int64_t j = 0; j < flat; ++j) ss += (double)h[j] * h[j];
    const double r = 1 / std::sqrt(ss / flat + eps);
    std::vector<double> m((size_t)n_mix);
    for (int k = 0; k < n_mix; ++k) {
        double s = 0;
        for (int64_t j = 0; j < flat; ++j) s += (double)h[j] * in.fn_f32[k * flat + j];
        m[k] = s * r;
    }
    return m;
}

std::string shape_of(int hc, int64_t D, int64_t n, GgmlType t) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "hc=%d D=%lld n=%lld fn=%s", hc, (long long)D, (long long)n,
                  std::string(ggml_type_name(t)).c_str());
    return buf;
}

constexpr int kIters = 20;
constexpr float kEps = 1e-6f;

// hc_pre in double on the streams H [n, hc, D] with in's fn, scale and base: {x, post, comb}.
template <class V>
Arrays ref_hc_pre(const HcInputs& in, const V* H) {
    const int hc = in.hc, n_mix = (2 + hc) * hc;
    const int64_t D = in.D;
    Array xs, posts, combs;
    for (int64_t i = 0; i < in.n; ++i) {
        const std::vector<double> m = ref_mixes(in, H, i, n_mix, kEps);
        std::vector<double> pre(hc), comb(hc * hc);
        for (int j = 0; j < hc; ++j) {
            pre[j] = sigmoid(m[j] * in.scale[0] + in.base[j]) + kEps;
            posts.push_back(2 * sigmoid(m[hc + j] * in.scale[1] + in.base[hc + j]));
        }
        // Row softmax (+eps), then alternate column and row normalizations: iters column passes.
        for (int j = 0; j < hc; ++j) {
            double mx = -INFINITY, s = 0;
            for (int k = 0; k < hc; ++k) {
                comb[j * hc + k] = m[2 * hc + j * hc + k] * in.scale[2] + in.base[2 * hc + j * hc + k];
                mx = std::max(mx, comb[j * hc + k]);
            }
            for (int k = 0; k < hc; ++k) s += comb[j * hc + k] = std::exp(comb[j * hc + k] - mx);
            for (int k = 0; k < hc; ++k) comb[j * hc + k] = comb[j * hc + k] / s + kEps;
        }
        for (int it = 0; it < kIters; ++it) {
            if (it > 0)
                for (int j = 0; j < hc; ++j) {
                    double s = 0;
                    for (int k = 0; k < hc; ++k) s += comb[j * hc + k];
                    for (int k = 0; k < hc; ++k) comb[j * hc + k] /= s + kEps;
                }
            for (int k = 0; k < hc; ++k) {
                double s = 0;
                for (int j = 0; j < hc; ++j) s += comb[j * hc + k];
                for (int j = 0; j < hc; ++j) comb[j * hc + k] /= s + kEps;
            }
        }
        combs.insert(combs.end(), comb.begin(), comb.end());
        for (int64_t d = 0; d < D; ++d) {
            double s = 0;
            for (int j = 0; j < hc; ++j) s += pre[j] * H[(i * hc + j) * D + d];
            xs.push_back(s);
        }
    }
    return Arrays{xs, posts, combs};
}

// hc_pre's bound: the mixes are hc*D-term dots; sigmoid/exp add transcendental error; each of the Sinkhorn
// iterations rounds every entry a few times (relative error growing at most linearly: (2u (iters+1))^2).
double hc_pre_tol(int hc, int64_t D) {
    return tol_dot((double)hc * D) + kTolTransc + 4 * kU2 * (kIters + 1) * (kIters + 1);
}

// hc_post's inputs: x (and x2) [n, D], the residual streams R [n, hc, D] (unless the case has its own), post
// [n, hc] in [0, 2], comb [n, hc, hc] in [0, 1] (the ranges the Sinkhorn split gives).
struct HcPostInputs {
    std::vector<float> x, x2, R, post, comb;
};

std::shared_ptr<HcPostInputs> hc_post_inputs(int hc, int64_t D, int64_t n, bool x2, bool residual, Rng& rng) {
    auto in = std::make_shared<HcPostInputs>();
    in->x = rng.vec(n * D);
    if (residual) in->R = rng.vec(n * hc * D);
    in->post = rng.vec(n * hc, 0, 2);
    in->comb = rng.vec(n * hc * hc, 0, 1);
    if (x2) in->x2 = rng.vec(n * D);
    return in;
}

// The backend buffers of hc_post's inputs, writing H_out and reading the streams R.
HcPostArgs hc_post_args(Dev& d, const HcPostInputs& in, float* H_out, const float* R) {
    HcPostArgs a;
    a.H_out = H_out;
    a.x = d.f32(in.x);
    a.x2 = in.x2.empty() ? nullptr : d.f32(in.x2);
    a.H_res = R;
    a.post = d.f32(in.post);
    a.comb = d.f32(in.comb);
    return a;
}

// hc_post in double: H_out [n, hc, D] from in's x (+ x2), post and comb and the streams R.
template <class V>
Array ref_hc_post(const HcPostInputs& in, const V* R, int hc, int64_t D, int64_t n) {
    Array out;
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < hc; ++k)
            for (int64_t d = 0; d < D; ++d) {
                const double x = (double)in.x[i * D + d] + (in.x2.empty() ? 0.0 : (double)in.x2[i * D + d]);
                double s = (double)in.post[i * hc + k] * x;
                for (int j = 0; j < hc; ++j) s += (double)in.comb[(i * hc + j) * hc + k] * R[(i * hc + j) * D + d];
                out.push_back(s);
            }
    return out;
}

// hc_post's bound: an (hc+1)-term sum per value, one more rounding (x + x2) when x2 is given.
double hc_post_tol(int hc, bool x2) {
    return tol_dot(hc + (x2 ? 2.0 : 1.0));
}

CaseGen hc_pre_case(int hc, int64_t D, int64_t n, GgmlType t, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "hc_pre";
        c.shape = shape_of(hc, D, n, t);
        Rng rng(case_seed(seed, c.op + c.shape));
        const int n_mix = (2 + hc) * hc;
        auto in = hc_inputs(hc, D, n, t, n_mix, rng);
        c.tol = hc_pre_tol(hc, D);
        c.ref_tol = c.tol;
        c.bytes = 4.0 * n * (hc * D + D + hc + hc * hc);
        c.make = [=](Backend& b) {
            Instance inst;
            inst.dev = std::make_unique<Dev>(b);
            Dev& d = *inst.dev;
            const float* H = d.f32(in->H);
            const HcPreDev o = hc_pre_dev(b, d, *in, n_mix);
            const HcParams p{hc, D, kIters, kEps, kEps};
            inst.run = [&b, o, H, n, p]() { b.hc_pre(o.x, o.post, o.comb, H, o.fn, o.scale, o.base, n, p, nullptr); };
            inst.read = [&d, o, n, D, hc]() {
                return Arrays{d.get(o.x, n * D), d.get(o.post, n * hc), d.get(o.comb, n * hc * hc)};
            };
            return inst;
        };
        c.reference = [=]() { return ref_hc_pre(*in, in->H.data()); };
        return c;
    };
}

// hc_pre with the previous sublayer's hc_post fused in (H = hc_post(x + x2, R, post, comb) first): outputs
// H, x, post and comb.
CaseGen hc_post_pre_case(int hc, int64_t D, int64_t n, GgmlType t, bool x2, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "hc_pre";
        c.shape = shape_of(hc, D, n, t) + (x2 ? " +hc_post(x+x2)" : " +hc_post");
        Rng rng(case_seed(seed, c.op + c.shape));
        const int n_mix = (2 + hc) * hc;
        auto in = hc_inputs(hc, D, n, t, n_mix, rng);  // in->H: the hc_post's residual streams
        auto pin = hc_post_inputs(hc, D, n, x2, false, rng);
        // Outputs H, x, post, comb. Against the CPU: H is hc_post's (both backends round the same operations in
        // the same order), then x, post and comb are hc_pre's on the same H.
        const double post_tol = hc_post_tol(hc, x2), pre_tol = hc_pre_tol(hc, D);
        c.tols = {post_tol, pre_tol, pre_tol, pre_tol};
        // Against the double reference, H's rounding (NMSE <= post_tol) also reaches x and the mixes: both are
        // sums of random-sign products of H's values, so their NMSE grows by about H's; the sigmoid and softmax
        // arguments (mix * scale + base, |.| <= ~4 here) turn a relative error e of a mix into one of at most
        // ~4e in post and comb: 16x in NMSE.
        const double chained = pre_tol + 16 * post_tol;
        c.ref_tols = {post_tol, chained, chained, chained};
        c.bytes = 4.0 * n * ((x2 ? 2 : 1) * D + 2 * hc * D + hc + hc * hc + D + hc + hc * hc);
        c.make = [=](Backend& b) {
            Instance inst;
            inst.dev = std::make_unique<Dev>(b);
            Dev& d = *inst.dev;
            const float* R = d.f32(in->H);
            float* H = d.f32_out(n * hc * D);
            const HcPostArgs first = hc_post_args(d, *pin, H, R);
            const HcPreDev o = hc_pre_dev(b, d, *in, n_mix);
            const HcParams p{hc, D, kIters, kEps, kEps};
            inst.run = [&b, o, H, n, p, first]() {
                b.hc_pre(o.x, o.post, o.comb, H, o.fn, o.scale, o.base, n, p, &first);
            };
            inst.read = [&d, o, H, n, D, hc]() {
                return Arrays{d.get(H, n * hc * D), d.get(o.x, n * D), d.get(o.post, n * hc),
                              d.get(o.comb, n * hc * hc)};
            };
            return inst;
        };
        c.reference = [=]() {
            const Array H = ref_hc_post(*pin, in->H.data(), hc, D, n);
            Arrays out = ref_hc_pre(*in, H.data());
            out.insert(out.begin(), H);
            return out;
        };
        return c;
    };
}

// hc_pre_norm: hc_pre (with the previous sublayer's hc_post fused in when `post`), then x's RMS norm times a
// weight (none when !weighted). Outputs as hc_pre's, x normed.
CaseGen hc_pre_norm_case(int hc, int64_t D, int64_t n, GgmlType t, bool post, bool weighted, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "hc_pre_norm";
        c.shape = shape_of(hc, D, n, t) + (post ? " +hc_post(x+x2)" : "") + (weighted ? "" : " unweighted");
        Rng rng(case_seed(seed, c.op + c.shape));
        const int n_mix = (2 + hc) * hc;
        auto in = hc_inputs(hc, D, n, t, n_mix, rng);
        auto pin = post ? hc_post_inputs(hc, D, n, true, false, rng) : nullptr;
        auto w = std::make_shared<std::vector<float>>(weighted ? rng.vec(D, 0.5f, 1.5f) : std::vector<float>{});
        // The norm rounds each value of x a few more times (kTolElem); against the reference, as hc_post_pre_case.
        const double post_tol = hc_post_tol(hc, true), pre_tol = hc_pre_tol(hc, D);
        const double chained = post ? pre_tol + 16 * post_tol : pre_tol;
        c.tols = {pre_tol + kTolElem, pre_tol, pre_tol};
        c.ref_tols = {chained + kTolElem, chained, chained};
        if (post) {
            c.tols.insert(c.tols.begin(), post_tol);
            c.ref_tols.insert(c.ref_tols.begin(), post_tol);
        }
        c.bytes = 4.0 * n * (hc * D + D + hc + hc * hc) + (post ? 4.0 * n * (3 * D + hc * D) : 0.0);
        c.make = [=](Backend& b) {
            Instance inst;
            inst.dev = std::make_unique<Dev>(b);
            Dev& d = *inst.dev;
            const float* R = d.f32(in->H);
            float* H = post ? d.f32_out(n * hc * D) : const_cast<float*>(R);
            const HcPostArgs first = post ? hc_post_args(d, *pin, H, R) : HcPostArgs{};
            const HcPreDev o = hc_pre_dev(b, d, *in, n_mix);
            const float* norm = weighted ? d.f32(*w) : nullptr;
            const HcParams p{hc, D, kIters, kEps, kEps};
            inst.run = [&b, o, H, n, p, first, post, norm]() {
                b.hc_pre_norm(o.x, o.post, o.comb, H, o.fn, o.scale, o.base, n, p, post ? &first : nullptr, norm,
                              kEps);
            };
            inst.read = [&d, o, H, n, D, hc, post]() {
                Arrays a{d.get(o.x, n * D), d.get(o.post, n * hc), d.get(o.comb, n * hc * hc)};
                if (post) a.insert(a.begin(), d.get(H, n * hc * D));
                return a;
            };
            return inst;
        };
        c.reference = [=]() {
            const Array H = post ? ref_hc_post(*pin, in->H.data(), hc, D, n) : Array(in->H.begin(), in->H.end());
            Arrays out = ref_hc_pre(*in, H.data());
            Array& x = out[0];
            for (int64_t i = 0; i < n; ++i) {
                double ss = 0;
                for (int64_t j = 0; j < D; ++j) ss += x[i * D + j] * x[i * D + j];
                const double r = 1 / std::sqrt(ss / D + kEps);
                for (int64_t j = 0; j < D; ++j) x[i * D + j] *= r * (weighted ? (double)(*w)[j] : 1.0);
            }
            if (post) out.insert(out.begin(), H);
            return out;
        };
        return c;
    };
}

CaseGen hc_head_case(int hc, int64_t D, int64_t n, GgmlType t, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "hc_head";
        c.shape = shape_of(hc, D, n, t);
        Rng rng(case_seed(seed, c.op + c.shape));
        auto in = hc_inputs(hc, D, n, t, hc, rng);
        c.tol = tol_dot((double)hc * D) + kTolTransc;  // hc*D-term dots, then sigmoid and an hc-term sum
        c.ref_tol = c.tol;
        c.bytes = 4.0 * n * (hc * D + D);
        c.make = [=](Backend& b) {
            Instance inst;
            inst.dev = std::make_unique<Dev>(b);
            Dev& d = *inst.dev;
            const Weight fn = fn_weight(b, *in, hc);
            const float* H = d.f32(in->H);
            const float* scale = d.f32(in->scale);
            const float* base = d.f32(in->base);
            float* y = d.f32_out(n * D);
            const HcParams p{hc, D, kIters, kEps, kEps};
            inst.run = [&b, y, H, fn, scale, base, n, p]() { b.hc_head(y, H, fn, scale, base, n, p); };
            inst.read = [&d, y, n, D]() { return Arrays{d.get(y, n * D)}; };
            return inst;
        };
        c.reference = [=]() {
            Array y;
            for (int64_t i = 0; i < n; ++i) {
                const std::vector<double> m = ref_mixes(*in, in->H.data(), i, hc, kEps);
                for (int64_t d = 0; d < D; ++d) {
                    double s = 0;
                    for (int j = 0; j < hc; ++j)
                        s += (sigmoid(m[j] * in->scale[0] + in->base[j]) + kEps) * in->H[(i * hc + j) * D + d];
                    y.push_back(s);
                }
            }
            return Arrays{y};
        };
        return c;
    };
}

CaseGen hc_post_case(int hc, int64_t D, int64_t n, bool x2, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "hc_post";
        c.shape = shape_of(hc, D, n, GgmlType::F32) + (x2 ? " x+x2" : "");
        Rng rng(case_seed(seed, c.op + c.shape));
        auto in = hc_post_inputs(hc, D, n, x2, true, rng);
        c.tol = hc_post_tol(hc, x2);
        c.ref_tol = c.tol;
        c.bytes = 4.0 * n * ((x2 ? 2 : 1) * D + 2 * hc * D);
        c.make = [=](Backend& b) {
            Instance inst;
            inst.dev = std::make_unique<Dev>(b);
            Dev& d = *inst.dev;
            float* out = d.f32_out(n * hc * D);
            const HcPostArgs a = hc_post_args(d, *in, out, d.f32(in->R));
            const HcParams p{hc, D, kIters, kEps, kEps};
            inst.run = [&b, a, n, p]() { b.hc_post(a, n, p); };
            inst.read = [&d, out, n, hc, D]() { return Arrays{d.get(out, n * hc * D)}; };
            return inst;
        };
        c.reference = [=]() { return Arrays{ref_hc_post(*in, in->R.data(), hc, D, n)}; };
        return c;
    };
}

}  // namespace

void add_hc_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    for (int hc : {4, 2})
        for (int64_t D : {7, 83, 769})
            for (int64_t n : {1, 7, 83}) {
                const GgmlType t = D == 83 ? GgmlType::F16 : (D == 7 && hc == 2 ? GgmlType::BF16 : GgmlType::F32);
                out.push_back(hc_pre_case(hc, D, n, t, o.seed));
                out.push_back(hc_head_case(hc, D, n, t, o.seed));
                out.push_back(hc_post_case(hc, D, n, false, o.seed));
            }
    // The decode path (n <= 8, f32/f16/bf16/Q8_0 fn), the general one on either side of its bounds and the
    // prefill tile kernel (n >= 64): Q8_0 (some files store fn so), the most streams (hc = 16: 288 mixes),
    // V4-Flash's width.
    for (int64_t n : {1, 8, 9, 100}) {
        out.push_back(hc_pre_case(4, 1024, n, GgmlType::Q8_0, o.seed));
        out.push_back(hc_head_case(4, 1024, n, GgmlType::Q8_0, o.seed));
    }
    out.push_back(hc_pre_case(16, 64, 3, GgmlType::F16, o.seed));
    out.push_back(hc_pre_case(3, 64, 2, GgmlType::F32, o.seed));  // odd stream counts
    out.push_back(hc_pre_case(5, 64, 2, GgmlType::F32, o.seed));
    out.push_back(hc_pre_case(4, 4096, 1, GgmlType::F16, o.seed));
    out.push_back(hc_head_case(4, 4096, 2, GgmlType::F16, o.seed));
    // hc_post's stream kernel (hc = 4, D a multiple of 4): few tokens (several slices each) and many.
    for (int64_t n : {1, 7, 300}) out.push_back(hc_post_case(4, 1024, n, false, o.seed));
    // hc_post with a second addend (the MoE's routed and shared parts): the stream kernel and the general one
    // (D % 4 != 0, hc != 4).
    for (int64_t n : {1, 7, 300}) out.push_back(hc_post_case(4, 1024, n, true, o.seed));
    out.push_back(hc_post_case(4, 7, 2, true, o.seed));
    out.push_back(hc_post_case(3, 83, 7, true, o.seed));
    // hc_pre with the previous sublayer's hc_post fused in: decode sizes, which the dots kernel fuses (n <= 9: one
    // and two groups of 8 tokens), and a prefill size (n = 100: a separate hc_post before the tile kernel for
    // hc <= 4; the dots kernel for hc = 5); one stream and odd stream counts; D = 769 and 83 (256-column chunks
    // that straddle two streams) and 1024; fn in F32, F16 and Q8_0 (hc * 1024 values: whole Q8_0 blocks). x2 in
    // every case but n = 2, so both forms of the kernel run for every hc and format.
    for (int hc : {1, 3, 4, 5})
        for (int64_t n : {1, 2, 7, 9, 100}) {
            out.push_back(hc_post_pre_case(hc, 769, n, GgmlType::F32, n != 2, o.seed));
            out.push_back(hc_post_pre_case(hc, 83, n, GgmlType::F16, n != 2, o.seed));
            out.push_back(hc_post_pre_case(hc, 1024, n, GgmlType::Q8_0, n != 2, o.seed));
        }
    out.push_back(hc_post_pre_case(2, 7, 3, GgmlType::BF16, true, o.seed));
    out.push_back(hc_post_pre_case(4, 4096, 1, GgmlType::F16, true, o.seed));  // V4-Flash decode
    // A format the dots kernel does not decode (square sums + matmul): hc_post runs as its own kernel first.
    out.push_back(hc_post_pre_case(4, 1024, 2, GgmlType::Q4_K, true, o.seed));
    // hc_pre_norm: the fused kernel (hc = 4 and the general form; one token and many; D at its column limit)
    // and the shapes it leaves to hc_pre + rms_norm (D % 4 != 0, D past the limit); also 8 tokens, Q8_0 and BF16
    // mix weights, D = 8192 and 8196.
    out.push_back(hc_pre_norm_case(4, 4096, 1, GgmlType::F16, true, true, o.seed));  // V4-Flash decode
    out.push_back(hc_pre_norm_case(4, 4096, 1, GgmlType::F32, false, true, o.seed));
    out.push_back(hc_pre_norm_case(4, 1024, 9, GgmlType::Q8_0, true, false, o.seed));
    out.push_back(hc_pre_norm_case(3, 1028, 7, GgmlType::F32, true, true, o.seed));
    out.push_back(hc_pre_norm_case(5, 64, 100, GgmlType::F16, true, true, o.seed));
    out.push_back(hc_pre_norm_case(2, 16384, 2, GgmlType::F32, false, true, o.seed));
    out.push_back(hc_pre_norm_case(2, 16388, 1, GgmlType::F32, true, true, o.seed));
    out.push_back(hc_pre_norm_case(4, 769, 2, GgmlType::F32, true, true, o.seed));
    out.push_back(hc_pre_norm_case(4, 8192, 2, GgmlType::Q8_0, true, true, o.seed));
    out.push_back(hc_pre_norm_case(4, 4096, 8, GgmlType::BF16, true, true, o.seed));
    out.push_back(hc_pre_norm_case(2, 8196, 1, GgmlType::F32, true, false, o.seed));
    if (o.perf)
        for (int64_t n : {1, 128}) {  // V4-Flash width
            out.push_back(hc_pre_case(4, 4096, n, GgmlType::F32, o.seed));
            out.push_back(hc_post_case(4, 4096, n, false, o.seed));
            out.push_back(hc_post_case(4, 4096, n, true, o.seed));
            out.push_back(hc_post_pre_case(4, 4096, n, GgmlType::F32, true, o.seed));
        }
}

}  // namespace dsv4::backend_ops
