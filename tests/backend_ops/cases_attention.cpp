// Conformance cases of the attention family: sparse attention with sinks (window lists, compressed index
// lists or counts, empty rows), the lightning indexer's top-k (compared up to near-ties, exactly on
// integer-valued inputs where ties are real) and the KV compressor over two consecutive calls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "harness.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

namespace dsv4::backend_ops {

namespace {

enum class Comp { none, idx, count };

// Tolerance of the CUDA tensor-core attention (bf16 mode, cuda_attention_tc.cu) on these inputs (uniform in
// [-1, 1], scale 1/sqrt(hd)), as a squared relative error, with u = 2^-8 the bf16 roundoff (variance u^2/3 per
// rounding). The output is a weighted average of rows: (a) each row value rounded: u^2/3; (b) each weight
// rounded, the denominator summing the rounded weights: o moves by sum w_r eta_r (v_r - o), about u^2/3
// (2u^2/3 taken, for the o^2 part); (c) the scores: q and the row rounded, s = scale sum q_k k_k gets an
// absolute error of variance 2u^2/3 * scale^2 hd E[q^2] E[k^2] = 2u^2/3 * 1/9, which moves o by that times
// E[(v - o)^2] / E[v^2] ~ 1: 2u^2/27. Sum: (1 + 2/27) u^2; bound 8x that.
constexpr double kTolBf16Attention = 8.0 * (1.0 + 2.0 / 27.0) * kUb2;

// With out_rope, the output's inverse RoPE on its last 64 dims at random positions (AttentionArgs::out_rope).
// With per_query, every query has its own window and compressed rows, named by the per-query tables
// (kv_win_rows, kv_comp_rows: queries of different sequences). With packed, the compressed rows are what the
// quant-sim mode makes of them (FP8-simulated non-RoPE dims, the last 64 dims or half of a smaller head RoPE
// dims) and go to the op packed (ops/kv_rows.h, AttentionArgs::comp_packed); the reference reads the floats.
CaseGen attention_case(int64_t n, int H, int hd, int n_win, Comp comp, int n_comp, bool sinks, bool empty_row,
                       bool perf_only, uint64_t seed, Mode mode = Mode::F32, bool out_rope = false,
                       bool per_query = false, bool packed = false) {
    return [=]() {
        Case c;
        c.op = "attention";
        char buf[160];
        std::snprintf(buf, sizeof buf, "%sn=%lld H=%d hd=%d win=%d comp=%s%s/%d%s%s%s%s", mode == Mode::BF16 ? "bf16 " : "",
                      (long long)n, H, hd, n_win,
                      comp == Comp::none  ? "none"
                      : comp == Comp::idx ? "idx"
                                          : "count",
                      packed ? " fp8" : "", n_comp, sinks ? " sinks" : "", empty_row ? " empty-row" : "", out_rope ? " rope" : "",
                      per_query ? " per-query" : "");
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        const int W = std::max(n_win + 8, 40), C = std::max(n_comp + 20, 100);  // rows of kv_win / kv_comp
        const int64_t sources = per_query ? n : 1;  // query i's rows: source i % sources
        auto q = std::make_shared<std::vector<float>>(rng.vec(n * H * hd));
        auto kvw = std::make_shared<std::vector<float>>(rng.vec(sources * W * hd));
        auto kvc = std::make_shared<std::vector<float>>(rng.vec(sources * C * hd));
        const int comp_rope = hd > 64 ? 64 : hd / 2;
        const int64_t crf = packed ? kv_row_floats(hd, comp_rope) : hd;  // floats a compressed row takes
        auto kvc_data = std::make_shared<std::vector<float>>();  // the compressed rows as the op takes them
        if (packed) {
            kvc_data->resize((size_t)(sources * C * crf));
            for (int64_t r = 0; r < sources * C; ++r) {
                float* v = kvc->data() + r * hd;
                for (int j = 0; j < hd - comp_rope; j += kFp8Block)
                    fake_quant_block(v + j, std::min(kFp8Block, hd - comp_rope - j), false);
                kv_pack_row(v, hd, comp_rope, reinterpret_cast<uint8_t*>(kvc_data->data() + r * crf));
            }
        } else {
            *kvc_data = *kvc;
        }
        auto snk = std::make_shared<std::vector<float>>(rng.vec(H, -1, 1));
        auto widx = std::make_shared<std::vector<int32_t>>((size_t)(n * n_win));
        for (auto& v : *widx) v = rng.uniform_int(0, 4) == 0 ? -1 : rng.uniform_int(0, W - 1);
        auto cidx = std::make_shared<std::vector<int32_t>>((size_t)(comp == Comp::idx ? n * n_comp : 0));
        for (auto& v : *cidx) v = rng.uniform_int(0, 4) == 0 ? -1 : rng.uniform_int(0, C - 1);
        auto ccount = std::make_shared<std::vector<int32_t>>((size_t)n);
        for (auto& v : *ccount) v = perf_only ? n_comp : rng.uniform_int(0, n_comp);  // perf: every entry
        if (empty_row) {  // query 0 attends to nothing: its output must be zero
            std::fill(widx->begin(), widx->begin() + n_win, -1);
            if (comp == Comp::idx) std::fill(cidx->begin(), cidx->begin() + n_comp, -1);
            (*ccount)[0] = 0;
        }
        const int rd = 64;  // out_rope's dims
        auto pos = std::make_shared<std::vector<int32_t>>((size_t)n);
        for (auto& p : *pos) p = rng.uniform_int(0, 100000);
        auto freqs = std::make_shared<std::vector<float>>((size_t)rd / 2);
        for (int t = 0; t < rd / 2; ++t) (*freqs)[t] = 1.0f / std::pow(10000.0f, (float)(2 * t) / (float)rd);
        const int L = n_win + (comp == Comp::none ? 0 : n_comp);
        // hd-term score dots, one exp per row, an L-term weighted sum and its normalization; out_rope adds the
        // rope op's bound (a rotation keeps the attention's error norm).
        c.ref_tol = tol_dot(hd) + kTolTransc + tol_dot(L) + (out_rope ? kTolTransc : 0.0);
        c.tol = c.ref_tol + (mode == Mode::BF16 ? kTolBf16Attention : 0.0);
        c.bytes = 4.0 * (2 * n * H * hd + (double)n * L * hd);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            AttentionArgs a;  // (per_query: query i's sources at W or C rows times i)
            a.out = d.f32_out(n * H * hd);
            a.q = d.f32(*q);
            a.n = n;
            a.n_heads = H;
            a.head_dim = hd;
            a.scale = 1.0f / std::sqrt((float)hd);
            a.sinks = sinks ? d.f32(*snk) : nullptr;
            float* kvw_d = d.f32(*kvw);
            a.kv_win = kvw_d;
            if (per_query) a.kv_win_rows = d.rows(kvw_d, n, (int64_t)W * hd);
            a.win_idx = d.i32(*widx);
            a.n_win = n_win;
            if (comp != Comp::none) {
                float* kvc_d = d.f32(*kvc_data);
                a.kv_comp = kvc_d;
                a.comp_packed = packed;
                a.comp_rope = comp_rope;
                if (per_query) a.kv_comp_rows = d.rows(kvc_d, n, (int64_t)C * crf);
                if (comp == Comp::idx) {
                    a.comp_idx = d.i32(*cidx);
                    a.n_comp = n_comp;
                } else {
                    a.comp_count = d.i32(*ccount);
                }
            }
            if (out_rope) {
                a.out_rope = RopeParams{d.f32(*freqs), rd};
                a.pos = d.i32(*pos);
            }
            in.run = [&b, a, mode]() {
                const ScopedMode scope(b, mode);
                b.attention(a);
            };
            in.read = [&d, a, n, H, hd]() { return Arrays{d.get(a.out, n * H * hd)}; };
            return in;
        };
        c.reference = [=]() {
            Array out;
            const double scale = 1.0f / std::sqrt((float)hd);
            for (int64_t i = 0; i < n; ++i) {
                std::vector<const float*> rows;
                const float* win_rows = kvw->data() + i % sources * W * hd;
                const float* comp_rows = kvc->data() + i % sources * C * hd;
                for (int w = 0; w < n_win; ++w)
                    if ((*widx)[i * n_win + w] >= 0) rows.push_back(win_rows + (int64_t)(*widx)[i * n_win + w] * hd);
                if (comp == Comp::idx)
                    for (int k = 0; k < n_comp; ++k)
                        if ((*cidx)[i * n_comp + k] >= 0) rows.push_back(comp_rows + (int64_t)(*cidx)[i * n_comp + k] * hd);
                if (comp == Comp::count)
                    for (int k = 0; k < (*ccount)[i]; ++k) rows.push_back(comp_rows + (int64_t)k * hd);
                for (int h = 0; h < H; ++h) {
                    const size_t o0 = out.size();
                    const float* qh = q->data() + (i * H + h) * hd;
                    std::vector<double> s(rows.size());
                    double m = -INFINITY;
                    for (size_t r = 0; r < rows.size(); ++r) {
                        double dot = 0;
                        for (int k = 0; k < hd; ++k) dot += (double)qh[k] * rows[r][k];
                        s[r] = dot * scale;
                        m = std::max(m, s[r]);
                    }
                    double l = 0;
                    for (double& v : s) l += v = std::exp(v - m);
                    if (sinks) l += std::exp((*snk)[h] - m);
                    for (int k = 0; k < hd; ++k) {
                        double o = 0;
                        for (size_t r = 0; r < rows.size(); ++r) o += s[r] * rows[r][k];
                        out.push_back(rows.empty() ? 0.0 : o / l);
                    }
                    if (!out_rope) continue;
                    for (int t = 0; t < rd / 2; ++t) {  // the inverse rotation, at an f32 angle
                        const double ang = (float)(*pos)[i] * (*freqs)[t];
                        double& x0 = out[o0 + hd - rd + 2 * t];
                        double& x1 = out[o0 + hd - rd + 2 * t + 1];
                        const double a0 = x0, a1 = x1;
                        x0 = a0 * std::cos(ang) + a1 * std::sin(ang);
                        x1 = -a0 * std::sin(ang) + a1 * std::cos(ang);
                    }
                }
            }
            return Arrays{out};
        };
        return c;
    };
}

// With per_query, every query has its own keys, named by indexer_topk's key_rows table. With fp4, the queries
// and keys are FP4-simulated values as in quant-sim mode (each block of 32 rounded by fake_quant_block) and
// the keys go to the op as packed FP4 rows; with exact too, they are E2M1 grid values (which the rounding
// keeps), so every score is exact in f32 in any order.
CaseGen indexer_case(int64_t n, int H, int hd, int NV, int top_k, bool exact, bool perf_only, uint64_t seed,
                     bool per_query = false, bool fp4 = false) {
    return [=]() {
        Case c;
        c.op = "indexer_topk";
        char buf[160];
        std::snprintf(buf, sizeof buf, "n=%lld H=%d hd=%d keys=%d top_k=%d%s%s%s", (long long)n, H, hd, NV, top_k,
                      exact ? " integer-valued" : "", per_query ? " per-query" : "", fp4 ? " fp4" : "");
        c.shape = buf;
        c.perf_only = perf_only;
        if (!case_wanted(c)) return c;
        Rng rng(case_seed(seed, c.op + c.shape));
        auto coarse = [&](int64_t count, const float* vals, int nvals) {
            std::vector<float> v((size_t)count);
            for (auto& x : v) x = vals[rng.uniform_int(0, nvals - 1)];
            return v;
        };
        // Integer-valued inputs (multiples of 1/2, weights powers of two) make every score exact in f32 in any
        // summation order, so exact ties are frequent and the tie rule (lower index first) is tested exactly.
        const float halves[] = {-1, -0.5f, 0, 0.5f, 1}, pows[] = {0.5f, 1, 2};
        const float grid[] = {-6, -4, -3, -2, -1.5f, -1, -0.5f, 0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        auto coarse_values = [&](int64_t count) { return fp4 ? coarse(count, grid, 15) : coarse(count, halves, 5); };
        auto q = std::make_shared<std::vector<float>>(exact ? coarse_values(n * H * hd) : rng.vec(n * H * hd));
        auto w = std::make_shared<std::vector<float>>(exact ? coarse(n * H, pows, 3) : rng.vec(n * H, -1, 1));
        const int64_t sources = per_query ? n : 1;  // query i's keys: set i % sources
        auto keys = std::make_shared<std::vector<float>>(exact ? coarse_values(sources * NV * hd)
                                                               : rng.vec(sources * NV * hd));
        // The keys as the op takes them: f32 rows, or packed FP4 rows of the rounded values.
        const int64_t row_floats = fp4 ? fp4_row_floats(hd) : hd;
        auto key_data = std::make_shared<std::vector<float>>();
        if (fp4) {
            for (int64_t r = 0; r < n * H; ++r)
                for (int j = 0; j < hd; j += kFp4Block) fake_quant_block(q->data() + r * hd + j, kFp4Block, true);
            key_data->resize((size_t)(sources * NV * row_floats + 4));
            for (int64_t r = 0; r < sources * NV; ++r) {
                for (int j = 0; j < hd; j += kFp4Block) fake_quant_block(keys->data() + r * hd + j, kFp4Block, true);
                fp4_pack_row(keys->data() + r * hd, hd, reinterpret_cast<uint8_t*>(key_data->data() + r * row_floats));
            }
        } else {
            *key_data = *keys;
        }
        auto nvis = std::make_shared<std::vector<int32_t>>((size_t)n);
        for (auto& v : *nvis) v = rng.uniform_int(0, NV);
        (*nvis)[0] = NV;
        if (n > 1) (*nvis)[1] = std::min(NV, top_k / 2);  // fewer visible entries than top_k: padded with -1
        if (n > 2) (*nvis)[2] = 0;
        // Scores and their worst-case f32 error bounds ((hd + H) u sum |terms|), in double.
        auto score = std::make_shared<std::vector<double>>((size_t)(n * NV));
        auto bound = std::make_shared<std::vector<double>>((size_t)(n * NV));
        for (int64_t i = 0; i < n; ++i)
            for (int t = 0; t < (*nvis)[i]; ++t) {
                double s = 0, a = 0;
                for (int h = 0; h < H; ++h) {
                    double dot = 0, abs_dot = 0;
                    for (int k = 0; k < hd; ++k) {
                        const double p = (double)(*q)[(i * H + h) * hd + k] * (*keys)[(i % sources * NV + t) * hd + k];
                        dot += p;
                        abs_dot += std::fabs(p);
                    }
                    s += std::max(dot, 0.0) * (*w)[i * H + h];
                    a += abs_dot * std::fabs((*w)[i * H + h]);
                }
                (*score)[i * NV + t] = s;
                (*bound)[i * NV + t] = (hd + H + 2) * kU * a;
            }
        c.bytes = 4.0 * (n * H * (hd + 1) + (double)NV * row_floats + n * top_k);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& d = *in.dev;
            int32_t* idx = d.i32_out(n * top_k);
            const float* qd = d.f32(*q);
            const float* wd = d.f32(*w);
            float* kd = d.f32(*key_data);
            const float* const* key_rows = per_query ? d.rows(kd, n, (int64_t)NV * row_floats) : nullptr;
            const int32_t* nv = d.i32(*nvis);
            in.run = [&b, idx, qd, wd, kd, nv, n, H, hd, top_k, key_rows, fp4]() {
                b.indexer_topk(idx, qd, wd, kd, nv, n, H, hd, top_k, key_rows, fp4);
            };
            in.read = [&d, idx, n, top_k]() { return Arrays{d.get_i(idx, n * top_k)}; };
            return in;
        };
        c.reference = [=]() {
            Array out;
            for (int64_t i = 0; i < n; ++i) {
                std::vector<int> order((*nvis)[i]);
                std::iota(order.begin(), order.end(), 0);
                const double* s = score->data() + i * NV;
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
                for (int j = 0; j < top_k; ++j) out.push_back(j < (int)order.size() ? order[j] : -1);
            }
            return Arrays{out};
        };
        // Exact inputs: identical lists. Otherwise: the same -1 padding, valid distinct indices, and at every
        // rank the two chosen entries' scores agree within their f32 error bounds (a near-tie may swap).
        c.compare = [=](const Arrays& got, const Arrays& want, bool) -> std::string {
            if (exact) return got == want ? "" : "top-k lists differ on exact scores";
            for (int64_t i = 0; i < n; ++i) {
                const int k = std::min(top_k, (*nvis)[i]);
                std::vector<char> seen((size_t)NV, 0);
                for (int j = 0; j < top_k; ++j) {
                    const int a = (int)got[0][i * top_k + j], b = (int)want[0][i * top_k + j];
                    const std::string at = "query " + std::to_string(i) + " rank " + std::to_string(j);
                    if (j >= k) {
                        if (a != -1) return at + ": expected -1, got " + std::to_string(a);
                        continue;
                    }
                    if (a < 0 || a >= (*nvis)[i] || seen[a]) return at + ": invalid or repeated index " + std::to_string(a);
                    seen[a] = 1;
                    const double sa = (*score)[i * NV + a], sb = (*score)[i * NV + b];
                    if (std::fabs(sa - sb) > (*bound)[i * NV + a] + (*bound)[i * NV + b])
                        return at + ": index " + std::to_string(a) + " (score " + std::to_string(sa) + ") vs " +
                               std::to_string(b) + " (" + std::to_string(sb) + ")";
                }
            }
            return "";
        };
        return c;
    };
}

// The reference compressor's step for one token at position p (kv and score rows of width floats): store
// its row in the state (score plus ape), and when it completes a block append the pooled entry (d values, in
// double) to `entries` and, with overlap, shift the current block into the previous one. Returns whether it
// completed one.
bool reference_compress_token(std::vector<double>& skv, std::vector<double>& ssc, const float* kv, const float* sc,
                              const std::vector<float>& ape, int64_t p, int ratio, int d, bool overlap,
                              Array& entries) {
    const int64_t width = (int64_t)(overlap ? 2 : 1) * d;
    const int off = overlap ? ratio : 0, n_slots = overlap ? 2 * ratio : ratio;
    const int slot = off + (int)(p % ratio);
    for (int64_t col = 0; col < width; ++col) {
        skv[slot * width + col] = kv[col];
        ssc[slot * width + col] = (double)sc[col] + ape[(p % ratio) * width + col];
    }
    if ((p + 1) % ratio) return false;
    for (int ch = 0; ch < d; ++ch) {
        double m = -INFINITY, sum = 0, acc = 0;
        auto col = [&](int s) { return (overlap && s >= ratio) ? d + ch : ch; };
        for (int s = 0; s < n_slots; ++s) m = std::max(m, ssc[s * width + col(s)]);
        for (int s = 0; s < n_slots; ++s) {
            const double e = std::exp(ssc[s * width + col(s)] - m);
            sum += e;
            acc += e * skv[s * width + col(s)];
        }
        entries.push_back(acc / sum);
    }
    if (overlap) {
        std::copy(skv.begin() + ratio * width, skv.end(), skv.begin());
        std::copy(ssc.begin() + ratio * width, ssc.end(), ssc.begin());
    }
    return true;
}

CaseGen compressor_case(int ratio, int d, int64_t n1, int64_t n2, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "compressor";
        char buf[128];
        std::snprintf(buf, sizeof buf, "ratio=%d d=%d calls=%lld+%lld", ratio, d, (long long)n1, (long long)n2);
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        const bool overlap = ratio == 4;
        const int coff = overlap ? 2 : 1;
        const int64_t width = (int64_t)coff * d, N = n1 + n2, rows = (int64_t)coff * ratio;
        auto kv = std::make_shared<std::vector<float>>(rng.vec(N * width));
        auto sc = std::make_shared<std::vector<float>>(rng.vec(N * width, -3, 3));
        auto ape = std::make_shared<std::vector<float>>(rng.vec((int64_t)ratio * width, -1, 1));
        const int64_t new1 = n1 / ratio, total = N / ratio;
        const int n_slots = overlap ? 2 * ratio : ratio;
        // Pooled entries: a softmax over n_slots (exp each, two n_slots-term sums); the state holds copies and
        // one f32 sum per value.
        c.tol = kTolTransc + tol_dot(n_slots);
        c.ref_tol = c.tol;
        c.bytes = 4.0 * (2 * N * width + total * d);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& dv = *in.dev;
            float* skv = dv.f32(std::vector<float>((size_t)(rows * width), 0.0f));
            float* ssc = dv.f32(std::vector<float>((size_t)(rows * width), -INFINITY));
            float* entries = dv.f32_out(std::max<int64_t>(total, 1) * d);
            const float* kvd = dv.f32(*kv);
            const float* scd = dv.f32(*sc);
            const float* aped = dv.f32(*ape);
            std::vector<int32_t> positions((size_t)N);
            for (int64_t p = 0; p < N; ++p) positions[p] = (int32_t)p;
            const int32_t* posd = dv.i32(positions);
            in.run = [=, &b]() {
                CompressorArgs a;
                a.ape = aped;
                a.state_kv = skv;
                a.state_sc = ssc;
                a.ratio = ratio;
                a.d = d;
                a.overlap = overlap;
                a.kv = kvd;
                a.score = scd;
                a.out_entries = entries;
                a.n = n1;
                a.pos = posd;
                b.compressor(a);
                a.kv = kvd + n1 * width;
                a.score = scd + n1 * width;
                a.out_entries = entries + new1 * d;
                a.n = n2;
                a.pos = posd + n1;
                b.compressor(a);
            };
            in.read = [&dv, entries, skv, ssc, total, d, rows, width]() {
                return Arrays{dv.get(entries, total * d), dv.get(skv, rows * width), dv.get(ssc, rows * width)};
            };
            return in;
        };
        c.reference = [=]() {
            std::vector<double> skv((size_t)(rows * width), 0.0), ssc((size_t)(rows * width), -INFINITY);
            Array entries;
            for (int64_t p = 0; p < N; ++p)
                reference_compress_token(skv, ssc, kv->data() + p * width, sc->data() + p * width, *ape, p, ratio, d,
                                         overlap, entries);
            return Arrays{entries, Array(skv.begin(), skv.end()), Array(ssc.begin(), ssc.end())};
        };
        return c;
    };
}

