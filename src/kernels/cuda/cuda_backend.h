// The CUDA backend's public entry points: plain C++ (no CUDA headers), so the CLI and tests can include it
// whether or not they are compiled by nvcc. The backend itself is declared in cuda_backend_impl.cuh.
#pragma once

#include <memory>

#include "core/status.h"
#include "ops/backend.h"

namespace dsv4 {

// True when the CUDA runtime finds at least one usable device (false without a driver or GPU).
bool cuda_device_available();

// A backend running every op on CUDA device `device`; an error when that device cannot be used.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

}  // namespace dsv4
