// Conformance cases of the per-row and element-wise ops: rms_norm, rope, fp8_sim, hadamard (with and
// without the FP4 round trip), swiglu, add, copy_rows, gather_rows, scatter_rows and fill.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

// Round |v| to the nearest value of a small float format by search over all its magnitudes (ties to the
// even code), an implementation independent of ops/numerics.h's exponent arithmetic.
double round_to_table(double v, const std::vector<double>& mags) {
    const double a = std::fabs(v);
    size_t best = 0;
    for (size_t i = 1; i < mags.size(); ++i) {
        const double d = std::fabs(mags[i] - a), db = std::fabs(mags[best] - a);
        if (d < db || (d == db && i % 2 == 0)) best = i;
    }
    return v < 0 ? -mags[best] : mags[best];
}

std::vector<double> e4m3_magnitudes() {  // E4M3 "fn": bias 7, no infinities, 448 the largest finite value
    std::vector<double> m;
    for (int e = 0; e < 16; ++e)
        for (int f = 0; f < 8; ++f) {
            if (e == 15 && f == 7) continue;  // NaN
            m.push_back(e == 0 ? std::ldexp(f / 8.0, -6) : std::ldexp(1 + f / 8.0, e - 7));
        }
    return m;
}

std::vector<double> e2m1_magnitudes() { return {0, 0.5, 1, 1.5, 2, 3, 4, 6}; }

// The model's fake quantizer of one block (scale 2^ceil(log2(amax/fmax)), amax floored), in double.
void ref_fake_quant(double* x, int n, bool fp4) {
    static const std::vector<double> e4m3 = e4m3_magnitudes(), e2m1 = e2m1_magnitudes();
    const double fmax = fp4 ? 6.0 : 448.0;
    double amax = 0;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, fp4 ? 6.0 * std::ldexp(1.0, -126) : (double)1e-4f);
    double s = std::ldexp(1.0, -140);
    while (s < amax / fmax) s *= 2;
    for (int i = 0; i < n; ++i)
        x[i] = round_to_table(std::clamp(x[i] / s, -fmax, fmax), fp4 ? e2m1 : e4m3) * s;
}

// A case whose single in/out buffer `init` is modified in place by `op`; the whole buffer is compared.
CaseGen inplace_case(std::string op, std::string shape, std::vector<float> init, double tol, double ref_tol,
                     std::function<void(Backend&, float*)> run, std::function<Array(const std::vector<float>&)> ref) {
    return [=]() {
        Case c;
        c.op = op;
        c.shape = shape;
        c.tol = tol;
        c.ref_tol = ref_tol;
        c.bytes = 8.0 * init.size();
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            float* x = d.f32(init);
            const int64_t n = (int64_t)init.size();
            in.run = [&b, x, run]() { run(b, x); };
            in.read = [&d, x, n]() { return Arrays{d.get(x, n)}; };
            return in;
        };
        if (ref) c.reference = [=]() { return Arrays{ref(init)}; };
        return c;
    };
}

std::string dims(std::initializer_list<std::pair<const char*, long long>> kv) {
    std::string s;
    for (auto& [k, v] : kv) {
        if (!s.empty()) s += ' ';
        s.append(k).append("=").append(std::to_string(v));
    }
    return s;
}

}  // namespace

