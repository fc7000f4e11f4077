// Which ggml type each tensor of a deepseek4 GGUF gets when requantized: one base type for every weight
// matrix (--type) or a named recipe (the popular DeepSeek-V4 mixes, ../shared/spec/gguf_deepseek4.md §4.1),
// then per-tensor overrides (REGEX=TYPE, first match wins). Vectors, integer tensors and the small F32
// mixers (hc_*, compressor ape) and the router are kept as they are: they are tiny and precision-critical.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/ggml_type.h"
#include "format/gguf.h"

namespace dsv4 {

struct QuantRecipe {
    std::string name;
    const char* help;
    GgmlType expert_gate_up, expert_down, dense;
};

// The named recipes, for --recipe and its help text.
const std::vector<QuantRecipe>& quant_recipes();
Result<QuantRecipe> find_quant_recipe(const std::string& name);

struct QuantOverride {
    std::string pattern;
    std::regex re;
    GgmlType type;
};
// Parse "REGEX=TYPE" (the type by its ggml name, any case).
Result<QuantOverride> parse_quant_override(const std::string& spec);

struct QuantSelection {
    std::optional<GgmlType> base;       // --type
    std::optional<QuantRecipe> recipe;  // --recipe
    std::vector<QuantOverride> overrides;
};

// The role of a deepseek4 tensor by its name, for `dsv4 inspect`'s mix summary: "expert gate/up",
// "expert down", "shared expert", "attention", "indexer", "compressor", "router", "embedding", "output",
// "hyper-connection", or "norm/other".
const char* tensor_role(const std::string& name);

// The type `t` gets. `note` receives why a wanted type was replaced (rows not a multiple of its block size:
// K and IQ types fall back to Q8_0, as llama.cpp's quantizer does, when the rows hold whole 32-blocks).
GgmlType select_quant_type(const GgufTensor& t, const QuantSelection& sel, std::string* note);

}  // namespace dsv4
