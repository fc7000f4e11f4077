// Conformance cases of the per-row and element-wise ops: rms_norm, rope, fp8_sim, norm_rope, hadamard (with and
// without the FP4 round trip), swiglu, add, copy_rows, gather_rows, scatter_rows,
// scatter_rows_to and fill.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "harness.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

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

// norm_rope of n rows of `heads` heads of hd floats (row stride heads * hd + pad), RoPE on the last 64 dims, with
// or without a weight and the FP8 round trip of the other dims in blocks of fp8_block (0: none).
//
// Bounds: outside the FP8 dims (the RoPE dims, the normed dims without FP8, the gaps between rows, which must keep
// their values) the NMSE of rms_norm followed by rope, kTolElem + kTolTransc, against the CPU and against the
// double reference. The FP8 dims: the reference quantizes the CPU's own rms_norm output with the table quantizer,
// so the CPU must match it exactly (as fp8_sim does). Against the CPU another backend's norm can differ in the last
// ulp (its double sum of squares in another order may round 1/rms the other way), and the round trip is the same
// function of the normed value, so an FP8 value is either the CPU's exactly or, when its normed value sits within
// an ulp of a rounding boundary (or its block's amax within an ulp of a power-of-two scale boundary), it rounds the
// other way: then it differs by one FP8 step. So each FP8 value must equal the CPU's within the f32 chain bound
// (4u relative, one rounding of kTolElem) or within one E4M3 step: 1/8 of the larger magnitude (3 mantissa bits)
// or, below the normal range, the subnormal spacing 2^-9 s at the larger of the two possible block scales (s <=
// the CPU block's amax / 224 or the amax floor's scale, doubled). Such a value needs a normed value within an ulp
// of a boundary (probability ~2^-20 per value), so at most one block's worth (fp8_block values: one scale flip)
// may differ by more than the chain bound.
CaseGen norm_rope_case(int64_t n, int heads, int hd, int pad, bool weighted, int fp8_block, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "norm_rope";
        c.shape = dims({{"n", n}, {"heads", heads}, {"hd", hd}, {"stride", (long long)heads * hd + pad},
                        {"weight", weighted}, {"fp8", fp8_block}});
        const int rd = 64, off = hd - rd;
        const int64_t stride = (int64_t)heads * hd + pad;
        const float eps = 1e-6f;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * stride, -3, 3));
        // Spans of 32 values scaled by 1e-4 .. 1: FP8 blocks far below the head's RMS (small scales, subnormal
        // E4M3 values, the amax floor) occur beside large ones.
        for (int64_t i = 0; i < n * stride; i += 32) {
            const float m = std::pow(10.0f, rng.uniform(-4, 0));
            for (int64_t j = i; j < std::min<int64_t>(i + 32, n * stride); ++j) (*x)[j] *= m;
        }
        auto w = std::make_shared<std::vector<float>>(rng.vec(hd, 0.5f, 1.5f));
        std::vector<int32_t> pos((size_t)n);
        for (auto& p : pos) p = rng.uniform_int(0, 100000);
        std::vector<float> freqs((size_t)rd / 2);
        for (int t = 0; t < rd / 2; ++t) freqs[t] = 1.0f / std::pow(10000.0f, (float)(2 * t) / (float)rd);
        auto is_fp8 = [=](int64_t e) {  // element e of the buffer is in a head's FP8 dims
            const int64_t col = e % stride;
            return fp8_block > 0 && col < (int64_t)heads * hd && col % hd < off;
        };
        const double tol = kTolElem + kTolTransc;  // rms_norm then rope, against the CPU and the reference
        c.tol = tol;
        c.ref_tol = tol;
        c.bytes = 8.0 * n * stride;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            float* xd = d.f32(*x);
            const float* wd = weighted ? d.f32(*w) : nullptr;
            const int32_t* pd = d.i32(pos);
            const RopeParams r{d.f32(freqs), rd};
            in.run = [&b, xd, n, heads, hd, stride, wd, eps, pd, r, fp8_block]() {
                b.norm_rope(xd, n, heads, hd, stride, wd, eps, pd, r, fp8_block);
            };
            in.read = [&d, xd, n, stride]() { return Arrays{d.get(xd, n * stride)}; };
            return in;
        };
        c.reference = [=]() {
            Array r(x->begin(), x->end());
            std::vector<float> normed;  // the CPU's rms_norm of every head, for the FP8 dims
            if (fp8_block > 0) {
                auto cpu = make_cpu_backend(1);
                normed = *x;
                for (int h = 0; h < heads; ++h)
                    cpu->rms_norm(normed.data() + h * hd, normed.data() + h * hd, weighted ? w->data() : nullptr, n, hd,
                                  stride, eps);
            }
            for (int64_t i = 0; i < n; ++i)
                for (int h = 0; h < heads; ++h) {
                    const int64_t at = i * stride + (int64_t)h * hd;
                    double ss = 0;
                    for (int j = 0; j < hd; ++j) ss += (double)(*x)[at + j] * (*x)[at + j];
                    const double s = 1 / std::sqrt(ss / hd + eps);
                    for (int j = 0; j < hd; ++j) r[at + j] = (*x)[at + j] * s * (weighted ? (*w)[j] : 1.0);
                    for (int t = 0; t < rd / 2; ++t) {
                        const double ang = (float)pos[i] * freqs[t];  // the angle is an f32 product
                        const double a = r[at + off + 2 * t], cc = r[at + off + 2 * t + 1];
                        r[at + off + 2 * t] = a * std::cos(ang) - cc * std::sin(ang);
                        r[at + off + 2 * t + 1] = a * std::sin(ang) + cc * std::cos(ang);
                    }
                    if (fp8_block == 0) continue;
                    for (int j = 0; j < off; ++j) r[at + j] = normed[at + j];
                    for (int j = 0; j < off; j += fp8_block) ref_fake_quant(r.data() + at + j, fp8_block, false);
                    for (int j = 0; j < off; ++j) r[at + j] = (float)r[at + j];
                }
            return Arrays{r};
        };
        c.compare = [=](const Arrays& got, const Arrays& want, bool vs_ref) -> std::string {
            const Array& g = got[0];
            const Array& v = want[0];
            if (g.size() != v.size()) return "output size differs";
            Array g_rest, v_rest;
            int64_t beyond = 0;
            // The floor of the block scale: the smallest power of two >= 1e-4f / 448 (ref_fake_quant's rule).
            double s_floor = std::ldexp(1.0, -140);
            while (s_floor < (double)1e-4f / 448) s_floor *= 2;
            for (int64_t e = 0; e < (int64_t)g.size(); ++e) {
                if (!is_fp8(e)) {
                    g_rest.push_back(g[e]);
                    v_rest.push_back(v[e]);
                    continue;
                }
                if (vs_ref) {
                    if (!(g[e] == v[e])) return "FP8 value " + std::to_string(e) + " differs from the reference";
                    continue;
                }
                const double diff = std::fabs(g[e] - v[e]);
                if (diff <= 4 * kU * std::fabs(v[e])) continue;
                ++beyond;
                const int64_t block0 = e - (e % stride % hd) % fp8_block;  // the block's first element
                double amax = 0;
                for (int j = 0; j < fp8_block; ++j) amax = std::max(amax, std::fabs(v[block0 + j]));
                const double s_hi = 2 * std::max(amax / 224, s_floor);
                const double step = std::max(std::max(std::fabs(g[e]), std::fabs(v[e])) / 8, std::ldexp(s_hi, -9));
                if (!(diff <= step))
                    return "FP8 value " + std::to_string(e) + ": " + std::to_string(g[e]) + " vs " +
                           std::to_string(v[e]) + ", more than one E4M3 step apart";
            }
            if (beyond > fp8_block)
                return std::to_string(beyond) + " FP8 values differ by an E4M3 step (at most " +
                       std::to_string(fp8_block) + ")";
            const double e = nmse(g_rest, v_rest);
            if (!(e <= tol)) {
                char buf[96];
                std::snprintf(buf, sizeof buf, "non-FP8 nmse %.2e (tol %.1e)", e, tol);
                return buf;
            }
            return "";
        };
        return c;
    };
}

}  // namespace

