// quant.h's entry points: one switch from GgmlType to the typed codec of its family. The switch runs once
// per row; the codecs loop over whole blocks with no per-element type dispatch and no allocation.
#include "format/quant.h"

#include "core/check.h"
#include "format/quant_codecs.h"

namespace dsv4 {
namespace {

// Blocks in n values of type t; a partial block is a caller bug (rows are whole blocks in every GGUF).
int64_t block_count(const GgmlTypeTraits& t, int64_t n) {
    DSV4_CHECK_MSG(n >= 0 && n % t.block_elems == 0, "%s: %lld values is not a whole number of %lld-value blocks",
                   t.name, (long long)n, (long long)t.block_elems);
    return n / t.block_elems;
}

template <class Block>
const Block* as(const void* p) {
    return static_cast<const Block*>(p);
}

template <class Block>
Block* as_mut(void* p) {
    return static_cast<Block*>(p);
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
    using namespace quant;
    const int64_t nb = block_count(ggml_traits(type), n);
    switch (type) {
        case GgmlType::F32: return dequant_f32(as<float>(src), dst, nb);
        case GgmlType::F16: return dequant_f16(as<uint16_t>(src), dst, nb);
        case GgmlType::BF16: return dequant_bf16(as<uint16_t>(src), dst, nb);
        case GgmlType::F64: return dequant_f64(as<double>(src), dst, nb);
        case GgmlType::I8: return dequant_i8(as<int8_t>(src), dst, nb);
        case GgmlType::I16: return dequant_i16(as<int16_t>(src), dst, nb);
        case GgmlType::I32: return dequant_i32(as<int32_t>(src), dst, nb);
        case GgmlType::I64: return dequant_i64(as<int64_t>(src), dst, nb);
        case GgmlType::Q4_0: return dequant_q4_0(as<BlockQ4_0>(src), dst, nb);
        case GgmlType::Q4_1: return dequant_q4_1(as<BlockQ4_1>(src), dst, nb);
        case GgmlType::Q5_0: return dequant_q5_0(as<BlockQ5_0>(src), dst, nb);
        case GgmlType::Q5_1: return dequant_q5_1(as<BlockQ5_1>(src), dst, nb);
        case GgmlType::Q8_0: return dequant_q8_0(as<BlockQ8_0>(src), dst, nb);
        case GgmlType::Q8_1: return dequant_q8_1(as<BlockQ8_1>(src), dst, nb);
        case GgmlType::MXFP4: return dequant_mxfp4(as<BlockMxfp4>(src), dst, nb);
        case GgmlType::Q2_K: return dequant_q2_k(as<BlockQ2K>(src), dst, nb);
        case GgmlType::Q3_K: return dequant_q3_k(as<BlockQ3K>(src), dst, nb);
        case GgmlType::Q4_K: return dequant_q4_k(as<BlockQ4K>(src), dst, nb);
        case GgmlType::Q5_K: return dequant_q5_k(as<BlockQ5K>(src), dst, nb);
        case GgmlType::Q6_K: return dequant_q6_k(as<BlockQ6K>(src), dst, nb);
        case GgmlType::Q8_K: return dequant_q8_k(as<BlockQ8K>(src), dst, nb);
        case GgmlType::IQ2_XXS: return dequant_iq2_xxs(as<BlockIq2Xxs>(src), dst, nb);
        case GgmlType::IQ2_XS: return dequant_iq2_xs(as<BlockIq2Xs>(src), dst, nb);
        case GgmlType::IQ2_S: return dequant_iq2_s(as<BlockIq2S>(src), dst, nb);
        case GgmlType::IQ3_XXS: return dequant_iq3_xxs(as<BlockIq3Xxs>(src), dst, nb);
        case GgmlType::IQ3_S: return dequant_iq3_s(as<BlockIq3S>(src), dst, nb);
        case GgmlType::IQ1_S: return dequant_iq1_s(as<BlockIq1S>(src), dst, nb);
        case GgmlType::IQ1_M: return dequant_iq1_m(as<BlockIq1M>(src), dst, nb);
        case GgmlType::IQ4_NL: return dequant_iq4_nl(as<BlockIq4Nl>(src), dst, nb);
        case GgmlType::IQ4_XS: return dequant_iq4_xs(as<BlockIq4Xs>(src), dst, nb);
        case GgmlType::TQ1_0: return dequant_tq1_0(as<BlockTq1_0>(src), dst, nb);
        case GgmlType::TQ2_0: return dequant_tq2_0(as<BlockTq2_0>(src), dst, nb);
    }
    DSV4_CHECK_MSG(false, "dequantize_row: no decoder for %s", ggml_type_name(type).data());
}

bool has_quantizer(GgmlType type) {
    switch (type) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q8_0:
        case GgmlType::MXFP4:
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ1_S: return true;
        default: return false;
    }
}

namespace {

// Every quantizer, with importance weights for the types that take them (null: none).
size_t quantize_blocks(GgmlType type, const float* src, const float* weights, void* dst, int64_t n) {
    using namespace quant;
    const GgmlTypeTraits& traits = ggml_traits(type);
    const int64_t nb = block_count(traits, n);
    switch (type) {
        case GgmlType::F32: quant_f32(src, as_mut<float>(dst), nb); break;
        case GgmlType::F16: quant_f16(src, as_mut<uint16_t>(dst), nb); break;
        case GgmlType::BF16: quant_bf16(src, as_mut<uint16_t>(dst), nb); break;
        case GgmlType::Q4_0: quant_q4_0(src, as_mut<BlockQ4_0>(dst), nb); break;
        case GgmlType::Q4_1: quant_q4_1(src, as_mut<BlockQ4_1>(dst), nb); break;
        case GgmlType::Q5_0: quant_q5_0(src, as_mut<BlockQ5_0>(dst), nb); break;
        case GgmlType::Q5_1: quant_q5_1(src, as_mut<BlockQ5_1>(dst), nb); break;
        case GgmlType::Q8_0: quant_q8_0(src, as_mut<BlockQ8_0>(dst), nb); break;
        case GgmlType::MXFP4: quant_mxfp4(src, as_mut<BlockMxfp4>(dst), nb); break;
        case GgmlType::Q2_K: quant_q2_k(src, weights, as_mut<BlockQ2K>(dst), nb); break;
        case GgmlType::Q3_K: quant_q3_k(src, weights, as_mut<BlockQ3K>(dst), nb); break;
        case GgmlType::Q4_K: quant_q4_k(src, weights, as_mut<BlockQ4K>(dst), nb); break;
        case GgmlType::Q5_K: quant_q5_k(src, weights, as_mut<BlockQ5K>(dst), nb); break;
        case GgmlType::Q6_K: quant_q6_k(src, weights, as_mut<BlockQ6K>(dst), nb); break;
        case GgmlType::IQ2_XXS: quant_iq2_xxs(src, weights, as_mut<BlockIq2Xxs>(dst), nb); break;
        case GgmlType::IQ2_XS: quant_iq2_xs(src, weights, as_mut<BlockIq2Xs>(dst), nb); break;
        case GgmlType::IQ1_S: quant_iq1_s(src, weights, as_mut<BlockIq1S>(dst), nb); break;
        default: DSV4_CHECK_MSG(false, "quantize_row: %s has no quantizer", traits.name);
    }
    return (size_t)nb * traits.block_bytes;
}

}  // namespace

size_t quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
    return quantize_blocks(type, src, nullptr, dst, n);
}

bool uses_importance(GgmlType type) {
    switch (type) {
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ1_S: return true;
        default: return false;
    }
}

size_t quantize_row_weighted(GgmlType type, const float* src, void* dst, int64_t n, const float* weights) {
    return quantize_blocks(type, src, uses_importance(type) ? weights : nullptr, dst, n);
}

}  // namespace dsv4
