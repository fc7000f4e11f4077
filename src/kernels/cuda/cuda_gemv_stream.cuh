// The weight pipeline of the decode GEMV and the MoE decode kernels: one warp streams R weight rows (all
// multiplied by the same activation rows) through a ring of shared-memory stages filled by cp.async with
// 16-byte copies, so the HBM reads are wide and coalesced whatever the block size (17, 34, 66, 84, 110, 210
// bytes), several stages are in flight per warp, and no registers hold data in transit. A stage holds
// kStageBlocks blocks of each row; each lane then decodes its units of the stage (cuda_gemv_codecs.cuh).
//
// Work is split into items (a set of R rows and the activations they multiply, e.g. one expert slot) and
// each item's stages are dealt to the wg warps of a group (split = 0..wg-1 takes stages split, split + wg,
// ...), so small matrices still put enough warps to work; the caller adds the wg partial sums in a fixed
// order, which keeps every result deterministic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_dequant.cuh"
#include "kernels/cuda/cuda_gemv_codec_list.cuh"
#include "kernels/cuda/cuda_gemv_digits.cuh"

namespace dsv4::cuda::gemv {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * kWarp;
constexpr int kRingStages = 3;  // cp.async ring depth: two stages in flight while one is decoded

// The activation type a codec multiplies (float, or XDigits for the digit codecs), how many of them one
// weight block spans, and row(K): how many a row of K values takes.
template <class C>
struct XOf {
    using X = float;
    static constexpr int kPerBlock = C::kElems;
    static constexpr int64_t row(int64_t K) { return K / C::kElems * kPerBlock; }
};
template <class C>
requires requires {
    typename C::X;
}
struct XOf<C> {
    using X = typename C::X;
    static constexpr int kPerBlock = C::kXPerBlock;
    static constexpr int64_t row(int64_t K) { return K / C::kElems * kPerBlock; }
};

// A stage holds kBlocks = the codec's kStageBlocks blocks (about 1 KB) of each of the R rows; C is Codec<T>
// or DigitCodec<T>.
template <class C, int R>
struct Stage {
    static constexpr int kBlocks = C::kStageBlocks;
    static constexpr int kBytes = kBlocks * C::kBytes;
    static constexpr int kUnits = kBlocks * C::kUnits;
    static_assert(kUnits % kWarp == 0, "a stage is a whole number of passes over the warp");
    static_assert(kBytes % 16 == 0, "a stage is whole 16-byte words, so each row keeps its offset in them");
    static constexpr int kPasses = kUnits / kWarp;
    // 16-byte words of one row's stage: the data, the partial word before it (the stage starts mid-word) and
    // one spare word that the codecs' aligned over-reads may touch.
    static constexpr int kWords = (kBytes + 15) / 16 + 2;
};

// Rows per warp: 2. (Each activation load serves both; 4 rows with half-size stages measured no faster on an
// H200 and spilled registers under the 64-register bound.)
constexpr int kRowsPerWarp = 2;

// Shared memory of one warp's ring for R rows.
template <class C, int R>
constexpr int ring_words() {
    return kRingStages * R * Stage<C, R>::kWords;
}

// Shared-memory tables of the formats that need them (IQ2_XXS), built by the whole block at kernel start:
// call before any early exit, every thread. The other grid formats get pointers to their device tables.
template <GgmlType T>
struct LutStorage {
    static constexpr int kWords = T == GgmlType::IQ2_XXS ? 256 + 128 : 1;
};
template <GgmlType T>
__device__ __forceinline__ Lut build_lut(uint32_t* mem, const QuantTables& tb) {
    Lut lut;
    if constexpr (T == GgmlType::IQ2_XXS) {
        for (int i = threadIdx.x; i < 256 + 128; i += blockDim.x) {
            uint32_t v = 0;
            if (i < 256) {
                const uint64_t g = tb.iq2xxs[i];  // bytes 8, 25 or 43: code = byte >> 4 (0, 1, 2)
                for (int j = 0; j < 8; ++j) v |= (uint32_t)((g >> (8 * j + 4)) & 3) << (4 * j);
            } else {
                const uint32_t s = tb.signs[i - 256];
                for (int j = 0; j < 8; ++j) v |= (3u * ((s >> j) & 1)) << (4 * j);
            }
            mem[i] = v;
        }
        __syncthreads();
        lut.grid = mem;
        lut.sign = mem + 256;
    } else if constexpr (T == GgmlType::IQ2_XS) {
        lut.grid64 = tb.iq2xs;
        lut.signs = tb.signs;
    } else if constexpr (T == GgmlType::IQ2_S) {
        lut.grid64 = tb.iq2s;
    } else if constexpr (T == GgmlType::IQ1_S || T == GgmlType::IQ1_M) {
        lut.grid64 = tb.iq1s;
    } else if constexpr (T == GgmlType::IQ3_XXS) {
        lut.grid32 = tb.iq3xxs;
        lut.signs = tb.signs;
    } else if constexpr (T == GgmlType::IQ3_S) {
        lut.grid32 = tb.iq3s;
    }
    return lut;
}

// Minimum resident blocks per SM for __launch_bounds__: single-row kernels are held to 64 registers so that
// 8 blocks (32 warps) fit, as their rings do (see prefer_shared); 8 activation rows keep up to 255 registers
// (their accumulators and activations), which costs occupancy but not spills. A codec may ask for fewer
// single-row blocks (kMinBlocks1: the 2-bit digit codecs hold 32 weights as words and a digit half per lane,
// and spill at 64 registers).
template <class C, int NT>
constexpr int min_blocks() {
    if constexpr (NT == 1 && requires { C::kMinBlocks1; }) return C::kMinBlocks1;
    return NT == 1 ? 8 : NT == 8 ? 2 : 4;
}

// The streaming kernels ask for the largest shared-memory carveout of the SM's unified L1 and shared memory:
// the L1 cache matters little here (weights bypass it, activations are small) and 8 blocks' rings need nearly
// all 228 KB.
template <auto K>
void prefer_shared() {
    static const bool done = [] {
        CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      (int)cudaSharedmemCarveoutMaxShared));
        return true;
    }();
    (void)done;
}

