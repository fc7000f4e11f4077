// What `dsv4 bench` divides its times by: the weight bytes one decoded token reads and the arithmetic a
// prefill does, both counted from the model's shapes (nothing assumed about V4-Flash).
#pragma once

#include <cstdint>

#include "model/deepseek4.h"

namespace dsv4::cli {

// Bytes of weights one decoded token reads: every dense matrix once, n_expert_used of the routed experts
// per layer, and the LM head; norms and other small vectors are negligible and left out.
double decode_weight_bytes(const Model& m);

// Bytes of weights one decode step of n sequences (a token each) reads: the dense matrices and the LM head
// once, and per layer the distinct routed experts the batch is expected to touch when each token picks
// n_expert_used of n_expert uniformly (as random weights route): n_expert (1 - (1 - used / n_expert)^n).
double decode_step_weight_bytes(const Model& m, int64_t n);

// Floating-point operations (a multiply-add is 2) of prefilling n tokens from position 0 in chunks of
// `chunk`: every token's matmuls (dense, its n_expert_used routed experts, the mHC mixes), its attention
// (scores and the weighted sum over the window and the compressed entries it attends), the lightning
// indexer's scores over the compressed keys of the CSA layers, and one LM-head row per chunk.
double prefill_flops(const Model& m, int64_t n, int64_t chunk);

}  // namespace dsv4::cli
