// The model the engine, scoring and grammar tests run on: the "tiny" synthetic preset with the real
// tokenizer's vocabulary (fixtures/tokenizer/deepseek_v3), written to a temporary GGUF and loaded on a CPU
// backend of 2 threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "model/deepseek4.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::test {

struct TinyModel {
    std::string path;  // the GGUF written; removed with the model
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    ~TinyModel();
};

// `name` makes the temporary file's name (with the process id); `seed` the weights.
Result<std::unique_ptr<TinyModel>> make_tiny_model(const std::string& name, uint64_t seed);

}  // namespace dsv4::test