// The per-token form (CompressorArgs::state_kv_rows): n tokens of n sequences, each with its own state (random
// rows, as a sequence's earlier tokens leave them) at its own position; every other token completes a block,
// whose entry lands in its row of out_entries, and the others leave zeros there.
CaseGen compressor_rows_case(int ratio, int d, int64_t n, uint64_t seed) {
    return [=]() {
        Case c;
        c.op = "compressor";
        char buf[128];
        std::snprintf(buf, sizeof buf, "ratio=%d d=%d per-token states n=%lld", ratio, d, (long long)n);
        c.shape = buf;
        Rng rng(case_seed(seed, c.op + c.shape));
        const bool overlap = ratio == 4;
        const int coff = overlap ? 2 : 1;
        const int64_t width = (int64_t)coff * d, rows = (int64_t)coff * ratio, state = rows * width;
        auto kv = std::make_shared<std::vector<float>>(rng.vec(n * width));
        auto sc = std::make_shared<std::vector<float>>(rng.vec(n * width, -3, 3));
        auto ape = std::make_shared<std::vector<float>>(rng.vec((int64_t)ratio * width, -1, 1));
        auto skv0 = std::make_shared<std::vector<float>>(rng.vec(n * state));
        auto ssc0 = std::make_shared<std::vector<float>>(rng.vec(n * state, -3, 3));
        auto positions = std::make_shared<std::vector<int32_t>>((size_t)n);
        for (int64_t j = 0; j < n; ++j) {
            const int block = rng.uniform_int(0, 300);
            const int in_block = j % 2 ? ratio - 1 : rng.uniform_int(0, ratio - 2 < 0 ? 0 : ratio - 2);
            (*positions)[j] = block * ratio + in_block;  // odd j complete their block
        }
        const int n_slots = overlap ? 2 * ratio : ratio;
        c.tol = kTolTransc + tol_dot(n_slots);
        c.ref_tol = c.tol;
        c.bytes = 4.0 * (2 * n * width + 2 * n * state + n * d);
        c.make = [=](Backend& b) {
            Instance in;
            in.dev = std::make_unique<Dev>(b);
            Dev& dv = *in.dev;
            float* skv = dv.f32(*skv0);
            float* ssc = dv.f32(*ssc0);
            float* entries = dv.f32_out(n * d);
            CompressorArgs a;
            a.kv = dv.f32(*kv);
            a.score = dv.f32(*sc);
            a.ape = dv.f32(*ape);
            a.state_kv_rows = dv.rows(skv, n, state);
            a.state_sc_rows = dv.rows(ssc, n, state);
            a.out_entries = entries;
            a.n = n;
            a.pos = dv.i32(*positions);
            a.ratio = ratio;
            a.d = d;
            a.overlap = overlap;
            // Repeatable for timing: the states are reset first (the op itself reads and writes them).
            in.run = [=, &b]() {
                b.upload(skv, skv0->data(), skv0->size() * sizeof(float));
                b.upload(ssc, ssc0->data(), ssc0->size() * sizeof(float));
                b.compressor(a);
            };
            in.read = [&dv, entries, skv, ssc, n, d, state]() {
                return Arrays{dv.get(entries, n * d), dv.get(skv, n * state), dv.get(ssc, n * state)};
            };
            return in;
        };
        c.reference = [=]() {
            Array entries, skv_all, ssc_all;
            for (int64_t j = 0; j < n; ++j) {
                std::vector<double> skv(skv0->begin() + j * state, skv0->begin() + (j + 1) * state);
                std::vector<double> ssc(ssc0->begin() + j * state, ssc0->begin() + (j + 1) * state);
                if (!reference_compress_token(skv, ssc, kv->data() + j * width, sc->data() + j * width, *ape,
                                              (*positions)[j], ratio, d, overlap, entries))
                    entries.insert(entries.end(), (size_t)d, 0.0);  // no block completed: the op's zero row
                skv_all.insert(skv_all.end(), skv.begin(), skv.end());
                ssc_all.insert(ssc_all.end(), ssc.begin(), ssc.end());
            }
            return Arrays{entries, skv_all, ssc_all};
        };
        return c;
    };
}

}  // namespace

