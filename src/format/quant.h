// Block-format codecs: dequantize any known ggml type to f32, quantize f32 into the types that have a
// quantizer. Pure functions over contiguous rows; n is always a multiple of the type's block size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/ggml_type.h"

namespace dsv4 {

// Dequantize n values of `type` starting at `src` into dst. Works for every float type in the traits table
// (F32, F16, BF16, F64 and every block format) and for I8/I16/I32 (converted to float).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// True if quantize_row supports `type`.
bool has_quantizer(GgmlType type);

// Quantize n values into dst (ggml_row_bytes(type, n) bytes). For Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, F16,
// BF16 the output matches llama.cpp's reference quantizer byte for byte; Q2_K..Q6_K follow llama.cpp's
// reference (non-imatrix) algorithms; IQ2_XXS / IQ2_XS / IQ1_S use this engine's grid search
// (quant_iq_quantize.cpp). Returns the bytes written; aborts if the type has no quantizer.
size_t quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// True if quantize_row_weighted uses importance weights for `type` (Q2_K..Q6_K, IQ2_XXS, IQ2_XS, IQ1_S); the
// legacy, MXFP4 and float quantizers take none.
bool uses_importance(GgmlType type);
// quantize_row with one importance weight (>= 0) per value (e.g. an imatrix's mean squared activation of
// each input column); null weights, or a type that takes none, give quantize_row's result.
size_t quantize_row_weighted(GgmlType type, const float* src, void* dst, int64_t n, const float* weights);

}  // namespace dsv4
