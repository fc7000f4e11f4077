// Conformance cases of the weight ops: matmul (every weight format, GEMV- and tile-sized inputs, strided
// x and y) and embed (every format, bit-identical: dequantization is exact on every backend).
#include <cstdio>

#include "harness.h"

namespace dsv4::backend_ops {

namespace {

std::string fmt_type(GgmlType t) { return std::string(ggml_type_name(t)); }

CaseGen matmul_case(GgmlType t, int64_t n, int64_t K, int64_t M, int64_t xs, int64_t ys, bool perf_only, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "matmul";
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s n=%lld K=%lld M=%lld xs=%lld ys=%lld", fmt_type(t).c_str(), (long long)n,
                      (long long)K, (long long)M, (long long)xs, (long long)ys);
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, M, K, rng));
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * xs));
        // Each output is one K-term dot of the exactly dequantized weight with x.
        c.tol = tol_dot((double)K);
        c.ref_tol = tol_dot((double)K);
        c.bytes = (double)w->size() + 4.0 * n * (K + M);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const Weight wt = make_weight(b, t, *w, M, K);
            const float* xd = d.f32(*x);
            float* yd = d.f32_out(n * ys);
            in.run = [&b, wt, xd, yd, n, xs, ys]() { b.matmul(yd, ys, xd, xs, wt, n); };
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

CaseGen embed_case(GgmlType t, int64_t rows, int64_t cols, int64_t n, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "embed";
        c.shape = fmt_type(t) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n);
        Rng rng(case_seed(seed, c.op + c.shape));
        auto w = std::make_shared<std::vector<uint8_t>>(random_weight(t, rows, cols, rng));
        std::vector<int32_t> ids((size_t)n);
        for (auto& id : ids) id = rng.uniform_int(0, (int)rows - 1);
        ids[0] = 0;
        ids[n - 1] = (int32_t)rows - 1;
        c.tol = 0;  // dequantization is exact: the same float operations on every backend
        c.ref_tol = 0;
        c.bytes = (double)n * (w->size() / rows + 4.0 * cols);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            const Weight wt = make_weight(b, t, *w, rows, cols);
            const int32_t* idd = d.i32(ids);
            float* out = d.f32_out(n * cols);
            in.run = [&b, wt, idd, out, n]() { b.embed(out, wt, idd, n); };
            in.read = [&d, out, n, cols]() { return Arrays{d.get(out, n * cols)}; };
            return in;
        };
        c.reference = [=]() {
            const std::vector<float> deq = dequant_weight(t, *w, rows, cols);
            Array out;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t k = 0; k < cols; ++k) out.push_back(deq[ids[i] * cols + k]);
            return Arrays{out};
        };
        return c;
    };
}

}  // namespace