void add_attention_cases(std::vector<CaseGen>& out, const BuildOptions& o) {
    const uint64_t s = o.seed;
    for (int64_t n : {1, 7, 83})
        for (int hd : {64, 83, 128, 512}) {
            const int H = hd == 512 ? 2 : 4;
            out.push_back(attention_case(n, H, hd, 32, Comp::none, 0, true, n > 1, false, s));
            out.push_back(attention_case(n, H, hd, 7, Comp::idx, 16, hd != 83, false, false, s));
            out.push_back(attention_case(n, 1, hd, 16, Comp::count, 100, true, n > 1, false, s));
            out.push_back(attention_case(n, H, hd, 0, Comp::idx, 70, false, false, false, s));
        }
    // The CUDA kernel's paths (block counts for an H200's 132 SMs): blocks take groups of 16 heads (8 past
    // head_dim 512, 32 in the 16-byte layout when n x groups >= 2 x SMs), so H = 5, 12, 33 leave partial
    // groups; few (query, group) blocks split the entries over blocks and merge (n = 1..7), many finish in
    // one block (n = 40 with 64 heads, n >= 150); a query with every entry -1 (empty row) must give zeros
    // on either path; head_dim 256/200/257/1024/1021 reach the other register widths, in the 16-byte layout
    // (head_dim % 4 == 0) and the scalar one.
    for (bool empty : {false, true}) {
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 400, true, empty, false, s));
        out.push_back(attention_case(2, 64, 512, 128, Comp::count, 300, !empty, empty, false, s));
        out.push_back(attention_case(3, 64, 512, 128, Comp::count, 700, true, empty, false, s));
        out.push_back(attention_case(40, 64, 512, 32, Comp::idx, 64, true, empty, false, s));
        out.push_back(attention_case(270, 33, 512, 16, Comp::idx, 40, !empty, empty, false, s));
        out.push_back(attention_case(1, 12, 83, 32, Comp::idx, 200, true, empty, false, s));
        out.push_back(attention_case(5, 5, 128, 16, Comp::count, 100, true, empty, false, s));
        out.push_back(attention_case(150, 12, 128, 16, Comp::count, 60, true, empty, false, s));
        out.push_back(attention_case(300, 12, 64, 32, Comp::idx, 40, true, empty, false, s));
        out.push_back(attention_case(200, 5, 83, 16, Comp::count, 100, !empty, empty, false, s));
    }
    // An HCA layer's decode deep in a context: in one call, the queries of at least 2,048 entries (window
    // included) take the four-heads kernel and the others the one-head kernel (counts drawn in [0, n_comp]:
    // with 8 queries both kinds all but surely come in each case); 70 heads leave the last head group partial.
    out.push_back(attention_case(8, 64, 512, 128, Comp::count, 6000, true, false, false, s));
    out.push_back(attention_case(8, 70, 128, 32, Comp::count, 3000, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(7, 16, 256, 32, Comp::idx, 64, true, true, false, s));
    out.push_back(attention_case(300, 12, 200, 16, Comp::idx, 50, true, true, false, s));
    out.push_back(attention_case(3, 20, 257, 16, Comp::count, 90, true, true, false, s));
    out.push_back(attention_case(1, 8, 1024, 32, Comp::idx, 64, true, false, false, s));
    out.push_back(attention_case(200, 3, 1024, 16, Comp::count, 50, true, true, false, s));
    out.push_back(attention_case(3, 4, 1021, 16, Comp::idx, 40, true, true, false, s));
    // The bf16 mode's tensor-core kernel (prefill: 16 queries or more; head_dim 64, 128, 256, 512): one and
    // several m-tiles of 16 heads, heads past H in the last tile and in a second head group, skipped entries,
    // tiles with no valid entry, an empty query, sinks; head_dims it does not take fall back to the f32 kernel.
    out.push_back(attention_case(20, 16, 128, 32, Comp::idx, 40, true, false, false, s, Mode::BF16));
    out.push_back(attention_case(17, 8, 64, 16, Comp::count, 30, false, true, false, s, Mode::BF16));
    out.push_back(attention_case(24, 20, 256, 16, Comp::idx, 64, true, true, false, s, Mode::BF16));
    out.push_back(attention_case(16, 64, 512, 64, Comp::idx, 64, true, true, false, s, Mode::BF16));
    out.push_back(attention_case(18, 70, 128, 40, Comp::none, 0, true, false, false, s, Mode::BF16));
    out.push_back(attention_case(33, 4, 64, 0, Comp::idx, 100, false, true, false, s, Mode::BF16));
    out.push_back(attention_case(16, 12, 83, 16, Comp::count, 50, true, true, false, s, Mode::BF16));
    // The tensor-core kernel's decode (bf16 mode, up to 8 queries shaped as one: each query's tiles split over blocks
    // and merged):
    // an index list (splits from the SM count, skipped entries, an empty query), every entry counted on the device
    // (64 splits, of which a query uses as many as it has tiles: few, and deep with several tiles a split), a partial
    // second head group (70 heads), the output's RoPE applied by the merge, packed rows, the window alone; head_dim
    // 83 falls back to the f32 kernel.
    for (bool empty : {false, true}) {
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 400, true, empty, false, s, Mode::BF16));
        out.push_back(attention_case(3, 64, 512, 128, Comp::count, 700, !empty, empty, false, s, Mode::BF16, true));
    }
    out.push_back(attention_case(8, 64, 512, 128, Comp::count, 6000, true, false, false, s, Mode::BF16, false, false,
                                 true));
    out.push_back(attention_case(5, 70, 128, 32, Comp::count, 3000, true, true, false, s, Mode::BF16, true));
    out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 512, true, false, false, s, Mode::BF16, true, false, true));
    out.push_back(attention_case(2, 16, 64, 40, Comp::none, 0, false, false, false, s, Mode::BF16, true));
    out.push_back(attention_case(7, 20, 256, 16, Comp::idx, 64, true, true, false, s, Mode::BF16));
    out.push_back(attention_case(2, 12, 83, 16, Comp::count, 100, true, false, false, s, Mode::BF16));
    // Chunks of 9..64 queries whose blocks leave SMs idle: a few splits each (every entry counted on the device, an
    // index list with the output's RoPE).
    out.push_back(attention_case(12, 64, 512, 128, Comp::count, 900, true, true, false, s, Mode::BF16, true, false,
                                 true));
    out.push_back(attention_case(32, 64, 512, 64, Comp::idx, 200, true, false, false, s, Mode::BF16, true));
    // The output's inverse RoPE (out_rope), on every path that writes the output: the merge of splits (decode:
    // 64 heads of 512, also with an empty query; head_dim 130 in the scalar layout, 1024), the kernel's own store
    // with one split (n = 40 and 270: two and four heads per warp; 130 and 1024 in the scalar and widest layouts),
    // every dim RoPE'd (head_dim 64); head_dim 83 (pairs start at odd dims) and the tensor-core kernel run the
    // rope op after the attention.
    for (bool empty : {false, true}) {
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 400, true, empty, false, s, Mode::F32, true));
        out.push_back(attention_case(40, 64, 512, 32, Comp::idx, 64, true, empty, false, s, Mode::F32, true));
    }
    out.push_back(attention_case(3, 64, 512, 128, Comp::count, 700, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(270, 33, 512, 16, Comp::idx, 40, false, false, false, s, Mode::F32, true));
    out.push_back(attention_case(1, 12, 130, 32, Comp::idx, 200, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(200, 5, 130, 16, Comp::count, 100, true, true, false, s, Mode::F32, true));
    out.push_back(attention_case(1, 8, 1024, 32, Comp::idx, 64, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(200, 3, 1024, 16, Comp::count, 50, true, true, false, s, Mode::F32, true));
    out.push_back(attention_case(7, 16, 64, 32, Comp::idx, 64, true, true, false, s, Mode::F32, true));
    out.push_back(attention_case(300, 12, 64, 32, Comp::idx, 40, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(1, 12, 83, 32, Comp::idx, 200, true, false, false, s, Mode::F32, true));
    out.push_back(attention_case(200, 5, 83, 16, Comp::count, 100, true, true, false, s, Mode::F32, true));
    out.push_back(attention_case(20, 16, 128, 32, Comp::idx, 40, true, false, false, s, Mode::BF16, true));
    out.push_back(attention_case(16, 64, 512, 64, Comp::idx, 64, true, true, false, s, Mode::BF16, true));
    // Packed FP8 compressed rows (a quant-sim cache's), on the kernels' paths above: decode with splits (an index
    // list, every entry, an HCA layer's deep decode on both kernels), one split, the scalar layout (head_dim 83:
    // 19 non-RoPE dims, one short block), per-query sources, the output's RoPE, and the tensor-core kernel.
    for (Mode m : {Mode::F32, Mode::BF16}) {
        const bool bf = m == Mode::BF16;
        out.push_back(attention_case(bf ? 16 : 1, 64, 512, 128, Comp::idx, 400, true, bf, false, s, m, false, false, true));
        out.push_back(attention_case(bf ? 20 : 3, 64, 512, 128, Comp::count, 700, true, false, false, s, m, true, false,
                                     true));
        out.push_back(attention_case(bf ? 24 : 5, 12, 83, 16, Comp::count, 100, true, true, false, s, m, false, false,
                                     true));
        out.push_back(attention_case(bf ? 33 : 40, 4, 64, 0, Comp::idx, 100, false, true, false, s, m, false, false,
                                     true));
    }
    out.push_back(attention_case(8, 64, 512, 128, Comp::count, 6000, true, false, false, s, Mode::F32, false, false, true));
    out.push_back(attention_case(8, 70, 128, 32, Comp::count, 3000, true, false, false, s, Mode::F32, true, false, true));
    out.push_back(attention_case(270, 33, 512, 16, Comp::idx, 40, false, true, false, s, Mode::F32, false, false, true));
    out.push_back(attention_case(200, 5, 130, 16, Comp::count, 100, true, true, false, s, Mode::F32, true, false, true));
    out.push_back(attention_case(3, 4, 1021, 16, Comp::idx, 40, true, true, false, s, Mode::F32, false, false, true));
    out.push_back(attention_case(5, 64, 512, 128, Comp::idx, 128, true, true, false, s, Mode::F32, true, true, true));
    out.push_back(attention_case(7, 12, 128, 32, Comp::count, 100, true, false, false, s, Mode::F32, false, true, true));
    out.push_back(indexer_case(1, 4, 64, 83, 8, false, false, s));
    out.push_back(indexer_case(7, 16, 64, 769, 16, false, false, s));
    out.push_back(indexer_case(7, 16, 128, 3000, 512, false, false, s));
    out.push_back(indexer_case(5, 8, 64, 5000, 100, false, false, s));
    out.push_back(indexer_case(83, 4, 64, 300, 16, false, false, s));
    out.push_back(indexer_case(7, 4, 64, 769, 16, true, false, s));
    out.push_back(indexer_case(3, 16, 64, 3000, 512, true, false, s));
    // The CUDA kernel's paths (splits per query come from n and the SM count, ranges from n_visible). Decode
    // with V4-Flash's 64 heads of 128 and top_k 512: per-split raw scores merged by one block; fewer keys
    // than a split's minimum; fewer keys than top_k; queries of different lengths (5000, 256, 0).
    out.push_back(indexer_case(1, 64, 128, 8192, 512, false, false, s));
    out.push_back(indexer_case(1, 64, 128, 1024, 512, false, false, s));  // 4096 tokens of context
    out.push_back(indexer_case(1, 64, 128, 600, 512, false, false, s));
    out.push_back(indexer_case(1, 64, 128, 300, 512, false, false, s));
    out.push_back(indexer_case(3, 64, 128, 5000, 512, false, false, s));
    // Raw scores ranked over the query's blocks (one or two queries): 1500 and 2000 keys, exact ties among
    // them, fewer positions than top_k (40 keys).
    out.push_back(indexer_case(1, 64, 128, 2000, 512, false, false, s));
    out.push_back(indexer_case(2, 16, 64, 1500, 512, true, false, s));
    out.push_back(indexer_case(1, 8, 64, 40, 128, true, false, s));
    // One or two queries: raw scores ranked over the query's blocks (up to 4096 keys): exact ties, most keys
    // ranked past top_k.
    out.push_back(indexer_case(2, 16, 64, 4000, 512, true, false, s));
    out.push_back(indexer_case(1, 8, 64, 3000, 64, true, false, s));
    out.push_back(indexer_case(3, 16, 64, 1800, 512, true, false, s));  // three queries: the one-block merge
    // Splits longer than top_k keep their own best (ties across splits exactly); too many of those to
    // stage in shared memory; raw scores too many to stage.
    out.push_back(indexer_case(2, 4, 64, 5000, 8, true, false, s));
    out.push_back(indexer_case(1, 8, 64, 20000, 16, false, false, s));
    out.push_back(indexer_case(1, 4, 64, 40000, 128, false, false, s));
    out.push_back(indexer_case(1, 4, 64, 60000, 256, false, false, s));
    // One or two queries past 4096 keys whose raw scores fit their scratch (2 splits x top_k): the histogram
    // path (top digits counted by the splits, the keys of the digits holding the top k gathered, then selected),
    // with exact ties across the boundary digit, two queries, and on packed keys.
    out.push_back(indexer_case(1, 16, 64, 6000, 64, true, false, s));
    out.push_back(indexer_case(2, 16, 64, 9000, 512, true, false, s));
    out.push_back(indexer_case(2, 64, 128, 12000, 512, false, false, s));
    out.push_back(indexer_case(1, 16, 64, 7000, 100, true, false, s, false, true));
    // Many queries, a block each: running threshold and buffer compaction (exact ties too); more heads than
    // one pass holds; head_dim not a multiple of 4 (unvectorized key staging).
    out.push_back(indexer_case(300, 4, 64, 700, 16, false, false, s));
    out.push_back(indexer_case(300, 4, 64, 600, 32, true, false, s));
    out.push_back(indexer_case(300, 8, 64, 1200, 256, false, false, s));
    out.push_back(indexer_case(5, 80, 32, 1000, 64, false, false, s));
    out.push_back(indexer_case(3, 4, 30, 500, 16, false, false, s));
    // Packed FP4 keys (quant-sim mode's cache): the shapes above on the integer tensor-core scoring: decode at
    // V4-Flash's size (raw scores ranked, merged, split buffers), key counts that start tiles mid-word (83,
    // 769), exact ties, many queries a block each, heads not a multiple of 16, head dims of 32 and 64.
    out.push_back(indexer_case(1, 64, 128, 8192, 512, false, false, s, false, true));
    out.push_back(indexer_case(1, 64, 128, 1024, 512, false, false, s, false, true));
    out.push_back(indexer_case(1, 64, 128, 300, 512, false, false, s, false, true));
    out.push_back(indexer_case(1, 64, 128, 2000, 512, true, false, s, false, true));
    out.push_back(indexer_case(3, 64, 128, 5000, 512, false, false, s, false, true));
    out.push_back(indexer_case(1, 4, 64, 83, 8, false, false, s, false, true));
    out.push_back(indexer_case(7, 16, 64, 769, 16, true, false, s, false, true));
    out.push_back(indexer_case(2, 4, 64, 5000, 8, true, false, s, false, true));
    out.push_back(indexer_case(1, 8, 128, 40000, 128, false, false, s, false, true));
    out.push_back(indexer_case(300, 4, 64, 600, 32, true, false, s, false, true));
    out.push_back(indexer_case(300, 8, 128, 1200, 256, false, false, s, false, true));
    out.push_back(indexer_case(5, 80, 32, 1000, 64, false, false, s, false, true));
    out.push_back(indexer_case(3, 20, 96, 777, 64, true, false, s, false, true));
    for (auto [ratio, d, n1, n2] : {std::tuple{4, 64, 7, 1}, std::tuple{4, 83, 83, 13}, std::tuple{4, 512, 1, 1},
                                    std::tuple{4, 64, 300, 5}, std::tuple{128, 64, 300, 1}, std::tuple{128, 83, 127, 2},
                                    std::tuple{8, 64, 5, 20}})
        out.push_back(compressor_case(ratio, d, n1, n2, s));
    // The CUDA kernel's parallel path (calls of 16 tokens or more; entries pooled at once, then the state
    // rewritten): both calls parallel, the second starting mid-block so its first entry reads the old state
    // (with overlap, the previous block too) and ending mid-block with stale rows left; exactly 64 tokens on
    // block boundaries; a V4-size prefill chunk then a serial decode call; a serial call then a parallel one;
    // a parallel call completing no block (ratio 128); a short prompt's chunk at V4 size (16 and 32 tokens)
    // then decode, and two just past the threshold, the second starting mid-block.
    for (auto [ratio, d, n1, n2] :
         {std::tuple{4, 83, 301, 203}, std::tuple{4, 64, 64, 64}, std::tuple{128, 64, 300, 300},
          std::tuple{128, 83, 1000, 130}, std::tuple{8, 64, 70, 200}, std::tuple{4, 512, 4093, 7},
          std::tuple{4, 83, 13, 150}, std::tuple{128, 64, 130, 100}, std::tuple{4, 512, 32, 1},
          std::tuple{128, 512, 16, 3}, std::tuple{4, 83, 17, 19}})
        out.push_back(compressor_case(ratio, d, n1, n2, s));
    // Queries of different sequences (batched decode): per-query sources through the tables, one query (the
    // split shape), a few (still one query's shape), many (one block per head group); the indexer likewise,
    // and the compressor's per-token states.
    for (int64_t n : {1, 5, 64}) {
        out.push_back(attention_case(n, 64, 512, 128, Comp::idx, 128, true, n > 1, false, s, Mode::F32, true, true));
        out.push_back(attention_case(n, 12, 128, 32, Comp::count, 100, true, false, false, s, Mode::F32, false, true));
        out.push_back(attention_case(n, 5, 83, 16, Comp::none, 0, true, false, false, s, Mode::F32, false, true));
        out.push_back(indexer_case(n, 64, 128, 1024, 512, false, false, s, true));
        out.push_back(indexer_case(n, 16, 64, 300, 64, true, false, s, true));
        out.push_back(indexer_case(n, 4, 30, 200, 16, false, false, s, true));
        out.push_back(indexer_case(n, 64, 128, 1024, 512, false, false, s, true, true));
        out.push_back(indexer_case(n, 16, 64, 300, 64, true, false, s, true, true));
    }
    out.push_back(attention_case(64, 64, 512, 128, Comp::idx, 128, true, false, false, s, Mode::BF16, true, true));
    for (auto [ratio, d, n] : {std::tuple{4, 512, 64}, std::tuple{4, 128, 5}, std::tuple{128, 512, 64},
                               std::tuple{4, 83, 7}, std::tuple{8, 64, 1}})
        out.push_back(compressor_rows_case(ratio, d, n, s));
    if (o.perf) {
        // V4-Flash-like decode and prefill attention (64 heads of 512, 128 window + 512 selected entries; up
        // to a 2048-token prefill chunk) and the indexer over a 128K context (32K compressed keys) and in a
        // prefill chunk.
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 512, true, false, true, s));
        // An HCA layer's decode (every compressed entry, counted on the device) at 4K, 128K and 1M tokens.
        for (int entries : {32, 1024, 8192})
            for (bool packed : {false, true})
                out.push_back(attention_case(1, 64, 512, 128, Comp::count, entries, true, false, true, s, Mode::F32,
                                             false, false, packed));
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::F32, false, false, true));
        // The same decode calls in the bf16 mode (the tensor-core kernel with splits; --perf also times the f32
        // kernels on them, forced), on a quant-sim cache's packed rows, with the output's RoPE as V4 asks.
        out.push_back(attention_case(1, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::BF16, true, false, true));
        out.push_back(attention_case(1, 64, 512, 128, Comp::none, 0, true, false, true, s, Mode::BF16, true));
        for (int entries : {32, 1024, 8192})
            out.push_back(attention_case(1, 64, 512, 128, Comp::count, entries, true, false, true, s, Mode::BF16, true,
                                         false, true));
        // A short prompt's chunk (32 queries: a few splits each).
        out.push_back(attention_case(32, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::BF16, true, false,
                                     true));
        out.push_back(attention_case(2048, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::BF16, false, false,
                                     true));
        out.push_back(attention_case(64, 64, 512, 128, Comp::idx, 512, true, false, true, s));
        out.push_back(attention_case(64, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::F32, true, true));
        out.push_back(indexer_case(64, 64, 128, 1024, 512, false, true, s, true));
        out.push_back(attention_case(2048, 64, 512, 128, Comp::idx, 512, true, false, true, s));
        out.push_back(attention_case(2048, 64, 512, 128, Comp::idx, 512, true, false, true, s, Mode::BF16));
        out.push_back(indexer_case(1, 64, 128, 32768, 512, false, true, s));
        out.push_back(indexer_case(8, 64, 128, 32768, 2048, false, true, s));
        out.push_back(indexer_case(512, 64, 128, 2048, 512, false, true, s));  // prefill: a block per query
        // The same on packed FP4 keys, and the 1M-token context's 262,144 keys.
        out.push_back(indexer_case(64, 64, 128, 1024, 512, false, true, s, true, true));
        out.push_back(indexer_case(1, 64, 128, 32768, 512, false, true, s, false, true));
        out.push_back(indexer_case(512, 64, 128, 2048, 512, false, true, s, false, true));
        out.push_back(indexer_case(1, 64, 128, 262144, 512, false, true, s));
        out.push_back(indexer_case(1, 64, 128, 262144, 512, false, true, s, false, true));
    }
}

}  // namespace dsv4::backend_ops
