// An importance matrix in llama.cpp's GGUF imatrix format: for each weight tensor T, `T.in_sum2` (F32,
// ne = [n_cols, n_mat]: the sum of squared activations of each input column, per expert for stacks) and
// `T.counts` (F32, n_mat values: how many activations were summed). The weights of one matrix are the mean
// squared activations in_sum2 / counts; quantizers that take importance weights (the K and IQ types,
// format/quant.h uses_importance) minimize the error they weight.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class Imatrix {
public:
    static Result<std::unique_ptr<Imatrix>> open(const std::string& path);

    const std::string& path() const { return path_; }
    size_t size() const { return entries_.size(); }
    bool has(const std::string& tensor) const { return entries_.count(tensor) != 0; }
    // Weights of matrix `mat` (the expert, 0 for a 2-D tensor) of `tensor`, which has `n_cols` columns and
    // `n_mat` matrices: nullptr when the file has no data for it (absent, or no activations counted); an
    // error when its shape disagrees with the tensor.
    Result<const float*> weights(const std::string& tensor, int64_t n_cols, int64_t n_mat, int64_t mat) const;

private:
    struct Entry {
        int64_t n_cols = 0, n_mat = 0;
        std::vector<float> values;  // [n_mat][n_cols]
        std::vector<bool> counted;  // per matrix
    };
    std::string path_;
    std::map<std::string, Entry> entries_;
};

}  // namespace dsv4