// A matmul batch: job j reads x[:, x_off[j] .. + K_j] (row stride xs) and writes y[:, y_off[j] .. + M_j] (row
// stride ys), like a layer's projections of one input (same x, different y) or grouped projections (x and y
// slices). Each job's output is checked on its own.
struct BatchJobSpec {
    GgmlType t;
    int64_t K, M, x_off, y_off;
};
CaseGen matmul_batch_case(std::vector<BatchJobSpec> jobs, int64_t n, int64_t xs, int64_t ys, uint64_t seed,
                          bool perf_only = false, Mode mode = Mode::F32) {
    return [=]() {
        Case c;
        c.op = "matmul_batch";
        c.shape = mode == Mode::BF16 ? "bf16 n=" : "n=";
        c.shape += std::to_string(n);
        for (const BatchJobSpec& j : jobs) {  // appends: GCC 12 warns (-Wrestrict) on the chained operator+
            c.shape += ' ';
            c.shape += fmt_type(j.t);
            c.shape += ':';
            c.shape += std::to_string(j.K);
            c.shape += 'x';
            c.shape += std::to_string(j.M);
        }
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto ws = std::make_shared<std::vector<std::vector<uint8_t>>>();
        int64_t kmax = 0;
        for (const BatchJobSpec& j : jobs) {
            ws->push_back(random_weight(j.t, j.M, j.K, rng));
            kmax = std::max(kmax, j.K);
        }
        auto x = std::make_shared<std::vector<float>>(rng.vec(n * xs));
        c.tol = (mode == Mode::BF16 ? kTolBf16Dot : 0.0) + tol_dot((double)kmax);
        c.ref_tol = tol_dot((double)kmax);
        for (const auto& w : *ws) c.bytes += (double)w.size();
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            auto wts = std::make_shared<std::vector<Weight>>();
            for (size_t j = 0; j < jobs.size(); ++j) wts->push_back(make_weight(b, jobs[j].t, (*ws)[j], jobs[j].M, jobs[j].K));
            const float* xd = d.f32(*x);
            float* yd = d.f32_out(n * ys);
            auto mj = std::make_shared<std::vector<MatmulJob>>();
            for (size_t j = 0; j < jobs.size(); ++j)
                mj->push_back({yd + jobs[j].y_off, ys, xd + jobs[j].x_off, xs, &(*wts)[j]});
            in.run = [&b, wts, mj, n, mode]() {
                const ScopedMode scope(b, mode);
                b.matmul_batch(*mj, n);
            };
            in.read = [&d, yd, n, ys, jobs]() {
                Arrays out;
                for (const BatchJobSpec& j : jobs) out.push_back(d.get(yd + j.y_off, n, j.M, ys));
                return out;
            };
            return in;
        };
        c.reference = [=]() {
            Arrays out;
            for (size_t jj = 0; jj < jobs.size(); ++jj) {
                const BatchJobSpec& j = jobs[jj];
                const std::vector<float> deq = dequant_weight(j.t, (*ws)[jj], j.M, j.K);
                Array y((size_t)(n * j.M));
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t m = 0; m < j.M; ++m) {
                        double s = 0;
                        for (int64_t k = 0; k < j.K; ++k) s += (double)deq[m * j.K + k] * (*x)[i * xs + j.x_off + k];
                        y[i * j.M + m] = s;
                    }
                out.push_back(y);
            }
            return out;
        };
        return c;
    };
}

