// The ggml tensor types the engine knows: ids as GGUF stores them, and one traits table (block size, bytes,
// name). GGUF type ids map into it in exactly one place (ggml_type_from_id); unknown ids are rejected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct GgmlTypeTraits {
    GgmlType type;
    const char* name;
    int64_t block_elems;  // values per block (1 for plain types)
    size_t block_bytes;   // bytes per block
    bool is_float_weight; // can be dequantized to f32 (false for integer types I8..I64)
};

// Traits of a known type id, or nullopt for an id the engine does not know (e.g. 42, a fork's FP8).
std::optional<GgmlTypeTraits> ggml_type_from_id(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType t);
std::string_view ggml_type_name(GgmlType t);
// Parse a type name ("Q8_0", "iq2_xxs", case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of one row of n values; n must be a multiple of the block size (callers check with row_ok).
inline size_t ggml_row_bytes(const GgmlTypeTraits& t, int64_t n) {
    return (size_t)(n / t.block_elems) * t.block_bytes;
}

}  // namespace dsv4
