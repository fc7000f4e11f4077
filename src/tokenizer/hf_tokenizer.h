// A Hugging Face tokenizer.json (+ tokenizer_config.json) as the GGUF `tokenizer.ggml.*` keys, laid out as
// llama.cpp's converter writes them for byte-level BPE models: model "gpt2", the pre-tokenizer's name, every
// id's token text (holes up to the model's vocab size as "[PAD<id>]", type unused), token types (added
// special tokens control, other added tokens user-defined), merges as "left right", the special ids and
// add_bos/add_eos flags, and the chat template.
#pragma once

#include <string>

#include "core/status.h"

namespace dsv4 {

class GgufWriter;

// `config_path` may be empty (no tokenizer_config.json): then no chat template, BOS/EOS from the added
// tokens named like DeepSeek's. `vocab_size` is the model's (config.json); 0 means the tokenizer's own.
Status hf_tokenizer_to_gguf(const std::string& tokenizer_path, const std::string& config_path, int vocab_size,
                            GgufWriter& w);

}  // namespace dsv4
