// MTP sidecars: the MTP block shipped as its own GGUF beside the main file, as some conversions publish it
// (`dsv4 convert --mtp separate` writes one too). Finding one next to the main file, telling an MTP sidecar
// from a DSpark draft head (architecture `dflash`), and checking that its hyperparameters are the main
// model's, so the block can run on the main model's streams, embedding and LM head.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace dsv4 {

class GgufFile;

// The GGUF files in main_path's folder whose name contains "mtp" (any case), other than the main file
// itself and the second and later parts of split sets, sorted by name. When several are found, those whose
// name starts with the main file's stem (its name without ".gguf" and a split suffix) come alone.
std::vector<std::string> mtp_sidecar_candidates(const std::string& main_path);

// The block index of the first `blk.N.nextn.*` tensor of `f`, or -1 when it has none.
int mtp_block_index(const GgufFile& f);

// The config under which the MTP block of `side` is bound: the sidecar's own keys (architecture
// `deepseek4`), each hyperparameter the block depends on equal to the main model's, and its MTP block at
// blk.{main.n_layer}. Errors name the mismatching key or tensor; a DSpark draft head is refused as such.
Result<ModelConfig> mtp_sidecar_config(const GgufFile& side, const ModelConfig& main);

// The refusal for a DSpark draft head file, or "" when `f` is not one (architecture `dflash`).
std::string dflash_refusal(const GgufFile& f);

}  // namespace dsv4
