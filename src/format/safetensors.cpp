// safetensors reader: checks the header length against the file, parses the JSON without exceptions, and
// checks each entry (known dtype, non-negative shape whose byte size matches its offsets, offsets inside the
// data buffer, no two tensors overlapping) before any tensor is handed out.
#include "format/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/mapped_file.h"

namespace dsv4 {

namespace {

// Real headers are a few MB at most (a 1.6 T-parameter checkpoint's shard lists a few thousand tensors);
// the format's own reference rejects headers over 100 MB.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
constexpr int64_t kMaxDims = 8;

struct DtypeInfo {
    StDtype type;
    std::string_view name;
    size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1},       {StDtype::U8, "U8", 1},           {StDtype::I8, "I8", 1},
    {StDtype::U16, "U16", 2},         {StDtype::I16, "I16", 2},         {StDtype::U32, "U32", 4},
    {StDtype::I32, "I32", 4},         {StDtype::U64, "U64", 8},         {StDtype::I64, "I64", 8},
    {StDtype::F16, "F16", 2},         {StDtype::BF16, "BF16", 2},       {StDtype::F32, "F32", 4},
    {StDtype::F64, "F64", 8},         {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::F8_E8M0, "F8_E8M0", 1},
};

const DtypeInfo* dtype_by_name(std::string_view name) {
    for (const DtypeInfo& d : kDtypes)
        if (d.name == name) return &d;
    return nullptr;
}

// A JSON value as a non-negative integer (rejects negatives, fractions and floats beyond 2^63).
bool as_u64(const nlohmann::json& v, uint64_t& out) {
    if (v.is_number_unsigned()) {
        out = v.get<uint64_t>();
        return true;
    }
    if (v.is_number_integer()) {
        const int64_t i = v.get<int64_t>();
        if (i < 0) return false;
        out = (uint64_t)i;
        return true;
    }
    return false;
}

}  // namespace

std::string_view st_dtype_name(StDtype t) {
    for (const DtypeInfo& d : kDtypes)
        if (d.type == t) return d.name;
    return "?";
}

size_t st_dtype_bytes(StDtype t) {
    for (const DtypeInfo& d : kDtypes)
        if (d.type == t) return d.bytes;
    return 0;
}

int64_t StTensor::n_elems() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string StTensor::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

SafetensorsFile::~SafetensorsFile() = default;

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    DSV4_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    DSV4_TRY(f->parse_header(map->data(), map->size()));
    f->map_ = std::move(map);
    return f;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size, std::string name) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = std::move(name);
    DSV4_TRY(f->parse_header(data, size));
    return f;
}

const StTensor* SafetensorsFile::tensor(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::parse_header(const uint8_t* data, size_t size) {
    const std::string where = "safetensors file '" + path_ + "'";
    if (size < 8) return make_error(where + ": " + std::to_string(size) + " bytes, too short for the header length");
    uint64_t header_len = 0;
    std::memcpy(&header_len, data, 8);
    if (header_len > size - 8)
        return make_error(where + ": header length " + std::to_string(header_len) + " runs past the end of the " +
                          std::to_string(size) + "-byte file (truncated or not a safetensors file)");
    if (header_len > kMaxHeaderBytes)
        return make_error(where + ": header length " + std::to_string(header_len) + " is over the 100 MB limit");
    if (header_len < 2 || data[8] != '{')
        return make_error(where + ": the header is not a JSON object");
    const uint8_t* head = data + 8;
    const uint8_t* buffer = head + header_len;
    const uint64_t buffer_bytes = size - 8 - header_len;

    nlohmann::json j = nlohmann::json::parse(head, buffer, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return make_error(where + ": the header is not valid JSON");

    struct Range {
        uint64_t begin, end;
        size_t index;
    };
    std::vector<Range> ranges;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& e = it.value();
        if (name == "__metadata__") {
            if (!e.is_object()) return make_error(where + ": __metadata__ is not an object");
            for (auto m = e.begin(); m != e.end(); ++m)
                if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
            continue;
        }
        const std::string tn = where + ", tensor '" + name + "'";
        if (!e.is_object()) return make_error(tn + ": the entry is not an object");
        auto dt = e.find("dtype");
        auto sh = e.find("shape");
        auto off = e.find("data_offsets");
        if (dt == e.end() || !dt->is_string()) return make_error(tn + ": no dtype string");
        if (sh == e.end() || !sh->is_array()) return make_error(tn + ": no shape array");
        if (off == e.end() || !off->is_array() || off->size() != 2)
            return make_error(tn + ": data_offsets is not a [begin, end] pair");
        const DtypeInfo* info = dtype_by_name(dt->get_ref<const std::string&>());
        if (!info) return make_error(tn + ": unknown dtype '" + dt->get<std::string>() + "'");
        if ((int64_t)sh->size() > kMaxDims)
            return make_error(tn + ": " + std::to_string(sh->size()) + " dimensions (at most 8)");
        StTensor t;
        t.name = name;
        t.dtype = info->type;
        uint64_t n_bytes = info->bytes;
        for (const nlohmann::json& d : *sh) {
            uint64_t v = 0;
            if (!as_u64(d, v) || v > (uint64_t(1) << 62))
                return make_error(tn + ": shape holds " + d.dump() + ", not a dimension");
            if (__builtin_mul_overflow(n_bytes, v, &n_bytes)) return make_error(tn + ": shape is too large");
            t.shape.push_back((int64_t)v);
        }
        uint64_t begin = 0, end = 0;
        if (!as_u64((*off)[0], begin) || !as_u64((*off)[1], end) || begin > end)
            return make_error(tn + ": data_offsets " + off->dump() + " are not an ordered pair of offsets");
        if (end > buffer_bytes)
            return make_error(tn + ": data_offsets " + off->dump() + " run past the " + std::to_string(buffer_bytes) +
                              "-byte data buffer (truncated file?)");
        if (end - begin != n_bytes)
            return make_error(tn + ": " + std::string(info->name) + " " + t.shape_str() + " needs " +
                              std::to_string(n_bytes) + " bytes but data_offsets give " + std::to_string(end - begin));
        t.data = buffer + begin;
        t.n_bytes = (size_t)n_bytes;
        ranges.push_back({begin, end, tensors_.size()});
        tensors_.push_back(std::move(t));
    }
    // Tensors in data order; overlapping byte ranges mean a lying header.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::vector<StTensor> ordered;
    ordered.reserve(tensors_.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
        if (i > 0 && ranges[i].begin < ranges[i - 1].end)
            return make_error(where + ": tensors '" + tensors_[ranges[i - 1].index].name + "' and '" +
                              tensors_[ranges[i].index].name + "' overlap");
        ordered.push_back(std::move(tensors_[ranges[i].index]));
    }
    tensors_ = std::move(ordered);
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
    return {};
}

}  // namespace dsv4