// pack_fp4_rows (rope < 0) and pack_kv_rows (the last rope dims RoPE dims): n rows of dim simulated values (from
// the rounding of random rows at scales 2^-130 .. 2^100, with zero, sub-floor and infinite blocks among them)
// packed into a table of 2n + 1 rows at shuffled distinct targets, every third row skipped, or with `table`
// into three tables (row i into table i % 3). The destination is read as 32-bit words: the packing is exact, so
// every word must equal the CPU's, and the reference packs on the host (ops/fp4_rows.h, ops/kv_rows.h: the
// functions the CPU backend runs; their exactness against the rounding is tests/test_kv_store.cpp's).
// Untouched rows keep their poison.
CaseGen pack_case(int64_t n, int dim, int rope, bool table, uint64_t seed) {
    return [=]() {
        const bool fp4 = rope < 0;
        Case c;
        c.op = fp4 ? "pack_fp4_rows" : "pack_kv_rows";
        c.shape = fp4 ? dims({{"n", n}, {"dim", dim}, {"table", table}})
                      : dims({{"n", n}, {"dim", dim}, {"rope", rope}, {"table", table}});
        Rng rng(case_seed(seed, c.op + c.shape));
        std::vector<float> src = rng.vec(n * dim, -1, 1);
        const int rounded = fp4 ? dim : dim - rope, block = fp4 ? kFp4Block : kFp8Block;
        for (int64_t r = 0; r < n; ++r) {
            float* row = src.data() + r * dim;
            const int kind = (int)(r % 7);
            for (int j = 0; j < dim; ++j)
                row[j] = kind == 0 ? 0.0f : kind == 1 ? row[j] * 1e-39f : std::ldexp(row[j], (int)(r * 37 % 230) - 130);
            if (kind == 2) row[rounded / 2] = INFINITY;
            for (int j = 0; j < rounded; j += block) fake_quant_block(row + j, std::min(block, rounded - j), fp4);
        }
        auto pack_row = [fp4, dim, rope](const float* v, uint8_t* row) {
            if (fp4)
                fp4_pack_row(v, dim, row);
            else
                kv_pack_row(v, dim, rope, row);
        };
        const int64_t rf = fp4 ? fp4_row_floats(dim) : kv_row_floats(dim, rope);
        const int64_t rows = table ? n / 3 + 1 : 2 * n + 1, tables = table ? 3 : 1;
        std::vector<int32_t> idx((size_t)n);
        if (table) {
            for (int64_t i = 0; i < n; ++i) idx[i] = i % 4 == 1 ? -1 : (int32_t)(rows - 1 - i / 3);
        } else {
            std::vector<int32_t> perm((size_t)rows);
            for (int64_t r = 0; r < rows; ++r) perm[r] = (int32_t)r;
            for (int64_t r = rows - 1; r > 0; --r) std::swap(perm[r], perm[rng.uniform_int(0, (int)r)]);
            for (int64_t i = 0; i < n; ++i) idx[i] = i % 3 == 0 ? -1 : perm[i];
        }
        const int64_t words = tables * rows * rf;
        const std::vector<int32_t> poison((size_t)words, 0x7fc0dead);
        c.bytes = 4.0 * n * dim + 4.0 * n * rf;
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            int32_t* dst = d.i32(poison);
            const float* x = d.f32(src);
            const int32_t* id = d.i32(idx);
            float* const* tab = nullptr;
            if (table) {
                std::vector<float*> host((size_t)n);
                for (int64_t i = 0; i < n; ++i) host[i] = reinterpret_cast<float*>(dst) + (i % 3) * rows * rf;
                void* t = d.bytes(host.size() * sizeof(float*));
                b.upload(t, host.data(), host.size() * sizeof(float*));
                tab = static_cast<float* const*>(t);
            }
            in.run = [&b, dst, tab, x, id, n, dim, rope, fp4]() {
                float* flat = tab ? nullptr : reinterpret_cast<float*>(dst);
                if (fp4)
                    b.pack_fp4_rows(flat, tab, x, id, n, dim);
                else
                    b.pack_kv_rows(flat, tab, x, id, n, dim, rope);
            };
            in.read = [&d, dst, words]() { return Arrays{d.get_i(dst, words)}; };
            return in;
        };
        c.reference = [=]() {
            std::vector<int32_t> out = poison;
            for (int64_t i = 0; i < n; ++i)
                if (idx[i] >= 0) {
                    const int64_t at = ((table ? i % 3 : 0) * rows + idx[i]) * rf;
                    pack_row(src.data() + i * dim, reinterpret_cast<uint8_t*>(out.data() + at));
                }
            return Arrays{Array(out.begin(), out.end())};
        };
        return c;
    };
}

