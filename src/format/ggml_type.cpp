// The one traits table of ggml tensor types: GGUF type id -> name, block size, block bytes. Every block
// struct of quant_blocks.h is checked against it at compile time; ids outside the table are rejected.
#include "format/ggml_type.h"

#include <array>
#include <cctype>

#include "core/check.h"
#include "format/quant_blocks.h"

namespace dsv4 {
namespace {

// Facts from ggml's type_traits (ggml.c) and the block structs of ggml-common.h.
constexpr GgmlTypeTraits kTraits[] = {
    {GgmlType::F32, "F32", 1, 4, true},
    {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},
    {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},
    {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},
    {GgmlType::Q8_1, "Q8_1", 32, 36, true},
    {GgmlType::Q2_K, "Q2_K", 256, 84, true},
    {GgmlType::Q3_K, "Q3_K", 256, 110, true},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},
    {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},
    {GgmlType::Q8_K, "Q8_K", 256, 292, true},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, true},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, true},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, true},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, true},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, true},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, true},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, true},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, true},
    {GgmlType::I8, "I8", 1, 1, false},
    {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},
    {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, true},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, true},
    {GgmlType::BF16, "BF16", 1, 2, true},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, true},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, true},
    {GgmlType::MXFP4, "MXFP4", 32, 17, true},
};

constexpr uint32_t kMaxId = 39;  // highest id in the enum (MXFP4)

// Dense id -> table row map; -1 marks ids the engine does not know (4, 5, 31..33, 36..38, forks' 40+).
constexpr std::array<int8_t, kMaxId + 1> make_index() {
    std::array<int8_t, kMaxId + 1> idx{};
    for (auto& i : idx) i = -1;
    for (size_t r = 0; r < std::size(kTraits); ++r) idx[(uint32_t)kTraits[r].type] = (int8_t)r;
    return idx;
}
constexpr std::array<int8_t, kMaxId + 1> kIndex = make_index();

constexpr const GgmlTypeTraits* find(GgmlType t) {
    const uint32_t id = (uint32_t)t;
    return id <= kMaxId && kIndex[id] >= 0 ? &kTraits[kIndex[id]] : nullptr;
}

constexpr bool block_matches(GgmlType t, size_t struct_bytes, int64_t elems) {
    return find(t) != nullptr && find(t)->block_bytes == struct_bytes && find(t)->block_elems == elems;
}

static_assert(block_matches(GgmlType::Q4_0, sizeof(BlockQ4_0), kQK32));
static_assert(block_matches(GgmlType::Q4_1, sizeof(BlockQ4_1), kQK32));
static_assert(block_matches(GgmlType::Q5_0, sizeof(BlockQ5_0), kQK32));
static_assert(block_matches(GgmlType::Q5_1, sizeof(BlockQ5_1), kQK32));
static_assert(block_matches(GgmlType::Q8_0, sizeof(BlockQ8_0), kQK32));
static_assert(block_matches(GgmlType::Q8_1, sizeof(BlockQ8_1), kQK32));
static_assert(block_matches(GgmlType::MXFP4, sizeof(BlockMxfp4), kQK32));
static_assert(block_matches(GgmlType::Q2_K, sizeof(BlockQ2K), kQKK));
static_assert(block_matches(GgmlType::Q3_K, sizeof(BlockQ3K), kQKK));
static_assert(block_matches(GgmlType::Q4_K, sizeof(BlockQ4K), kQKK));
static_assert(block_matches(GgmlType::Q5_K, sizeof(BlockQ5K), kQKK));
static_assert(block_matches(GgmlType::Q6_K, sizeof(BlockQ6K), kQKK));
static_assert(block_matches(GgmlType::Q8_K, sizeof(BlockQ8K), kQKK));
static_assert(block_matches(GgmlType::IQ2_XXS, sizeof(BlockIq2Xxs), kQKK));
static_assert(block_matches(GgmlType::IQ2_XS, sizeof(BlockIq2Xs), kQKK));
static_assert(block_matches(GgmlType::IQ2_S, sizeof(BlockIq2S), kQKK));
static_assert(block_matches(GgmlType::IQ3_XXS, sizeof(BlockIq3Xxs), kQKK));
static_assert(block_matches(GgmlType::IQ3_S, sizeof(BlockIq3S), kQKK));
static_assert(block_matches(GgmlType::IQ1_S, sizeof(BlockIq1S), kQKK));
static_assert(block_matches(GgmlType::IQ1_M, sizeof(BlockIq1M), kQKK));
static_assert(block_matches(GgmlType::IQ4_NL, sizeof(BlockIq4Nl), kQK32));
static_assert(block_matches(GgmlType::IQ4_XS, sizeof(BlockIq4Xs), kQKK));
static_assert(block_matches(GgmlType::TQ1_0, sizeof(BlockTq1_0), kQKK));
static_assert(block_matches(GgmlType::TQ2_0, sizeof(BlockTq2_0), kQKK));
static_assert(block_matches(GgmlType::F16, sizeof(uint16_t), 1) && block_matches(GgmlType::BF16, sizeof(uint16_t), 1));
static_assert(block_matches(GgmlType::F32, sizeof(float), 1) && block_matches(GgmlType::F64, sizeof(double), 1));
static_assert(!find((GgmlType)42) && !find((GgmlType)4) && !find((GgmlType)1000));

bool equal_ignore_case(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::toupper((unsigned char)a[i]) != std::toupper((unsigned char)b[i])) return false;
    }
    return true;
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_from_id(uint32_t id) {
    if (const GgmlTypeTraits* t = find((GgmlType)id)) return *t;
    return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
    const GgmlTypeTraits* traits = find(t);
    // A GgmlType value comes from ggml_type_from_id or the enum itself, so an unknown one is a bug.
    DSV4_CHECK_MSG(traits != nullptr, "unknown ggml type id %u", (unsigned)t);
    return *traits;
}

std::string_view ggml_type_name(GgmlType t) { return ggml_traits(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
    for (const GgmlTypeTraits& t : kTraits) {
        if (equal_ignore_case(name, t.name)) return t.type;
    }
    return std::nullopt;
}

}  // namespace dsv4
