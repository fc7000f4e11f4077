#include "model/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/gguf.h"

namespace dsv4 {

namespace {

constexpr std::string_view kSums = ".in_sum2";
constexpr std::string_view kCounts = ".counts";

}  // namespace

Result<std::unique_ptr<Imatrix>> Imatrix::open(const std::string& path) {
    auto f = GgufFile::open(path);
    if (!f.ok()) return make_error("imatrix: " + f.error() + " (the GGUF imatrix format is read, not the legacy .dat)");
    std::unique_ptr<Imatrix> im(new Imatrix());
    im->path_ = path;
    for (const GgufTensor& t : (*f)->tensors()) {
        if (t.name.size() <= kSums.size() || t.name.compare(t.name.size() - kSums.size(), kSums.size(), kSums) != 0)
            continue;
        const std::string base = t.name.substr(0, t.name.size() - kSums.size());
        const std::string where = "imatrix '" + path + "', tensor '" + t.name + "'";
        const GgufTensor* c = (*f)->tensor(base + std::string(kCounts));
        if (!c) return make_error(where + " has no '" + base + std::string(kCounts) + "'");
        if (t.type != GgmlType::F32 || c->type != GgmlType::F32 || t.n_dims > 2)
            return make_error(where + ": in_sum2 and counts must be F32, in_sum2 [columns, matrices]");
        Entry e;
        e.n_cols = t.ne[0];
        e.n_mat = t.ne[1];
        if (c->n_elems() != e.n_mat)
            return make_error(where + ": " + std::to_string(c->n_elems()) + " counts for " + std::to_string(e.n_mat) +
                              " matrices");
        e.values.resize((size_t)(e.n_cols * e.n_mat));
        e.counted.resize((size_t)e.n_mat);
        std::vector<float> counts((size_t)e.n_mat);
        std::memcpy(counts.data(), c->data, counts.size() * 4);
        std::memcpy(e.values.data(), t.data, e.values.size() * 4);
        for (int64_t m = 0; m < e.n_mat; ++m) {
            e.counted[(size_t)m] = counts[(size_t)m] > 0;
            const float inv = counts[(size_t)m] > 0 ? 1.0f / counts[(size_t)m] : 0.0f;
            for (int64_t k = 0; k < e.n_cols; ++k) {
                float& v = e.values[(size_t)(m * e.n_cols + k)];
                if (!(v >= 0) || !std::isfinite(v))
                    return make_error(where + ": holds " + std::to_string(v) + ", not a sum of squares");
                v *= inv;
            }
        }
        im->entries_.emplace(base, std::move(e));
    }
    if (im->entries_.empty()) return make_error("imatrix '" + path + "' holds no <tensor>.in_sum2 tensors");
    return im;
}

Result<const float*> Imatrix::weights(const std::string& tensor, int64_t n_cols, int64_t n_mat, int64_t mat) const {
    auto it = entries_.find(tensor);
    if (it == entries_.end()) return (const float*)nullptr;
    const Entry& e = it->second;
    if (e.n_cols != n_cols || e.n_mat != n_mat)
        return make_error("imatrix '" + path_ + "': '" + tensor + "' has " + std::to_string(e.n_cols) + " columns x " +
                          std::to_string(e.n_mat) + " matrices, the model's tensor " + std::to_string(n_cols) + " x " +
                          std::to_string(n_mat));
    if (!e.counted[(size_t)mat]) return (const float*)nullptr;
    return e.values.data() + mat * n_cols;
}

}  // namespace dsv4