void add_elementwise_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    for (auto [n, dim] : {std::pair{1, 128}, std::pair{7, 64}, std::pair{83, 128}, std::pair{40, 96}, std::pair{5, 32}})
        for (bool table : {false, true}) out.push_back(pack_case(n, dim, -1, table, o.seed));
    for (auto [n, dim, rope] : {std::tuple{1, 512, 64}, std::tuple{7, 512, 64}, std::tuple{83, 83, 64},
                                std::tuple{40, 130, 2}, std::tuple{5, 128, 0}})
        for (bool table : {false, true}) out.push_back(pack_case(n, dim, rope, table, o.seed));
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
        for (const auto& shape_t : {std::tuple{1, 64, 64}, std::tuple{3, 83, 64}, std::tuple{8, 128, 64}})
            for (bool inverse : {false, true}) {
                // Plain locals, not structured bindings: the lambdas below capture them (C++20 allows capturing
                // a binding, Clang 14 does not).
                const int heads = std::get<0>(shape_t), hd = std::get<1>(shape_t), rd = std::get<2>(shape_t);
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
        for (const auto& dims_t : {std::pair{64, 64}, std::pair{448, 64}, std::pair{96, 32}}) {
            const int n_dims = dims_t.first, block = dims_t.second;  // captured below: plain locals
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

    // norm_rope: the model's shapes (the KV row and compressed entries: 1 head of 512; V4-Flash's query: 64 heads of
    // 512; the indexer's entries: 1 of 128; 64 heads of 64: every dim RoPE'd), strided rows (pad 4 keeps the rows
    // 16-byte aligned: CUDA's fused kernel; pad 5 or 7 and head_dim 83 do not: its separate kernels), other FP8
    // block widths (32, 128: other lane groups of the fused kernel; 256: separate kernels), head_dim 1024 (the
    // fused kernel's largest) and 1088 (past it).
    struct NormRopeShape {
        int heads, hd, pad, fp8_block;
    };
    for (int64_t n : {1, 7, 83})
        for (const NormRopeShape& sh : {NormRopeShape{1, 512, 0, 64}, NormRopeShape{64, 512, 0, 64},
                                        NormRopeShape{1, 128, 0, 64}, NormRopeShape{64, 64, 0, 64},
                                        NormRopeShape{8, 128, 4, 64}, NormRopeShape{3, 83, 7, 19},
                                        NormRopeShape{2, 192, 5, 64}, NormRopeShape{2, 256, 4, 32},
                                        NormRopeShape{1, 576, 0, 128}, NormRopeShape{3, 320, 4, 256},
                                        NormRopeShape{1, 1024, 0, 64}, NormRopeShape{1, 1088, 0, 64}})
            for (bool weighted : {false, true})
                for (bool fp8 : {false, true}) {
                    if (n == 83 && sh.heads * sh.hd > 4096 && weighted != fp8) continue;  // the largest: two of four
                    out.push_back(norm_rope_case(n, sh.heads, sh.hd, sh.pad, weighted, fp8 ? sh.fp8_block : 0, seed));
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
            // Rows of different sequences into their own tables (three here, row i into table i % 3 at row
            // i / 3, reversed within each table; every fourth row skipped).
            const int64_t per = n / 3 + 1;
            std::vector<int32_t> tidx((size_t)n);
            for (int64_t i = 0; i < n; ++i) tidx[i] = i % 4 == 1 ? -1 : (int32_t)(per - 1 - i / 3);
            const std::vector<float> tdst = rng.vec(3 * per * cols);
            out.push_back(inplace_case(
                "scatter_rows_to", dims({{"n", n}, {"cols", cols}, {"rows", per}}), tdst, 0, 0,
                [=](Backend& b, float* y) {
                    Dev d(b);
                    std::vector<float*> host((size_t)n);
                    for (int64_t i = 0; i < n; ++i) host[i] = y + (i % 3) * per * cols;
                    void* table = d.bytes(host.size() * sizeof(float*));
                    b.upload(table, host.data(), host.size() * sizeof(float*));
                    b.scatter_rows_to(static_cast<float* const*>(table), d.f32(gsrc), d.i32(tidx), n, cols);
                    b.synchronize();
                },
                [=](const std::vector<float>& in) {
                    Array r(in.begin(), in.end());
                    for (int64_t i = 0; i < n; ++i)
                        if (tidx[i] >= 0)
                            for (int64_t c = 0; c < cols; ++c)
                                r[((i % 3) * per + tidx[i]) * cols + c] = gsrc[i * cols + c];
                    return r;
                }));
        }
    (void)o.perf;
}

}  // namespace dsv4::backend_ops
