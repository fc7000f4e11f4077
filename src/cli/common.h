// Shared pieces of the subcommands: error exit, and the --device/--threads options with backend creation.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "core/status.h"
#include "ops/backend.h"

namespace dsv4::cli {

// Print "dsv4: <message>" to stderr and return exit code 1.
inline int fail(const std::string& message) {
    std::fprintf(stderr, "dsv4: %s\n", message.c_str());
    return 1;
}

struct DeviceOptions {
    std::string device = "auto";  // auto | cpu | cuda
    int threads = 0;              // CPU threads (0 = all cores)
};

void add_device_options(CLI::App& app, DeviceOptions& d);
// The backend the options ask for: "auto" picks CUDA when built with it and a GPU is present, else CPU.
Result<std::unique_ptr<Backend>> make_backend(const DeviceOptions& d);

}  // namespace dsv4::cli
