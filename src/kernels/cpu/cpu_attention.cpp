// CPU sparse attention with sinks over per-query KV index lists (then the output's inverse RoPE, when asked, by
// the rope op itself), and the lightning indexer's top-k.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_dot.h"
#include "ops/fp4_rows.h"
#include "ops/kv_rows.h"

namespace dsv4 {

namespace {

// The per-query source tables' contract (ops/backend.h): a pointer for every query, 16-byte aligned when
// head_dim % 4 == 0 (the CUDA kernels' vector loads rely on it; checked here, on the oracle).
template <class P>
void check_row_table(P const* rows, int64_t n, int head_dim, const char* what) {
    if (!rows) return;
    for (int64_t i = 0; i < n; ++i) {
        DSV4_CHECK_MSG(rows[i], "%s: the table has no pointer for row %lld", what, (long long)i);
        DSV4_CHECK_MSG(head_dim % 4 != 0 || reinterpret_cast<uintptr_t>(rows[i]) % 16 == 0,
                       "%s: row %lld's pointer is not 16-byte aligned", what, (long long)i);
    }
}

}  // namespace

void CpuBackend::attention(const AttentionArgs& a) {
    const int H = a.n_heads, hd = a.head_dim;
    check_row_table(a.kv_win_rows, a.n, hd, "attention: kv_win_rows");
    if (a.kv_comp) check_row_table(a.kv_comp_rows, a.n, hd, "attention: kv_comp_rows");
    DSV4_CHECK_MSG(!a.comp_packed || (a.comp_rope >= 0 && a.comp_rope < hd),
                   "attention: packed rows of %d values with %d RoPE dims", hd, a.comp_rope);
    // Each query's compressed rows as f32. Packed rows (ops/kv_rows.h) are unpacked first to the very floats they
    // hold: each source once, up to the last row its queries read.
    std::vector<const float*> comp_src((size_t)(a.kv_comp ? a.n : 0));
    for (int64_t i = 0; i < (int64_t)comp_src.size(); ++i) comp_src[i] = attention_comp_src(a, i);
    std::vector<std::vector<float>> unpacked;
    if (a.kv_comp && a.comp_packed) {
        std::map<const float*, int64_t> rows_of;  // source -> rows its queries read
        for (int64_t i = 0; i < a.n; ++i) {
            int64_t need = 0;
            if (a.comp_idx) {
                for (int c = 0; c < a.n_comp; ++c) need = std::max<int64_t>(need, a.comp_idx[i * a.n_comp + c] + 1);
            } else {
                need = a.comp_count[i];
            }
            int64_t& r = rows_of[comp_src[i]];
            r = std::max(r, need);
        }
        const int64_t rf = kv_row_floats(hd, a.comp_rope);
        std::map<const float*, const float*> unpacked_of;
        for (const auto& [src, rows] : rows_of) {
            std::vector<float>& v = unpacked.emplace_back((size_t)(rows * hd));
            pool_.parallel_for(rows, 64, [&](int64_t b, int64_t e, int) {
                for (int64_t r = b; r < e; ++r)
                    kv_unpack_row(reinterpret_cast<const uint8_t*>(src + r * rf), hd, a.comp_rope, v.data() + r * hd);
            });
            unpacked_of[src] = v.data();
        }
        for (const float*& p : comp_src) p = unpacked_of[p];
    }
    pool_.parallel_for(a.n * H, 1, [&](int64_t b, int64_t e, int) {
        std::vector<const float*> rows;
        std::vector<float> scores;
        for (int64_t task = b; task < e; ++task) {
            const int64_t i = task / H;
            const int h = (int)(task % H);
            rows.clear();
            const float* kv_win = attention_win_src(a, i);
            for (int w = 0; w < a.n_win; ++w) {
                const int32_t r = a.win_idx[i * a.n_win + w];
                if (r >= 0) rows.push_back(kv_win + (int64_t)r * hd);
            }
            if (a.kv_comp) {
                const float* kv_comp = comp_src[i];
                if (a.comp_idx) {
                    for (int c = 0; c < a.n_comp; ++c) {
                        const int32_t r = a.comp_idx[i * a.n_comp + c];
                        if (r >= 0) rows.push_back(kv_comp + (int64_t)r * hd);
                    }
                } else {
                    for (int32_t r = 0; r < a.comp_count[i]; ++r) rows.push_back(kv_comp + (int64_t)r * hd);
                }
            }
            const float* q = a.q + (i * H + h) * hd;
            float* o = a.out + (i * H + h) * hd;
            scores.resize(rows.size());
            float m = -INFINITY;
            for (size_t t = 0; t < rows.size(); ++t) {
                scores[t] = dot_f32(q, rows[t], hd) * a.scale;
                m = std::max(m, scores[t]);
            }
            // The sink joins the denominator only; the max is over the scores (exp of the sink uses it too).
            float l = 0;
            for (size_t t = 0; t < rows.size(); ++t) {
                scores[t] = std::exp(scores[t] - m);
                l += scores[t];
            }
            if (a.sinks) l += std::exp(a.sinks[h] - m);
            std::fill(o, o + hd, 0.0f);
            if (rows.empty()) continue;
            for (size_t t = 0; t < rows.size(); ++t) {
                const float pw = scores[t];
                const float* kv = rows[t];
                for (int d = 0; d < hd; ++d) o[d] += pw * kv[d];
            }
            const float inv = 1.0f / l;
            for (int d = 0; d < hd; ++d) o[d] *= inv;
        }
    });
    if (a.out_rope.freqs) {
        DSV4_CHECK_MSG(a.pos, "attention: the output's RoPE needs the queries' positions");
        rope(a.out, a.n, H, hd, (int64_t)H * hd, a.pos, a.out_rope, true);
    }
}

void CpuBackend::indexer_topk(int32_t* idx, const float* q, const float* w, const float* query_keys,
                              const int32_t* n_visible, int64_t n, int n_heads, int head_dim, int top_k,
                              const float* const* key_rows, bool fp4_keys) {
    check_row_table(key_rows, n, head_dim, "indexer_topk: key_rows");
    DSV4_CHECK_MSG(!fp4_keys || head_dim % kFp4Block == 0,
                   "indexer_topk: packed FP4 keys need a head dim that is a multiple of %d, not %d", kFp4Block,
                   head_dim);
    // Packed keys are unpacked to the very floats the quant-sim rounding made (ops/fp4_rows.h): the shared
    // source once for every query, a per-query source (key_rows) by its query.
    const int64_t packed_floats = fp4_row_floats(head_dim);
    auto unpack = [&](const float* packed, int64_t rows, float* out) {
        for (int64_t t = 0; t < rows; ++t)
            fp4_unpack_row(reinterpret_cast<const uint8_t*>(packed + t * packed_floats), head_dim, out + t * head_dim);
    };
    std::vector<float> shared_keys;
    if (fp4_keys && !key_rows) {
        int64_t rows = 0;
        for (int64_t i = 0; i < n; ++i) rows = std::max<int64_t>(rows, n_visible[i]);
        shared_keys.resize((size_t)(rows * head_dim));
        pool_.parallel_for(rows, 256, [&](int64_t b, int64_t e, int) {
            unpack(query_keys + b * packed_floats, e - b, shared_keys.data() + b * head_dim);
        });
        query_keys = shared_keys.data();
    }
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        std::vector<float> score, own_keys;
        std::vector<int32_t> order;
        for (int64_t i = b; i < e; ++i) {
            const float* keys = key_rows ? key_rows[i] : query_keys;
            const int32_t nv = n_visible[i];
            if (fp4_keys && key_rows) {
                own_keys.resize((size_t)nv * head_dim);
                unpack(keys, nv, own_keys.data());
                keys = own_keys.data();
            }
            score.resize(nv);
            for (int32_t t = 0; t < nv; ++t) {
                const float* kt = keys + (int64_t)t * head_dim;
                float s = 0;
                for (int h = 0; h < n_heads; ++h) {
                    const float d = dot_f32(q + (i * n_heads + h) * head_dim, kt, head_dim);
                    s += std::max(d, 0.0f) * w[i * n_heads + h];
                }
                score[t] = s;
            }
            const int k = std::min<int>(top_k, nv);
            order.resize(nv);
            std::iota(order.begin(), order.end(), 0);
            // Descending score; ties to the lower index so the choice is deterministic.
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
                return score[x] > score[y] || (score[x] == score[y] && x < y);
            });
            int32_t* out = idx + i * top_k;
            for (int j = 0; j < top_k; ++j) out[j] = j < k ? order[j] : -1;
        }
    });
}

}  // namespace dsv4
