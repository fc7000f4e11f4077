// The DeepSeek-V4 tensors, bound by name with the shapes the config implies. Matrices stay in their block
// format (Weight); small per-channel tensors (norms, sinks, biases, mHC base/scale, compressor ape) are
// converted to f32 and routing tables to int32 at load, since producers store them in varying types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

class GgufFile;
struct GgufTensor;

// Bytes of tensors bound so far, of `total`.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

// Where load_weights takes each tensor's bytes from: the mapped file itself, or a generator (random-weight
// models built in memory, model/synth.h).
class TensorSource {
public:
    virtual ~TensorSource() = default;
    // The t.n_bytes bytes of `t`. With `keep` they must stay valid as long as the source lives (the CPU
    // backend computes on weight bytes in place); without, only until the next call.
    virtual Result<const uint8_t*> bytes(const GgufTensor& t, bool keep) = 0;
    // The loader has taken every tensor it needs: drop working state (threads, staging buffers).
    virtual void finish() {}
};

struct CompressorWeights {
    Weight kv, gate;              // [coff*d, D]
    const float* ape = nullptr;   // [ratio, coff*d]
    const float* norm = nullptr;  // [d]
};

struct LayerWeights {
    // mHC around attention and FFN
    Weight hc_attn_fn, hc_ffn_fn;                        // [(2+hc)*hc, hc*D]
    const float* hc_attn_base = nullptr;                 // [(2+hc)*hc]
    const float* hc_attn_scale = nullptr;                // [3]
    const float* hc_ffn_base = nullptr;
    const float* hc_ffn_scale = nullptr;
    const float* attn_norm = nullptr;                    // [D]
    const float* ffn_norm = nullptr;                     // [D]
    // attention
    Weight q_a;                                          // [q_lora, D]
    const float* q_a_norm = nullptr;                     // [q_lora]
    Weight q_b;                                          // [n_head*head_dim, q_lora]
    Weight kv;                                           // [head_dim, D]
    const float* kv_norm = nullptr;                      // [head_dim]
    Weight out_a;                                        // [o_groups*o_lora, (n_head/o_groups)*head_dim]
    Weight out_b;                                        // [D, o_groups*o_lora]
    const float* sinks = nullptr;                        // [n_head]
    int ratio = 0;
    CompressorWeights compressor;                        // ratio > 0
    // lightning indexer (ratio == 4)
    Weight index_q_b;                                    // [index_n_head*index_head_dim, q_lora]
    Weight index_proj;                                   // [index_n_head, D]
    CompressorWeights index_compressor;
    // MoE
    Weight gate_inp;                                     // [n_expert, D]
    const float* expert_bias = nullptr;                  // [n_expert] (score-routed layers)
    const int32_t* tid2eid = nullptr;                    // [n_vocab, n_expert_used] (hash layers)
    Weight gate_exps, up_exps, down_exps;                // [n_expert] x [F, D] / [D, F]
    int64_t expert_base = 0;  // the stacks' first expert: a rank's share of them (ExpertShard), else 0
    Weight gate_shexp, up_shexp, down_shexp;             // [F_sh, D] / [D, F_sh]
    float clamp_exp = 0, clamp_shexp = 0;
};

struct MtpWeights {
    LayerWeights block;
    Weight e_proj, h_proj;                 // [D, D] each (split from a fused eh_proj [D, 2D] when needed)
    const float* enorm = nullptr;          // [D]
    const float* hnorm = nullptr;          // [D]
    const float* norm = nullptr;           // shared_head_norm [D]
    Weight hc_head_fn;                     // [hc, hc*D]
    const float* hc_head_base = nullptr;   // [hc]
    const float* hc_head_scale = nullptr;  // [1]
};

struct ModelWeights {
    Weight token_embd;                     // [n_vocab, D]
    Weight output;                         // [n_vocab, D]
    const float* output_norm = nullptr;    // [D]
    Weight output_hc_fn;                   // [hc, hc*D]
    const float* output_hc_base = nullptr;
    const float* output_hc_scale = nullptr;
    std::vector<LayerWeights> layers;
    bool has_mtp = false;
    MtpWeights mtp;

    // Backend memory owned by these weights (converted small tensors, device copies); freed by the owner.
    std::vector<void*> owned;
    size_t bytes_matrices = 0;
};

// Which of the routed experts a rank of a model split over `count` ranks holds: the contiguous range
// [n * rank / count, n * (rank + 1) / count) of every layer's n experts (expert parallelism); everything else
// is held whole by every rank.
struct ExpertShard {
    int rank = 0;
    int count = 1;
    int64_t first(int64_t n) const { return n * rank / count; }
    int64_t end(int64_t n) const { return n * (rank + 1) / count; }
};

// Bind every tensor of `f` the config requires. Updates cfg.n_vocab when the file omits vocab_size.
// Errors name the tensor and, for a shape mismatch, both the expected and the found shape.
// `progress` (optional) hears the tensor bytes bound so far of the file's total after every tensor; with it, a
// host backend also reads every page of the mapped file during the load (not during the first prompt).
Result<ModelWeights> load_weights(const GgufFile& f, ModelConfig& cfg, Backend& backend,
                                  const LoadProgress& progress = {}, const ExpertShard& shard = {});
// The same with the tensor bytes taken from `source` (f holds the names, types and shapes).
Result<ModelWeights> load_weights(const GgufFile& f, ModelConfig& cfg, Backend& backend, TensorSource& source,
                                  const LoadProgress& progress = {}, const ExpertShard& shard = {});
// Bind the MTP block of a sidecar file into `w` (which has none), with side_cfg from mtp_sidecar_config
// (model/mtp_sidecar.h): the same names and shape checks as a block inside the main file. The tensors
// point into `side`, which must outlive `w`. On error `w` is left as it was.
Status load_mtp_weights(const GgufFile& side, const ModelConfig& side_cfg, Backend& backend, ModelWeights& w);
void free_weights(ModelWeights& w, Backend& backend);

}  // namespace dsv4
