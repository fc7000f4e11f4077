// The MoE expert path for a few tokens (decode): see cuda_moe_decode.cu.
#pragma once

#include "ops/backend.h"

namespace dsv4::cuda {

class CudaBackend;

// Runs moe_experts without the grouping pass when n * k is small (two kernels that read exactly the chosen
// experts' rows) and returns true; returns false without launching anything when the case is not one for
// it (many pairs, a weight format or alignment it does not handle, DSV4_GEMV set, DSV4_MOE_DECODE=0).
bool moe_experts_decode(CudaBackend& b, const MoeArgs& a);

}  // namespace dsv4::cuda
