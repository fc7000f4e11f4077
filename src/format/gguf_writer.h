// GGUF v3 writer: metadata and tensor infos first, then tensor data streamed one tensor at a time, so a
// multi-GB file is written with bounded memory. Used by `dsv4 synth`, tests and later conversion tools.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/ggml_type.h"
#include "format/gguf.h"

namespace dsv4 {

class GgufWriter {
public:
    GgufWriter() = default;

    // Metadata (written in the order added; setting a key again replaces its value in place).
    // `general.alignment` belongs to set_alignment(): a value set or copied under that key is ignored.
    void set_u32(std::string key, uint32_t v);
    void set_i32(std::string key, int32_t v);
    void set_u64(std::string key, uint64_t v);
    void set_f32(std::string key, float v);
    void set_bool(std::string key, bool v);
    void set_str(std::string key, std::string v);
    void set_arr_u32(std::string key, const std::vector<uint32_t>& v);
    void set_arr_i32(std::string key, const std::vector<int32_t>& v);
    void set_arr_f32(std::string key, const std::vector<float>& v);
    void set_arr_str(std::string key, const std::vector<std::string>& v);
    // The remaining GGUF value types, so a writer can produce every type a reader must handle.
    void set_u8(std::string key, uint8_t v);
    void set_i8(std::string key, int8_t v);
    void set_u16(std::string key, uint16_t v);
    void set_i16(std::string key, int16_t v);
    void set_i64(std::string key, int64_t v);
    void set_f64(std::string key, double v);
    void set_arr_u8(std::string key, const std::vector<uint8_t>& v);
    void set_arr_i8(std::string key, const std::vector<int8_t>& v);
    void set_arr_u16(std::string key, const std::vector<uint16_t>& v);
    void set_arr_i16(std::string key, const std::vector<int16_t>& v);
    void set_arr_u64(std::string key, const std::vector<uint64_t>& v);
    void set_arr_i64(std::string key, const std::vector<int64_t>& v);
    void set_arr_f64(std::string key, const std::vector<double>& v);
    void set_arr_bool(std::string key, const std::vector<bool>& v);
    // Copy a metadata value read from another file (e.g. the tokenizer keys of a vocab GGUF).
    void copy_value(std::string key, const GgufValue& v);

    // Declare a tensor. ne[0] is the contiguous dimension. Its bytes come later from the producer callback,
    // which must write exactly ggml_row_bytes(type, ne[0]) * rows bytes.
    using Producer = std::function<Status(std::FILE* out)>;
    Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, Producer produce);
    // Convenience: a tensor whose bytes are already in memory.
    Status add_tensor_data(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);

    // Alignment of the data section and of every tensor (a nonzero power of two; write() checks). Written as
    // `general.alignment` when it differs from GGUF's default of 32.
    void set_alignment(uint32_t a) { alignment_ = a; }

    // The bytes write() puts before the data section: header, metadata and tensor infos, without the padding
    // and the tensor data (GgufFile::parse_header reads them back: a model's description without its weights).
    Result<std::vector<uint8_t>> header() const;

    // Write the whole file: header, metadata, tensor infos, then each tensor's data (aligned) in order.
    // `progress(done_bytes, total_bytes)` is called after each tensor when given.
    Status write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress = {}) const;

private:
    struct Kv {
        std::string key;
        GgufValueType type;
        GgufValueType elem_type = GgufValueType::U8;
        std::vector<uint8_t> bytes;  // encoded payload (after the type tag)
    };
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        uint64_t n_bytes;
        Producer produce;
    };
    void add_kv(std::string key, GgufValueType type, std::vector<uint8_t> payload,
                GgufValueType elem_type = GgufValueType::U8);
    template <class T>
    void add_scalar(std::string key, GgufValueType type, T v);
    template <class T>
    void add_array(std::string key, GgufValueType elem_type, const std::vector<T>& v);
    std::vector<Kv> kv_;
    std::vector<Tensor> tensors_;
    uint32_t alignment_ = 32;
};

}  // namespace dsv4
