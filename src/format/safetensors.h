// safetensors reader: memory-maps one file and presents its tensor table. Layout: u64 little-endian header
// length N, N bytes of JSON (an object of name -> {dtype, shape, data_offsets: [begin, end]}, plus an
// optional "__metadata__" object of strings), then the data buffer the offsets point into. Nothing in the
// header is trusted: every error names the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

enum class StDtype : uint8_t {
    BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0,
};
// The dtype's name as safetensors writes it ("BF16", "F8_E4M3").
std::string_view st_dtype_name(StDtype t);
size_t st_dtype_bytes(StDtype t);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;     // PyTorch order: shape.back() is the contiguous dimension
    const uint8_t* data = nullptr;  // inside the mapped file (or the caller's buffer for parse)
    size_t n_bytes = 0;

    int64_t n_elems() const;
    std::string shape_str() const;  // e.g. "[64, 128]"
};

class MappedFile;

class SafetensorsFile {
public:
    static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    // Parse from memory the caller keeps alive (tests, fuzzing).
    static Result<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size,
                                                          std::string name = "<memory>");
    ~SafetensorsFile();

    const std::string& path() const { return path_; }
    // Tensors in ascending data order.
    const std::vector<StTensor>& tensors() const { return tensors_; }
    const StTensor* tensor(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    SafetensorsFile() = default;
    Status parse_header(const uint8_t* data, size_t size);

    std::string path_;
    std::unique_ptr<MappedFile> map_;
    std::vector<StTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4
