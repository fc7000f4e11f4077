// Conversion of an official DeepSeek-V4 checkpoint (HF safetensors: BF16, or the release's FP8 E4M3
// projections with 128x128 E8M0 tile scales and FP4 E2M1 routed experts with E8M0 scales per 32) into the
// llama.cpp `deepseek4` GGUF layout (../shared/spec/gguf_deepseek4.md). Lossless by default: BF16/F32 kept,
// FP8 projections dequantized exactly into BF16, FP4 experts repacked bit for bit into MXFP4. Streams one
// tensor at a time from the mapped shards into the writer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/ggml_type.h"

namespace dsv4 {

class GgufWriter;
class HfCheckpoint;

// The model dimensions the converter needs, read from config.json.
struct HfModelDims {
    int n_layer = 0;
    int n_mtp = 0;
    int n_expert = 0;
    int vocab_size = 0;
    int hash_layers = 0;
    int n_embd = 0, n_head = 0, head_dim = 0, q_rank = 0, n_ff = 0, n_used = 0;
    bool fp4_experts = false;  // expert_dtype: fp4
    bool fp8 = false;          // quantization_config: fp8 e4m3 with ue8m0 128x128 tiles
};

// The deepseek4 name of an official tensor name (`layers.3.attn.wq_a.weight` -> `blk.3.attn_q_a.weight`).
// Routed experts map to their stack (`expert` = the index); `.scale` companions map to their weight's name
// with `is_scale`. An unknown name is an error naming it.
struct MappedName {
    std::string gguf;
    int block = -1;   // -1 for global tensors
    int expert = -1;  // routed expert index
    bool is_scale = false;
    bool mtp = false;
};
Result<MappedName> map_official_name(const std::string& name, const HfModelDims& dims);

// Check config.json and write the `general.*` / `deepseek4.*` keys. `with_mtp`: the file holds the MTP
// block(s) (block_count counts them, nextn_predict_layers says how many). Unknown values of keys whose
// meaning the engine fixes (model_type, scoring_func, rope_scaling.type, quantization_config...) are errors
// naming config.json and the key.
Result<HfModelDims> hf_config_to_gguf(const nlohmann::ordered_json& config, const std::string& config_path,
                                      const std::string& model_name, bool with_mtp, GgufWriter& w);

enum class MtpPlacement { main, separate, drop };

struct ConvertOptions {
    std::optional<GgmlType> dense;    // 2-D weight matrices (projections, embedding, head); unset = lossless
    std::optional<GgmlType> experts;  // routed expert stacks; unset = lossless (MXFP4 for FP4, else as stored)
    MtpPlacement mtp = MtpPlacement::main;
    std::string mtp_path;             // for MtpPlacement::separate
    std::string tokenizer_dir;        // folder holding tokenizer.json (default: the checkpoint folder)
    int threads = 1;
    // Informational notes (e.g. no tokenizer.json found); none printed when unset.
    std::function<void(const std::string&)> note;
    // Called after each tensor with the bytes written so far and the total.
    std::function<void(uint64_t, uint64_t)> progress;
};

// Convert the checkpoint at `hf_dir` into `out_path` (and `mtp_path`). Written under a temporary name and
// renamed at the end: on any error no output is left behind.
Status convert_checkpoint(const std::string& hf_dir, const std::string& out_path, const ConvertOptions& opts);

}  // namespace dsv4
