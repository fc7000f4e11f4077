// Shared pieces of the subcommands: error exit, the --tokens file reader, and the --device/--threads/--gemm options
// with backend creation.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/backend.h"

namespace dsv4::cli {

// Print "dsv4: <message>" to stderr and return exit code 1.
inline int fail(const std::string& message) {
    std::fprintf(stderr, "dsv4: %s\n", message.c_str());
    return 1;
}

// A JSON array of token ids (the --tokens file of `logits` and `perplexity`); ids are checked to be
// non-negative int32 values, not against a vocabulary.
Result<std::vector<int32_t>> read_tokens(const std::string& path);

// Range checks that say what is wanted in words: CLI11's PositiveNumber and NonNegativeNumber print their
// floating-point bounds in full (a 300-digit number).
CLI::Validator positive_number();
CLI::Validator non_negative_number();

struct DeviceOptions {
    std::string device = "auto";  // auto | cpu | cuda
    int threads = 0;              // CPU threads (0 = all cores)
    std::string gemm;             // CUDA matmul precision: f32 | bf16 | "" (= $DSV4_GEMM, else f32)
    std::vector<std::string> skip_ops;  // CUDA what-if timing: ops that launch nothing (CudaOptions::skip_ops)
    std::vector<std::string> kernels;   // CUDA kernels forced per op, as OP=KERNEL (CudaOptions::force)
};

void add_device_options(CLI::App& app, DeviceOptions& d);
// The timing options of `bench`: --skip-ops and --kernel.
void add_kernel_options(CLI::App& app, DeviceOptions& d);
// --no-graphs: run every op of a decode step as it is called (StepOptions::graphs off).
void add_no_graphs_flag(CLI::App& app, bool& no_graphs);
// The backend the options ask for: "auto" picks CUDA when built with it and a GPU is present, else CPU.
Result<std::unique_ptr<Backend>> make_backend(const DeviceOptions& d);
// The CUDA matmul precision the options ask for: --gemm, else $DSV4_GEMM, else "f32"; an error for an
// unknown value in the environment. Checked on every backend, applied only by CUDA.
Result<std::string> gemm_precision_name(const DeviceOptions& d);

}  // namespace dsv4::cli
