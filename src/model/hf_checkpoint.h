// A Hugging Face checkpoint folder as deepseek-ai publishes it: config.json, model.safetensors.index.json
// (or one model.safetensors) and the shards it names, each memory-mapped. Tensors are found by their
// official module names; the index's order is kept (it is the order the converter writes them in).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/safetensors.h"

namespace dsv4 {

struct HfTensorRef {
    const StTensor* tensor = nullptr;
    const std::string* shard = nullptr;  // the shard's path, for error messages
};

class HfCheckpoint {
public:
    static Result<std::unique_ptr<HfCheckpoint>> open(const std::string& dir);

    const std::string& dir() const { return dir_; }
    const nlohmann::ordered_json& config() const { return config_; }
    // Every tensor name, in the index's order.
    const std::vector<std::string>& names() const { return names_; }
    // The tensor, or null if the checkpoint has none of that name.
    HfTensorRef find(std::string_view name) const;
    uint64_t total_bytes() const { return total_bytes_; }

private:
    HfCheckpoint() = default;
    std::string dir_;
    nlohmann::ordered_json config_;
    std::vector<std::string> names_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<std::string> shard_paths_;
    std::map<std::string, HfTensorRef, std::less<>> index_;
    uint64_t total_bytes_ = 0;
};

// 'text' in single quotes, for error messages. (Built by appending: GCC 12 reports a false -Wrestrict for
// "'" + std::string temporaries once inlined.)
inline std::string in_quotes(std::string_view text) { return std::string("'").append(text).append("'"); }

// Read a whole JSON file (config.json, tokenizer.json): an error names the file.
Result<nlohmann::ordered_json> read_json_file(const std::string& path);

}  // namespace dsv4
