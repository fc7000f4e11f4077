// Random-weight DeepSeek-V4 GGUF generator (`dsv4 synth`, benchmarks, server tests): the exact metadata keys
// and tensor names/shapes of real files, with random weights scaled so activations stay O(1). Tensors are
// generated and quantized row chunk by row chunk inside the writer's producer callbacks, so memory stays
// bounded whatever the file size; the bytes depend only on the seed (not on the thread count). The same
// model can be built straight into backend memory, without a file (synth_model, `dsv4 bench --synth`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/ggml_type.h"
#include "format/gguf.h"
#include "model/weights.h"

namespace dsv4 {

class GgufWriter;
class Model;

// Every hyperparameter the file's metadata carries. A preset fills it; callers may edit it before writing.
struct SynthHparams {
    std::string name;            // general.name
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int n_layer = 0;             // main blocks
    bool mtp = true;             // one MTP block at blk.{n_layer}
    int64_t n_ctx_train = 0;

    int n_head = 0;
    int head_dim = 0;
    int rope_dim = 0;
    int q_lora_rank = 0;
    int o_lora_rank = 0;
    int o_groups = 0;
    int window = 0;
    std::vector<int> compress_ratios;  // one per main block (the MTP block's trailing 0 is added on write)
    float rope_freq_base = 10000.0f;
    float compress_rope_freq_base = 160000.0f;
    float norm_eps = 1e-6f;
    float rope_scaling_factor = 16.0f;
    int64_t rope_orig_ctx = 65536;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;

    int index_n_head = 0;
    int index_head_dim = 0;
    int index_top_k = 0;

    int n_expert = 0;
    int n_expert_used = 0;
    int n_expert_shared = 1;
    int64_t n_ff_exp = 0;
    float expert_weights_scale = 1.0f;
    int hash_layer_count = 0;
    float swiglu_clamp = 10.0f;

    int hc = 0;
    int hc_sinkhorn_iters = 20;
    float hc_eps = 1e-6f;

    int n_blocks() const { return n_layer + (mtp ? 1 : 0); }
    int ratio(int block) const { return block < (int)compress_ratios.size() ? compress_ratios[block] : 0; }
};

// The preset names accepted by synth_preset ("tiny", "flash", "pro").
const std::vector<std::string>& synth_preset_names();
// A preset's hyperparameters. n_layer > 0 overrides the main layer count; the compress ratios follow the
// preset's pattern (truncated or extended). Unknown preset -> error naming it.
Result<SynthHparams> synth_preset(std::string_view preset, int n_layer = 0);
// Check the shapes are buildable (ranks positive, heads divisible by groups, rope_dim <= head_dim, ...).
Status synth_validate(const SynthHparams& hp);

// Storage types per tensor class. Defaults follow the files people run (antirez's IQ2_XXS/Q2_K mix).
struct SynthTypes {
    GgmlType expert_gate_up = GgmlType::IQ2_XXS;  // ffn_gate_exps, ffn_up_exps
    GgmlType expert_down = GgmlType::Q2_K;        // ffn_down_exps
    GgmlType dense = GgmlType::Q8_0;              // every other 2-D matrix except the F16 class below
};

// How a tensor's values are drawn.
enum class SynthFill {
    gaussian,     // N(mean, std^2), stored in the tensor's type
    expert_ids,   // I32 rows of n_expert_used distinct expert ids in [0, n_expert) (tid2eid)
};

// One tensor of the plan: name, storage type, GGUF shape (ne[0] contiguous) and its distribution.
struct SynthTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> ne;
    SynthFill fill = SynthFill::gaussian;
    float mean = 0.0f;
    float std = 0.0f;
    int64_t n_rows() const;       // product of ne[1..]
    uint64_t n_bytes() const;     // ggml_row_bytes(type, ne[0]) * n_rows()
};

// Every tensor of the file in write order (global tensors, blocks, output head, MTP block, then the expert
// stacks). A requested type whose block size does not divide a tensor's rows falls back to Q8_0 or F16
// (as llama-quantize does); each fallback adds one line to `notes` when given.
std::vector<SynthTensor> synth_plan(const SynthHparams& hp, const SynthTypes& types,
                                    std::vector<std::string>* notes = nullptr);

// Can `type` be written by the generator (a quantizer exists, or random valid blocks can be made)?
bool synth_type_supported(GgmlType type);
// A type by its ggml name ("q2_k", "IQ2_XXS") that the generator can write; the error names `what`.
Result<GgmlType> synth_type_named(std::string_view name, const std::string& what);

// Add the `general.*` and `deepseek4.*` metadata keys (the golden files' exact key set) to `w`.
void synth_metadata(GgufWriter& w, const SynthHparams& hp);

// Options of synth_write, synth_source and synth_model alike.
struct SynthWriteOptions {
    uint64_t seed = 0;
    int n_threads = 0;             // 0: ThreadPool::default_threads()
    bool progress = false;         // percent, GB done and GB/s on stderr
    const GgufFile* vocab = nullptr;  // copy its tokenizer.* keys (hp.n_vocab must already match it)
    // Write Q4_0..Q5_1, Q8_0, MXFP4 and K-quant tensors (Q2_K..Q6_K) as random valid blocks, as the IQ/TQ
    // types always are, instead of quantizing Gaussian values: the same bytes per value and the same work to decode, about
    // 100x faster to build (the Q2_K reference quantizer makes ~12 M values per core-second). For benchmarks.
    bool random_quantized = false;
};

// Write the whole file for hp: metadata, then every tensor of synth_plan, streamed.
Status synth_write(const SynthHparams& hp, const SynthTypes& types, const SynthWriteOptions& opt,
                   const std::string& path);

// The model synth_write would write, without the file: `file` is its header (metadata and tensor infos, no
// data: GgufFile::parse_header), `tensors` generates each tensor's bytes on request, identical to the file's.
// Bytes asked for with `keep` are held by the source; others go through one staging buffer, so a load onto a
// GPU backend holds about one tensor in host memory.
struct SynthSource {
    std::unique_ptr<GgufFile> file;
    std::unique_ptr<TensorSource> tensors;
};
Result<SynthSource> synth_source(const SynthHparams& hp, const SynthTypes& types, const SynthWriteOptions& opt);

// A random-weight model built in backend memory: Model::load on synth_source, so its config comes from the
// same metadata and its weights are the same bytes as the file synth_write writes with these arguments.
Result<std::unique_ptr<Model>> synth_model(const SynthHparams& hp, const SynthTypes& types,
                                           const SynthWriteOptions& opt, Backend& backend);

// The token count of a vocabulary GGUF (length of tokenizer.ggml.tokens); error naming the file otherwise.
Result<int64_t> synth_vocab_size(const GgufFile& vocab);

}  // namespace dsv4