void add_matmul_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    for (GgmlType t : weight_types()) {
        const int64_t k1 = cols_for(t, 1, 7), k2 = cols_for(t, 2, 83), k3 = cols_for(t, 3, 769);
        // n <= 8: the GEMV path; n > 8: the tiled path. Odd M, strided x/y, K of 1..3 blocks (plain: 7, 83, 769).
        out.push_back(matmul_case(t, 1, k3, 769, k3, 769, false, o.seed));
        out.push_back(matmul_case(t, 7, k1, 83, k1 + 5, 83 + 3, false, o.seed));
        out.push_back(matmul_case(t, 8, k2, 33, k2, 33, false, o.seed));
        out.push_back(matmul_case(t, 83, k3, 7, k3 + 5, 7 + 3, false, o.seed));
        out.push_back(matmul_case(t, 70, k2, 130, k2, 130, false, o.seed));
        out.push_back(embed_case(t, 83, k2, 7, o.seed));
        if (o.perf) {
            // Decode GEMV and prefill-sized products of a 4096 x 4096 matrix.
            for (int64_t n : {1, 16, 128}) out.push_back(matmul_case(t, n, 4096, 4096, 4096, 4096, true, o.seed));
        }
    }
    // Batches: mixed types (one launch per type on a GPU), same x with different widths, grouped slices of
    // x and y (wo_a-like, 8 groups), decode and prefill row counts (n = 16 runs job by job).
    for (int64_t n : {1, 3, 8, 16}) {
        const GgmlType q8 = GgmlType::Q8_0, f16 = GgmlType::F16, q4 = GgmlType::Q4_K;
        out.push_back(matmul_batch_case({{q8, 512, 96, 0, 0}, {q8, 512, 33, 0, 96}, {f16, 512, 64, 0, 129},
                                         {q4, 512, 40, 0, 193}, {f16, 512, 7, 0, 233}, {q8, 512, 130, 0, 240}},
                                        n, 512 + 4, 370 + 2, o.seed));
        std::vector<BatchJobSpec> groups;
        for (int g = 0; g < 8; ++g) groups.push_back({q8, 256, 64, 256 * g, 64 * g});
        out.push_back(matmul_batch_case(groups, n, 8 * 256, 8 * 64, o.seed));
    }
    // The bf16 mode's batch kernel for 16..64 rows (tc_blocks: jobs of one block format and K in one launch):
    // wo_a-like groups, jobs of different widths reading one x, a job in another format (its own launch), a
    // compressor's F16 pair (kv and gate of one x) beside a BF16 job.
    for (int64_t n : {16, 24, 40, 64}) {
        const GgmlType q8 = GgmlType::Q8_0, f16 = GgmlType::F16;
        out.push_back(matmul_batch_case(
            {{f16, 1024, 130, 0, 0}, {f16, 1024, 130, 0, 130}, {GgmlType::BF16, 1024, 40, 0, 260}}, n, 1024, 300,
            o.seed, false, Mode::BF16));
        std::vector<BatchJobSpec> groups;
        for (int g = 0; g < 8; ++g) groups.push_back({q8, 512, 64 + 40 * g, 512 * g, 400 * g});
        out.push_back(matmul_batch_case(groups, n, 8 * 512 + 4, 8 * 400, o.seed, false, Mode::BF16));
        out.push_back(
            matmul_batch_case({{q8, 768, 300, 0, 0}, {q8, 768, 33, 0, 300}, {GgmlType::Q4_K, 768, 130, 0, 333}}, n, 768,
                              463, o.seed, false, Mode::BF16));
    }
    // One activation row, Q8_0 jobs of one K (a multiple of 512): the kernel with the activation in registers,
    // for a layer's projections of one input (whole blocks per lane) and wo_a-like groups (half blocks).
    {
        const GgmlType q8 = GgmlType::Q8_0;
        out.push_back(matmul_batch_case({{q8, 1024, 96, 0, 0}, {q8, 1024, 33, 0, 96}, {q8, 1024, 130, 0, 129}}, 1,
                                        1024, 259, o.seed));
        std::vector<BatchJobSpec> groups;
        for (int g = 0; g < 8; ++g) groups.push_back({q8, 512, 64 + g, 512 * g, 80 * g});
        out.push_back(matmul_batch_case(groups, 1, 8 * 512, 8 * 80, o.seed));
    }
    // The same for the lane-codec formats (cuda_gemv_lane_xreg.cu): projections of one input and grouped slices.
    for (GgmlType t : {GgmlType::IQ1_M, GgmlType::IQ2_XS, GgmlType::IQ3_S}) {
        out.push_back(matmul_batch_case({{t, 1536, 96, 0, 0}, {t, 1536, 33, 0, 96}}, 1, 1536, 129, o.seed));
        std::vector<BatchJobSpec> groups;
        for (int g = 0; g < 4; ++g) groups.push_back({t, 1024, 40 + g, 1024 * g, 50 * g});
        out.push_back(matmul_batch_case(groups, 1, 4 * 1024, 4 * 50, o.seed));
    }
    // A one-job GEMV with at least 8 row groups (2 rows each) per resident warp runs on the persistent grid
    // (the LM head's form on a GPU): 100001 rows of 3 blocks (an odd last group), 1 and 3 activation rows,
    // a format with activation digits and one without.
    for (int64_t n : {1, 3})
        for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
            const int64_t K = cols_for(t, 3, 769);
            out.push_back(matmul_case(t, n, K, 100001, K, 100001 + 3, false, o.seed));
        }
    if (o.perf) {
        // V4-Flash decode: wo_a's 8 groups (4096 x 1024 each, Q8_0) as one batch.
        std::vector<BatchJobSpec> groups;
        for (int g = 0; g < 8; ++g) groups.push_back({GgmlType::Q8_0, 4096, 1024, 4096 * g, 1024 * g});
        out.push_back(matmul_batch_case(groups, 1, 8 * 4096, 8 * 1024, o.seed, true));
    }
}

}  // namespace dsv4::backend_ops