template <int R, int NT>
__device__ __forceinline__ void warp_reduce(float (&acc)[R][NT]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// Streams the stages of n_items items through this warp's ring and calls done(item, acc) after each item
// with the warp-reduced sums acc[r][t] = sum over this warp's stages of row r times activation row t (every
// lane gets them; zeros when the warp has no stage of the item). src provides row(item, r): the first byte
// of row r (nb blocks) and x(item, t): activation row t (for t >= nt any valid row), 16-byte aligned, of
// the codec's activation type (XOf<C>).
//
// Addresses advance by constants from stage to stage (a stage is a multiple of 16 bytes, so each row keeps
// its offset within the 16-byte words) and from pass to pass, so the loop spends its instructions on
// decoding rather than on address arithmetic.
//
// ready() runs once the first stages are in flight, before any activation is read: a kernel launched as a
// programmatic dependent (pdl_wait) waits there for the kernel before it, so its weight loads overlap that
// kernel's tail.
template <class C, int R, int NT, class Src, class Ready, class Done>
__device__ __forceinline__ void stream_rows(const Src& src, int n_items, int nb, int split, int wg, int nt, uint4* ring,
                                            const Lut& lut, Ready&& ready, Done&& done) {
    using S = Stage<C, R>;
    using X = typename XOf<C>::X;
    constexpr int kXPerBlock = XOf<C>::kPerBlock;
    constexpr int kStageBytes = S::kBytes;
    // Units per block divide the warp: a lane decodes the same unit (uu) of every kBlockStep-th block.
    static_assert(kWarp % C::kUnits == 0, "units per block divide the warp");
    constexpr int kBlockStep = kWarp / C::kUnits;
    const int lane = threadIdx.x % kWarp;
    const int uu = lane % C::kUnits, j0 = lane / C::kUnits;
    const int n_stages = (nb + S::kBlocks - 1) / S::kBlocks;  // per row
    const int per_item = split < n_stages ? (n_stages - split + wg - 1) / wg : 0;
    const int total = n_items * per_item;

    float acc[R][NT];
    auto clear = [&]() {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    };
    clear();
    if (per_item == 0) {
        ready();
        for (int item = 0; item < n_items; ++item) done(item, acc);
        return;
    }

    // Issue cursor: stage split + in_j * wg of item in_item; in_ptr[r] is the 16-byte word holding its first
    // byte, in_shift[r] that byte's offset in the word.
    int in_item = 0, in_j = 0;
    const uint8_t* in_ptr[R];
    int in_shift[R];
    auto in_start = [&]() {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t* a = src.row(in_item, r) + (size_t)split * kStageBytes;
            in_shift[r] = (int)(reinterpret_cast<uintptr_t>(a) & 15);
            in_ptr[r] = a - in_shift[r];
        }
    };
    auto issue = [&](int i) {
        const int b0 = (split + in_j * wg) * S::kBlocks;
        const int bytes = (nb - b0 < S::kBlocks ? nb - b0 : S::kBlocks) * C::kBytes;
        uint4* slot = ring + (i % kRingStages) * R * S::kWords;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            // The words covering the stage: a word holding any byte of the row lies in its allocation.
            const int words = (in_shift[r] + bytes + 15) >> 4;
#pragma unroll
            for (int v = 0; v < (S::kWords + kWarp - 1) / kWarp; ++v) {
                const int w = lane + kWarp * v;
                if (w < words) cp_async16(slot + r * S::kWords + w, in_ptr[r] + 16 * w);
            }
        }
        if (++in_j == per_item) {
            in_j = 0;
            if (++in_item < n_items) in_start();
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r) in_ptr[r] += (size_t)wg * kStageBytes;
        }
    };

    // Decode cursor: the same stages in the same order; out_off[r] is this lane's first block in the slot of
    // row r, lx[t] its activations.
    int out_item = 0, out_j = 0;
    int out_off[R];
    const X* lx[NT];
    auto out_start = [&]() {
#pragma unroll
        for (int r = 0; r < R; ++r)
            out_off[r] = (int)(reinterpret_cast<uintptr_t>(src.row(out_item, r)) & 15) + j0 * C::kBytes;
#pragma unroll
        for (int t = 0; t < NT; ++t) lx[t] = src.x(out_item, t) + (size_t)(split * S::kBlocks + j0) * kXPerBlock;
    };

    in_start();
    out_start();
