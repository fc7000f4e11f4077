// Shared pieces of the subcommands: error exit, the -m/--mtp model options, the --tokens file reader, and the
// --device/--threads/--gemm options with backend creation.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/deepseek4.h"
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

// A byte count written as a number with an optional K, M, G or T suffix (powers of 1024; "1.5G"), > 0.
Result<size_t> parse_byte_size(const std::string& text);

// -m MODEL and --mtp FILE (an MTP sidecar; without it a sibling *mtp*.gguf is looked for).
struct ModelOptions {
    std::string path;
    std::string mtp;
};
// Adds -m (required unless `required` is false) and --mtp FILE.
void add_model_options(CLI::App& app, ModelOptions& m, bool required = true);
// Load options for `m`: the sidecar it names, else discovery beside the model; notes go to stderr.
ModelLoadOptions model_load_options(const ModelOptions& m);
// Model::load with a progress line on stderr (bytes, rate, ETA; when stderr is a terminal) and then a ready
// line with the load time and rate (always when `report`, else only on a terminal).
Result<std::unique_ptr<Model>> load_model(const ModelOptions& m, Backend& backend, bool report);
// The --mtp help text (shared with `dsv4 logits`, whose --mtp also selects the MTP block's logits).
extern const char* const kMtpHelp;

struct DeviceOptions {
    std::string device = "auto";  // auto | cpu | cuda
    int threads = 0;              // CPU threads (0 = all cores)
    std::string gemm = "auto";    // CUDA matmul precision: auto | f32 | bf16 (gemm_precision_name)
    // What "auto" means: bf16 for the commands that serve users (prefill-sized matmuls on the tensor cores,
    // decode steps on the exact GEMV kernels either way); `logits`, the reference check, sets "f32".
    std::string gemm_auto = "bf16";
    bool exact = false;  // the command runs in exact mode (--exact, --quant-sim off): "auto" is f32
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
// The CUDA matmul precision the options ask for: --gemm f32 or bf16 as given; auto is f32 in exact mode and
// gemm_auto otherwise. Applied only by CUDA (the CPU always computes in f32).
Result<std::string> gemm_precision_name(const DeviceOptions& d);

}  // namespace dsv4::cli
