// Opens a checkpoint folder: the index's weight_map names a shard per tensor; every shard it names must exist
// and hold exactly the tensors the index gives it, so a missing shard or a stale index is an error before
// anything is written.
#include "model/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dsv4 {

namespace fs = std::filesystem;

Result<nlohmann::ordered_json> read_json_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("cannot open " + in_quotes(path));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return make_error(in_quotes(path) + " is not valid JSON");
    return j;
}

HfTensorRef HfCheckpoint::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? HfTensorRef{} : it->second;
}

Result<std::unique_ptr<HfCheckpoint>> HfCheckpoint::open(const std::string& dir) {
    std::unique_ptr<HfCheckpoint> ck(new HfCheckpoint());
    ck->dir_ = dir;
    const fs::path root(dir);
    if (!fs::is_directory(root)) return make_error(in_quotes(dir) + " is not a folder");
    DSV4_ASSIGN_OR_RETURN(ck->config_, read_json_file((root / "config.json").string()));
    if (!ck->config_.is_object()) return make_error(in_quotes((root / "config.json").string()) + " is not a JSON object");

    // weight_map: tensor name -> shard file name (a single-file checkpoint has no index). Parsed into a sorted
    // object: an ordered one checks each insert against every key, quadratic in a checkpoint's ~50k names.
    std::vector<std::pair<std::string, std::string>> weight_map;
    const fs::path index_path = root / "model.safetensors.index.json";
    const bool single = !fs::exists(index_path) && fs::exists(root / "model.safetensors");
    if (!single) {
        std::ifstream in(index_path, std::ios::binary);
        if (!in) return make_error("cannot open " + in_quotes(index_path.string()));
        std::stringstream ss;
        ss << in.rdbuf();
        nlohmann::json index = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
        if (index.is_discarded()) return make_error(in_quotes(index_path.string()) + " is not valid JSON");
        auto wm = index.is_object() ? index.find("weight_map") : index.end();
        if (wm == index.end() || !wm->is_object())
            return make_error(in_quotes(index_path.string()) + " has no weight_map object");
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it.value().is_string())
                return make_error(in_quotes(index_path.string()) + ": weight_map entry '" + it.key() + "' is not a file name");
            const std::string shard = it.value().get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
                return make_error(in_quotes(index_path.string()) + ": tensor '" + it.key() + "' names shard '" + shard +
                                  "', not a file in the checkpoint folder");
            weight_map.emplace_back(it.key(), shard);
        }
    }

    std::map<std::string, size_t> shard_index;
    auto open_shard = [&](const std::string& file) -> Result<size_t> {
        auto it = shard_index.find(file);
        if (it != shard_index.end()) return it->second;
        const std::string path = (root / file).string();
        if (!fs::exists(path)) return make_error("shard '" + path + "' is missing");
        DSV4_ASSIGN_OR_RETURN(auto st, SafetensorsFile::open(path));
        ck->shards_.push_back(std::move(st));
        ck->shard_paths_.push_back(path);
        shard_index[file] = ck->shards_.size() - 1;
        return ck->shards_.size() - 1;
    };

    if (single) {
        DSV4_ASSIGN_OR_RETURN(size_t s, open_shard("model.safetensors"));
        for (const StTensor& t : ck->shards_[s]->tensors()) weight_map.emplace_back(t.name, "model.safetensors");
    }
    // Paths are stored once every shard is open (shard_paths_ must not reallocate under the refs).
    std::vector<std::pair<std::string, size_t>> located;
    for (const auto& [name, file] : weight_map) {
        DSV4_ASSIGN_OR_RETURN(size_t s, open_shard(file));
        located.emplace_back(name, s);
    }
    for (const auto& [name, s] : located) {
        const StTensor* t = ck->shards_[s]->tensor(name);
        if (!t)
            return make_error("tensor '" + name + "' is listed in the index under shard '" + ck->shard_paths_[s] +
                              "', which does not hold it");
        if (!ck->index_.emplace(name, HfTensorRef{t, &ck->shard_paths_[s]}).second)
            return make_error("tensor '" + name + "' is listed twice in the index");
        ck->total_bytes_ += t->n_bytes;
    }
    // Tensor order: shards by file name, each in its data order (the order the checkpoint was written in).
    std::vector<size_t> by_file(ck->shards_.size());
    for (size_t i = 0; i < by_file.size(); ++i) by_file[i] = i;
    std::sort(by_file.begin(), by_file.end(), [&](size_t a, size_t b) { return ck->shard_paths_[a] < ck->shard_paths_[b]; });
    for (size_t s : by_file)
        for (const StTensor& t : ck->shards_[s]->tensors())
            if (ck->index_.count(t.name)) ck->names_.push_back(t.name);
    for (size_t s = 0; s < ck->shards_.size(); ++s)
        for (const StTensor& t : ck->shards_[s]->tensors())
            if (!ck->index_.count(t.name))
                return make_error("shard '" + ck->shard_paths_[s] + "' holds tensor '" + t.name +
                                  "', which the index does not list");
    return ck;
}

}  // namespace dsv4
