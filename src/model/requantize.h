// Requantize a GGUF: every tensor gets the type quant_recipe.h selects; tensors that keep their type are
// copied byte for byte, the others are dequantized row by row to f32 and quantized again on the thread pool,
// a bounded chunk of rows at a time. Metadata is copied as it is (general.file_type is dropped: the mix is
// per tensor). Written through the GGUF writer's temporary name, so a failed run leaves no file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "model/quant_recipe.h"

namespace dsv4 {

class Imatrix;

struct RequantizeOptions {
    QuantSelection selection;
    const Imatrix* imatrix = nullptr;  // importance weights for the types that take them (format/quant.h)
    int threads = 1;
    std::function<void(const std::string&)> note;
    std::function<void(uint64_t, uint64_t)> progress;
};

Status requantize_gguf(const std::string& in_path, const std::string& out_path, const RequantizeOptions& o);

}  // namespace dsv4
