// GGUF reader (v2, v3): memory-maps one file or a set of split files and presents one model: typed metadata
// access whose errors name the key, and a tensor table whose every data range was checked to lie inside its
// file. Damaged input yields an Error naming what is wrong; the reader never trusts a length or count.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/ggml_type.h"

namespace dsv4 {

enum class GgufValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
    U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars are held decoded; arrays point into the mapped file (numeric) or hold
// views into it (strings), so a 129k-entry vocabulary costs no copy.
struct GgufValue {
    GgufValueType type = GgufValueType::U8;
    // scalar payloads (the one matching `type` is set; integers also mirrored into i64/u64 when in range)
    uint64_t u64 = 0;
    int64_t i64 = 0;
    double f64 = 0;
    bool b = false;
    std::string_view str;
    // arrays
    GgufValueType elem_type = GgufValueType::U8;
    uint64_t n_elems = 0;
    const uint8_t* elems = nullptr;            // numeric array payload (little-endian, packed)
    std::vector<std::string_view> strs;        // string array payload
};

// "u32", "string", or for arrays "array[f32]": the name used in type-mismatch errors and by `dsv4 inspect`.
std::string gguf_value_type_str(const GgufValue& v);
// A value as one line of text for people (`dsv4 inspect`, error messages): strings quoted with control
// characters escaped and cut after `max_chars`; arrays show their first `max_elems` items and the count.
std::string gguf_value_str(const GgufValue& v, size_t max_elems = 8, size_t max_chars = 120);

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
    const uint8_t* data = nullptr;  // inside the mapped file; null in a header-only file (parse_header)
    size_t n_bytes = 0;
    uint64_t file_offset = 0;       // absolute offset in its file
    uint32_t split = 0;             // which split file holds it
    // False only in a file opened with GgufOpenOptions::keep_unknown_types whose type id (type_id) the engine
    // does not know: then `type` means nothing, n_bytes is 0 and data is null (its size cannot be known).
    bool type_known = true;
    uint32_t type_id = 0;           // the id as stored in the file

    int64_t n_elems() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // Row size in bytes of ne[0] values.
    size_t row_bytes() const;
    std::string shape_str() const;  // e.g. "[4096, 1024]"
};

// How tolerant GgufFile::open is. The defaults are for loading a model.
struct GgufOpenOptions {
    // Keep tensors with a type id the engine does not know (GgufTensor::type_known false) instead of
    // refusing the file, so `dsv4 inspect` can still show everything else. Their data ranges go unchecked.
    bool keep_unknown_types = false;
};

class MappedFile;
struct GgufPart;  // one parsed file, internal to the reader

class GgufFile {
public:
    // Open a file. If it is the first of a split set (`split.count` > 1, name *-00001-of-0000N.gguf), the other
    // parts are opened from the same folder and their tensors merged into one table.
    static Result<std::unique_ptr<GgufFile>> open(const std::string& path, const GgufOpenOptions& options = {});
    // Parse from memory the caller keeps alive (tests, fuzzing). No split handling.
    static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size, std::string name = "<memory>");
    // Parse a header without its data section (GgufWriter::header: metadata and tensor infos), which the file
    // keeps: a model's description whose tensor bytes come from elsewhere (random-weight models built in
    // memory). Every tensor's `data` is null; offsets are checked for alignment and overlap only.
    static Result<std::unique_ptr<GgufFile>> parse_header(std::vector<uint8_t> bytes, std::string name);
    ~GgufFile();

    uint32_t version() const { return version_; }
    const std::string& path() const { return path_; }
    size_t alignment() const { return alignment_; }
    uint32_t n_splits() const { return n_splits_; }
    // Absolute offset of the tensor data section in the first (or only) file.
    uint64_t data_offset() const { return data_offset_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    bool has(std::string_view key) const;
    const GgufValue* find(std::string_view key) const;

    // Typed access; the error names the key and, on a type mismatch, both types. Integer getters accept
    // any integer type whose value fits; get_f32 accepts F32 and F64.
    Result<uint32_t> get_u32(std::string_view key) const;
    Result<uint64_t> get_u64(std::string_view key) const;
    Result<int64_t> get_i64(std::string_view key) const;
    Result<float> get_f32(std::string_view key) const;
    Result<bool> get_bool(std::string_view key) const;
    Result<std::string> get_str(std::string_view key) const;
    Result<std::vector<uint32_t>> get_arr_u32(std::string_view key) const;
    Result<std::vector<int32_t>> get_arr_i32(std::string_view key) const;
    Result<std::vector<float>> get_arr_f32(std::string_view key) const;
    Result<std::vector<std::string_view>> get_arr_str(std::string_view key) const;

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* tensor(std::string_view name) const;

private:
    GgufFile() = default;
    // Adopt the parsed first (or only) file: its metadata becomes the model's.
    Status adopt_first(GgufPart&& part);
    // Append one split part's tensors to the merged table (names must stay unique).
    Status merge_tensors(std::vector<GgufTensor>&& tensors, const std::string& part_name);
    Status open_splits(uint32_t count, const GgufOpenOptions& options);

    std::string path_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    uint32_t n_splits_ = 1;
    uint64_t data_offset_ = 0;
    std::vector<std::unique_ptr<MappedFile>> maps_;
    std::vector<uint8_t> header_;  // parse_header's bytes
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, size_t, std::less<>> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace dsv4
