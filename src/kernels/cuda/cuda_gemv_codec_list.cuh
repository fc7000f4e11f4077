// The formats the decode GEMV and the MoE decode kernels serve: every Codec<T> (cuda_gemv_codecs.cuh and the
// per-family headers beside it), and the one switch that turns a runtime type into one of them.
#pragma once

#include "kernels/cuda/cuda_gemv_codecs.cuh"
#include "kernels/cuda/cuda_gemv_codecs_grid.cuh"
#include "kernels/cuda/cuda_gemv_codecs_nibble.cuh"

namespace dsv4::cuda::gemv {

template <GgmlType T>
struct CodecTag {
    static constexpr GgmlType type = T;
};
// Calls f(CodecTag<T>{}) for the formats that have a codec and returns true; false for the others.
template <class F>
bool dispatch_codec(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q8_0:
            f(CodecTag<GgmlType::Q8_0>{});
            return true;
        case GgmlType::MXFP4:
            f(CodecTag<GgmlType::MXFP4>{});
            return true;
        case GgmlType::Q2_K:
            f(CodecTag<GgmlType::Q2_K>{});
            return true;
        case GgmlType::Q3_K:
            f(CodecTag<GgmlType::Q3_K>{});
            return true;
        case GgmlType::Q4_K:
            f(CodecTag<GgmlType::Q4_K>{});
            return true;
        case GgmlType::Q5_K:
            f(CodecTag<GgmlType::Q5_K>{});
            return true;
        case GgmlType::Q6_K:
            f(CodecTag<GgmlType::Q6_K>{});
            return true;
        case GgmlType::Q4_0:
            f(CodecTag<GgmlType::Q4_0>{});
            return true;
        case GgmlType::Q4_1:
            f(CodecTag<GgmlType::Q4_1>{});
            return true;
        case GgmlType::Q5_0:
            f(CodecTag<GgmlType::Q5_0>{});
            return true;
        case GgmlType::Q5_1:
            f(CodecTag<GgmlType::Q5_1>{});
            return true;
        case GgmlType::IQ4_NL:
            f(CodecTag<GgmlType::IQ4_NL>{});
            return true;
        case GgmlType::IQ4_XS:
            f(CodecTag<GgmlType::IQ4_XS>{});
            return true;
        case GgmlType::IQ2_XXS:
            f(CodecTag<GgmlType::IQ2_XXS>{});
            return true;
        case GgmlType::IQ2_XS:
            f(CodecTag<GgmlType::IQ2_XS>{});
            return true;
        case GgmlType::IQ2_S:
            f(CodecTag<GgmlType::IQ2_S>{});
            return true;
        case GgmlType::IQ3_XXS:
            f(CodecTag<GgmlType::IQ3_XXS>{});
            return true;
        case GgmlType::IQ3_S:
            f(CodecTag<GgmlType::IQ3_S>{});
            return true;
        case GgmlType::IQ1_S:
            f(CodecTag<GgmlType::IQ1_S>{});
            return true;
        case GgmlType::IQ1_M:
            f(CodecTag<GgmlType::IQ1_M>{});
            return true;
        case GgmlType::F16:
            f(CodecTag<GgmlType::F16>{});
            return true;
        case GgmlType::BF16:
            f(CodecTag<GgmlType::BF16>{});
            return true;
        case GgmlType::F32:
            f(CodecTag<GgmlType::F32>{});
            return true;
        default:
            return false;
    }
}

}  // namespace dsv4::cuda::gemv