void add_elementwise_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    const uint64_t seed = o.seed;
    // dims 7, 83, 769: the scalar kernel; 512 and 4096 (16-byte aligned rows): a warp and a block per row.
    for (int64_t n : {1, 7, 83})
        for (int64_t dim : {7, 83, 769, 512, 4096})
            for (int variant = 0; variant < 2; ++variant) {
                const bool weighted = variant == 0;
                const int64_t stride = dim + (variant ? (dim % 4 ? 5 : 4) : 0);
                const std::string shape = dims({{"n", n}, {"dim", dim}, {"stride", stride}, {"weight", weighted}});
                Rng rng(case_seed(seed, "rms_norm" + shape));
                const std::vector<float> x = rng.vec(n * stride, -3, 3), w = rng.vec(dim, 0.5f, 1.5f);
                out.push_back(inplace_case(
                    "rms_norm", shape, x, kTolElem, kTolElem,
                    [=](Backend& b, float* xd) {
                        Dev d(b);
                        b.rms_norm(xd, xd, weighted ? d.f32(w) : nullptr, n, dim, stride, 1e-6f);
                        b.synchronize();
                    },
                    [=](const std::vector<float>& in) {
                        Array r(in.begin(), in.end());
                        for (int64_t i = 0; i < n; ++i) {
                            double ss = 0;
                            for (int64_t j = 0; j < dim; ++j) ss += (double)in[i * stride + j] * in[i * stride + j];
                            const double s = 1 / std::sqrt(ss / dim + 1e-6);
                            for (int64_t j = 0; j < dim; ++j) r[i * stride + j] = in[i * stride + j] * s * (weighted ? w[j] : 1.0);
                        }
                        return r;
                    }));
            }

    for (int64_t n : {1, 7, 83})
        for (auto [heads, hd, rd] : {std::tuple{1, 64, 64}, std::tuple{3, 83, 64}, std::tuple{8, 128, 64}})
            for (bool inverse : {false, true}) {
                const int64_t stride = (int64_t)heads * hd + 7;
                const std::string shape = dims({{"n", n}, {"heads", heads}, {"hd", hd}, {"rope", rd}, {"inverse", inverse}});
                Rng rng(case_seed(seed, "rope" + shape));
                const std::vector<float> x = rng.vec(n * stride);
                std::vector<int32_t> pos((size_t)n);
                for (auto& p : pos) p = rng.uniform_int(0, 100000);  // large angles test the argument reduction
                std::vector<float> freqs((size_t)rd / 2);
                for (int t = 0; t < rd / 2; ++t) freqs[t] = 1.0f / std::pow(10000.0f, (float)(2 * t) / (float)rd);
                out.push_back(inplace_case(
                    "rope", shape, x, kTolTransc, kTolTransc,
                    [=](Backend& b, float* xd) {
                        Dev d(b);
                        const RopeParams r{d.f32(freqs), rd};
                        b.rope(xd, n, heads, hd, stride, d.i32(pos), r, inverse);
                        b.synchronize();
                    },
                    [=](const std::vector<float>& in) {
                        Array r(in.begin(), in.end());
                        for (int64_t i = 0; i < n; ++i)
                            for (int h = 0; h < heads; ++h)
                                for (int t = 0; t < rd / 2; ++t) {
                                    const double ang = (float)pos[i] * freqs[t];  // the angle is an f32 product
                                    const double cs = std::cos(ang), sn = inverse ? -std::sin(ang) : std::sin(ang);
                                    const int64_t at = i * stride + (int64_t)h * hd + (hd - rd) + 2 * t;
                                    r[at] = in[at] * cs - in[at + 1] * sn;
                                    r[at + 1] = in[at] * sn + in[at + 1] * cs;
                                }
                        return r;
                    }));
            }

    for (int64_t n : {1, 7, 83})
        for (auto [n_dims, block] : {std::pair{64, 64}, std::pair{448, 64}, std::pair{96, 32}}) {
            const int64_t stride = n_dims + 64 + 3;
            const std::string shape = dims({{"n", n}, {"dims", n_dims}, {"block", block}, {"stride", stride}});
            Rng rng(case_seed(seed, "fp8_sim" + shape));
            std::vector<float> x = rng.vec(n * stride);
            // Block magnitudes from 1e-6 to 1e3: the amax floor, FP8 subnormals and large scales all occur.
            for (int64_t i = 0; i < n * stride; i += block) {
                const float m = std::pow(10.0f, rng.uniform(-6, 3));
                for (int64_t j = i; j < std::min<int64_t>(i + block, n * stride); ++j) x[j] *= m;
            }
            out.push_back(inplace_case(
                "fp8_sim", shape, x, 0, 0,  // the same ops/numerics.h code on every backend: bit-identical
                [=](Backend& b, float* xd) { b.fp8_sim(xd, n, n_dims, stride, block); },
                [=](const std::vector<float>& in) {
                    Array r(in.begin(), in.end());
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t j = 0; j < n_dims; j += block) ref_fake_quant(r.data() + i * stride + j, block, false);
                    for (auto& v : r) v = (float)v;
                    return r;
                }));
        }

    for (int64_t n : {1, 7, 83})
        for (int dim : {32, 64, 128, 512, 1024, 2048})
            for (bool fp4 : {false, true}) {
                const std::string shape = dims({{"n", n}, {"dim", dim}, {"fp4", fp4}});
                Rng rng(case_seed(seed, "hadamard" + shape));
                const std::vector<float> x = rng.vec(n * dim, -2, 2);
                // Same butterflies in the same order everywhere: CUDA is bit-identical to the CPU. The
                // rotation is a dim-term sum per value. With FP4 the reference quantizes the CPU's own
                // rotation (so no value sits on the other side of a rounding boundary) and must match exactly.
                out.push_back(inplace_case(
                    "hadamard", shape, x, 0, fp4 ? 0 : tol_dot(dim),
                    [=](Backend& b, float* xd) { b.hadamard(xd, n, dim, fp4); },
                    [=](const std::vector<float>& in) {
                        Array r((size_t)(n * dim));
                        if (fp4) {
                            auto cpu = make_cpu_backend(1);
                            std::vector<float> v = in;
                            cpu->hadamard(v.data(), n, dim, false);
                            for (size_t j = 0; j < v.size(); ++j) r[j] = v[j];
                            for (int64_t i = 0; i < n * dim; i += 32) ref_fake_quant(r.data() + i, 32, true);
                            return r;
                        }
                        for (int64_t i = 0; i < n; ++i)
                            for (int a = 0; a < dim; ++a) {
                                double s = 0;
                                for (int c = 0; c < dim; ++c)
                                    s += (std::popcount((unsigned)(a & c)) & 1 ? -1.0 : 1.0) * in[i * dim + c];
                                r[i * dim + a] = s / std::sqrt((double)dim);
                            }
                        return r;
                    }));
            }

    for (int64_t n : {1, 7, 83})
        for (int64_t f : {7, 83, 769})
            for (float clamp : {0.0f, 1.5f}) {
                const int64_t gs = f == 83 ? 2 * f + 3 : f;  // g and u views of one [n, 2f+3] buffer, or separate
                const std::string shape = dims({{"n", n}, {"f", f}, {"stride", gs}}) + " clamp=" + (clamp ? "1.5" : "0");
                out.push_back([=]() {
                    Case c;
                    c.op = "swiglu";
                    c.shape = shape;
                    Rng rng(case_seed(seed, c.op + shape));
                    auto g = std::make_shared<std::vector<float>>(rng.vec(n * gs, -4, 4));
                    auto u = std::make_shared<std::vector<float>>(rng.vec(n * gs, -4, 4));
                    c.tol = kTolTransc;  // one expf per value and four roundings
                    c.ref_tol = kTolTransc;
                    c.bytes = 12.0 * n * f;
                    c.make = [=](Backend& b) {
                        Instance in;
                        in.dev = std::make_unique<Dev>(b);
                        Dev& d = *in.dev;
                        const float* gd = d.f32(*g);
                        const float* ud = d.f32(*u);
                        float* h = d.f32_out(n * f);
                        in.run = [&b, h, gd, ud, n, f, gs, clamp]() { b.swiglu(h, gd, ud, n, f, gs, clamp); };
                        in.read = [&d, h, n, f]() { return Arrays{d.get(h, n * f)}; };
                        return in;
                    };
                    c.reference = [=]() {
                        Array h;
                        for (int64_t i = 0; i < n; ++i)
                            for (int64_t j = 0; j < f; ++j) {
                                double gv = (*g)[i * gs + j], uv = (*u)[i * gs + j];
                                if (clamp > 0) {
                                    gv = std::min<double>(gv, clamp);
                                    uv = std::clamp<double>(uv, -clamp, clamp);
                                }
                                h.push_back(gv / (1 + std::exp(-gv)) * uv);
                            }
                        return Arrays{h};
                    };
                    return c;
                });
            }

    for (int64_t n : {7, 83, 2307}) {
        const std::string shape = dims({{"n", n}});
        Rng rng(case_seed(seed, "add" + shape));
        const std::vector<float> a = rng.vec(n), bb = rng.vec(n);
        // In place (y = a): one rounding per value (CUDA: identical float add).
        out.push_back(inplace_case(
            "add", shape, a, 0, kTolElem,
            [=](Backend& b, float* y) {
                Dev d(b);
                b.add(y, y, d.f32(bb), n);
                b.synchronize();
            },
            [=](const std::vector<float>& in) {
                Array r;
                for (int64_t i = 0; i < n; ++i) r.push_back((double)in[i] + bb[i]);
                return r;
            }));
        out.push_back(inplace_case(
            "fill", shape, a, 0, 0, [=](Backend& b, float* y) { b.fill(y, -2.5f, n); },
            [=](const std::vector<float>&) { return Array((size_t)n, -2.5); }));
    }

    for (int64_t n : {1, 7, 83})
        for (int64_t cols : {7, 83, 769}) {
            const int64_t ds = cols + 3, ss = 2 * cols + 1;
            const std::string shape = dims({{"n", n}, {"cols", cols}, {"dst_stride", ds}, {"src_stride", ss}});
            Rng rng(case_seed(seed, "copy_rows" + shape));
            const std::vector<float> dst = rng.vec(n * ds), src = rng.vec(n * ss);
            std::vector<int32_t> idx((size_t)n);
            for (auto& v : idx) v = rng.uniform_int(0, (int)n - 1);
            // Copies are exact; the gaps between destination rows must keep their values.
            out.push_back(inplace_case(
                "copy_rows", shape, dst, 0, 0,
                [=](Backend& b, float* y) {
                    Dev d(b);
                    b.copy_rows(y, ds, d.f32(src), ss, n, cols);
                    b.synchronize();
                },
                [=](const std::vector<float>& in) {
                    Array r(in.begin(), in.end());
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < cols; ++c) r[i * ds + c] = src[i * ss + c];
                    return r;
                }));
            const std::vector<float> gsrc = rng.vec(n * cols), gdst = rng.vec(n * cols);
            out.push_back(inplace_case(
                "gather_rows", dims({{"n", n}, {"cols", cols}}), gdst, 0, 0,
                [=](Backend& b, float* y) {
                    Dev d(b);
                    b.gather_rows(y, d.f32(gsrc), d.i32(idx), n, cols);
                    b.synchronize();
                },
                [=](const std::vector<float>&) {
                    Array r;
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < cols; ++c) r.push_back(gsrc[idx[i] * cols + c]);
                    return r;
                }));
            // Scatter into a larger table: distinct targets in shuffled order, some rows skipped (-1); the rows
            // not targeted keep their values.
            const int64_t rows = 2 * n + 1;
            std::vector<int32_t> perm((size_t)rows);
            for (int64_t r = 0; r < rows; ++r) perm[r] = (int32_t)r;
            for (int64_t r = rows - 1; r > 0; --r) std::swap(perm[r], perm[rng.uniform_int(0, (int)r)]);
            std::vector<int32_t> sidx(perm.begin(), perm.begin() + n);
            for (int64_t i = 0; i < n; i += 3) sidx[i] = -1;
            const std::vector<float> sdst = rng.vec(rows * cols);
            out.push_back(inplace_case(
                "scatter_rows", dims({{"n", n}, {"cols", cols}, {"rows", rows}}), sdst, 0, 0,
                [=](Backend& b, float* y) {
                    Dev d(b);
                    b.scatter_rows(y, d.f32(gsrc), d.i32(sidx), n, cols);
                    b.synchronize();
                },
                [=](const std::vector<float>& in) {
                    Array r(in.begin(), in.end());
                    for (int64_t i = 0; i < n; ++i)
                        if (sidx[i] >= 0)
                            for (int64_t c = 0; c < cols; ++c) r[sidx[i] * cols + c] = gsrc[i * cols + c];
                    return r;
                }));
        }
    (void)o.perf;
}

}  // namespace dsv4::backend_ops