#pragma unroll
    for (int i = 0; i < kRingStages - 1; ++i) {
        if (i < total) issue(i);
        cp_async_commit();  // possibly empty: keeps the group count in step with the stage index
    }
    ready();
    for (int i = 0; i < total; ++i) {
        if (i + kRingStages - 1 < total) issue(i + kRingStages - 1);
        cp_async_commit();
        cp_async_wait<kRingStages - 1>();  // this lane's copies of stage i have landed
        __syncwarp();                      // ... and every other lane's
        const int b0 = (split + out_j * wg) * S::kBlocks;
        const int nblk = nb - b0 < S::kBlocks ? nb - b0 : S::kBlocks;
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(ring + (i % kRingStages) * R * S::kWords);
#pragma unroll 4
        for (int p = 0; p < S::kPasses; ++p) {
            if (j0 + p * kBlockStep < nblk) {
                const uint8_t* blk[R];
#pragma unroll
                for (int r = 0; r < R; ++r)
                    blk[r] = slot + r * S::kWords * 16 + out_off[r] + p * kBlockStep * C::kBytes;
                const X* xb[NT];
#pragma unroll
                for (int t = 0; t < NT; ++t) xb[t] = lx[t] + p * kBlockStep * kXPerBlock;
                C::template dot<R, NT>(blk, uu, xb, nt, acc, lut);
            }
        }
        __syncwarp();  // every lane is done with this slot before a later issue() refills it
        if (++out_j == per_item) {
            warp_reduce<R, NT>(acc);
            done(out_item, acc);
            clear();
            out_j = 0;
            if (++out_item < n_items) out_start();
        } else {
#pragma unroll
            for (int t = 0; t < NT; ++t) lx[t] += (size_t)wg * S::kBlocks * kXPerBlock;
        }
    }
    cp_async_wait<0>();
}

}  // namespace dsv4::cuda::gemv
