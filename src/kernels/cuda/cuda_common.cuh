// Shared CUDA plumbing for the kernels: error checks that abort with file:line and the CUDA error name (a
// device failure is not recoverable), launch-size helpers and warp/block reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#define CUDA_CHECK(expr)                                                                              \
    do {                                                                                              \
        const cudaError_t dsv4_cuda_err_ = (expr);                                                    \
        if (dsv4_cuda_err_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "dsv4: %s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__,        \
                         cudaGetErrorName(dsv4_cuda_err_), cudaGetErrorString(dsv4_cuda_err_), #expr); \
            std::abort();                                                                             \
        }                                                                                             \
    } while (0)

// After every kernel launch: catches bad launch configurations at the call site (asynchronous faults
// surface at the next synchronizing call, which is checked too).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace dsv4::cuda {

constexpr int kWarp = 32;

// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may start while the kernel before
// it in the stream is still running; pdl_wait() blocks the calling thread until that kernel has finished and
// its writes are visible, so everything a thread does before it must not depend on (or overwrite) what the
// previous kernels read or write. pdl_trigger() lets the next such kernel start launching (its blocks then
// take free SM slots and wait). Both are no-ops for a kernel launched normally. Every kernel launched with
// launch_pdl calls pdl_wait() before its first access to activations (most call pdl_begin() first thing);
// the decode GEMV requests its weights first (cuda_gemv.cu).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The start of a kernel launched with launch_pdl that has nothing to do before its inputs are ready: wait for
// the previous kernel, then let the next one launch (one kernel deep, so launches never pile up).
__device__ __forceinline__ void pdl_begin() {
    pdl_wait();
    pdl_trigger();
}

// Asynchronous global -> shared copies (cp.async): 16 bytes bypassing L1 (.cg), or 4 bytes through it (.ca);
// commit closes a group of copies, wait<N> blocks until at most N groups of this thread are in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
// As cp_async16, but copies nothing and zero-fills the 16 bytes when !valid (gmem must still be a valid
// address expression; it is not read).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gmem) : "memory");
}
// 16 bytes to shared memory at address s of the shared window (one vector store).
__device__ __forceinline__ void st_shared_v4(unsigned s, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(s), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;" ::: "memory");
}

// silu(min(g, clamp)) * clamp(u, -clamp, clamp), the swiglu op's formula (no clamp when clamp == 0).
__device__ __forceinline__ float swiglu_value(float g, float u, float clamp) {
    if (clamp > 0) {
        g = fminf(g, clamp);
        u = fminf(fmaxf(u, -clamp), clamp);
    }
    return g / (1.0f + expf(-g)) * u;
}

// cosf and sinf of pos * freq, not inlined: each accurate sinf/cosf brings its large-argument reduction, so a
// kernel that rotates several pairs per thread from unrolled loops carried dozens of copies (norm_rope: 99 KB of
// SASS, "no instruction" its first stall in Nsight Compute). One shared copy costs a call per pair.
static __device__ __noinline__ float2 rope_cos_sin(int32_t pos, float freq) {
    const float ang = (float)pos * freq;
    return make_float2(cosf(ang), sinf(ang));
}
// RoPE of one interleaved pair (a, c) at angle pos * freq (an f32 product, as on the CPU), rotated back when
// `inverse`: a' = a cos - c sin, c' = a sin + c cos with every product and sum rounded on its own, as the CPU's
// code is written (__fmul_rn/__fadd_rn are never fused; GCC contracts the CPU's into multiply-adds where the
// target has them, a difference of an ulp that the rope bounds cover, like cosf/sinf's last ulp).
__device__ __forceinline__ void rope_pair(float& a, float& c, int32_t pos, float freq, bool inverse) {
    const float2 t = rope_cos_sin(pos, freq);
    const float cs = t.x, sn = inverse ? -t.y : t.y;
    const float a0 = a, c0 = c;
    a = __fsub_rn(__fmul_rn(a0, cs), __fmul_rn(c0, sn));
    c = __fadd_rn(__fmul_rn(a0, sn), __fmul_rn(c0, cs));
}
// RoPE of the dims d .. d + 3 held in one float4 of a head whose RoPE dims start at `off` (even, so a pair is
// its (x, y) or its (z, w)); dims before off are left as they are. freq(i): the frequency of the float4's pair i
// (0 or 1), asked only for a pair it rotates; a kernel that read its frequencies before its PDL wait returns them.
template <class Freq>
__device__ __forceinline__ void rope_float4(float4& v, int d, int off, int32_t pos, Freq freq, bool inverse) {
    if (d >= off) rope_pair(v.x, v.y, pos, freq(0), inverse);
    if (d + 2 >= off) rope_pair(v.z, v.w, pos, freq(1), inverse);
}
__device__ __forceinline__ void rope_float4(float4& v, int d, int off, int32_t pos, const float* freqs, bool inverse) {
    rope_float4(v, d, off, pos, [=](int i) { return freqs[(d + 2 * i - off) / 2]; }, inverse);
}
// RoPE of a head held a dim per lane: this lane's value o of dim d, where dim d ^ 1 is lane ^ 1's (d and the lane
// have the same parity) and the RoPE dims [off, hd) start at an even off. Returns o rotated, or as it is outside
// [off, hd). Every lane of the warp must call it (a shuffle). freq(): the frequency of d's pair, asked only inside
// [off, hd), as in rope_float4.
template <class Freq>
__device__ __forceinline__ float rope_lanes(float o, int d, int off, int hd, int32_t pos, Freq freq, bool inverse) {
    const float other = __shfl_xor_sync(0xffffffffu, o, 1);
    if (d < off || d >= hd) return o;
    const bool first = (d - off) % 2 == 0;  // d even
    float a = first ? o : other, c = first ? other : o;
    rope_pair(a, c, pos, freq(), inverse);
    return first ? a : c;
}
__device__ __forceinline__ float rope_lanes(float o, int d, int off, int hd, int32_t pos, const float* freqs,
                                            bool inverse) {
    return rope_lanes(o, d, off, hd, pos, [=] { return freqs[(d - off) / 2]; }, inverse);
}

// Order-preserving 64-bit key of (score, index) for top-k selection: a larger key is a higher score, then a
// lower index; -0 counts as +0 (they compare equal as floats). key_index recovers the index.
__device__ __forceinline__ uint32_t score_bits(float s) {
    uint32_t u = __float_as_uint(s);
    if ((u & 0x7fffffffu) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ uint64_t make_key(uint32_t bits, int idx) {
    return ((uint64_t)bits << 32) | (uint32_t)(0x7fffffff - idx);
}
__device__ __forceinline__ int key_index(uint64_t key) {
    return 0x7fffffff - (int)(uint32_t)key;
}

// Whether every pointer starts on a 16-byte boundary (the condition of float4 / 16-byte vector paths).
template <class... P>
inline bool aligned16(const P*... p) {
    return ((reinterpret_cast<uintptr_t>(p) | ...) & 15) == 0;
}

// Launches kernel k as a programmatic dependent of the previous kernel in stream s: it may start before that
// kernel ends and must wait for it with pdl_wait() (above).
template <class... P, class... A>
void launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...));
}

// The current device's SM count and the most shared memory a block may use (static and dynamic, after opting
// in), queried once: for the decode launchers that size their grids without a backend at hand.
struct DeviceLimits {
    int sms = 0;
    size_t smem_optin = 0;
};
inline const DeviceLimits& device_limits() {
    static const DeviceLimits l = [] {
        DeviceLimits d;
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        d.smem_optin = (size_t)v;
        return d;
    }();
    return l;
}

// The dynamic shared memory a block of a kernel with these attributes can have on this device: the opt-in limit
// less the kernel's own static shared memory.
inline size_t dynamic_smem_avail(const cudaFuncAttributes& attr) {
    const size_t optin = device_limits().smem_optin;
    return optin - std::min(optin, attr.sharedSizeBytes);
}
template <auto K>
size_t dynamic_smem_avail() {  // of kernel K, found once
    static const size_t avail = [] {
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, K));
        return dynamic_smem_avail(attr);
    }();
    return avail;
}

inline unsigned ceil_div(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

// Grid size for a grid-stride loop over n items: enough blocks to fill the GPU, never zero.
inline unsigned grid_for(int64_t n, int threads) {
    const int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : (blocks > 65535 * 4 ? 65535 * 4 : blocks));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The pieces of rms_norm that the kernels norming a row they hold share (as the CPU's rms_norm): the squares
// of four values summed in double, the factor 1 / sqrt(mean + eps) from the row's sum, and the scaling of
// values 4j .. 4j + 3 of the row: x * r, then times weight's float4 j when weight is non-null (16-byte
// aligned), each product rounded on its own. A kernel that read its weights w before its PDL wait passes them
// with `weighted`.
__device__ __forceinline__ double sum_sq4(float4 v) {
    return (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
}
__device__ __forceinline__ float rms_factor(double ss, int64_t dim, float eps) {
    return 1.0f / sqrtf((float)(ss / (double)dim) + eps);
}
__device__ __forceinline__ float4 scale_rn4(float4 v, float r) {
    return make_float4(__fmul_rn(v.x, r), __fmul_rn(v.y, r), __fmul_rn(v.z, r), __fmul_rn(v.w, r));
}
__device__ __forceinline__ float4 mul_rn4(float4 a, float4 b) {
    return make_float4(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y), __fmul_rn(a.z, b.z), __fmul_rn(a.w, b.w));
}
// The norm's weights for rms_scale4 read ahead (before a PDL wait): float4 j of weight, ones when there is no
// weight or j is past the row's nv float4s. The pointer is taken by reference so that a kernel parameter's field
// is read from the parameter space where it is used, not copied to a register first.
template <class Index>
__device__ __forceinline__ float4 rms_weight4(const float* const& weight, Index j) {
    return weight ? reinterpret_cast<const float4*>(weight)[j] : make_float4(1.f, 1.f, 1.f, 1.f);
}
__device__ __forceinline__ float4 rms_weight4(const float* const& weight, int j, int nv) {
    return weight && j < nv ? reinterpret_cast<const float4*>(weight)[j] : make_float4(1.f, 1.f, 1.f, 1.f);
}
// The weighted product is written out rather than through mul_rn4, which changes how the compiler schedules
// the Q8_0 register GEMV's norm.
__device__ __forceinline__ float4 rms_scale4(float4 v, float r, float4 w, bool weighted) {
    float4 o = scale_rn4(v, r);
    if (weighted) o = make_float4(__fmul_rn(w.x, o.x), __fmul_rn(w.y, o.y), __fmul_rn(w.z, o.z), __fmul_rn(w.w, o.w));
    return o;
}
__device__ __forceinline__ float4 rms_scale4(float4 v, float r, const float* weight, int j) {
    const float4 o = scale_rn4(v, r);
    return weight ? mul_rn4(reinterpret_cast<const float4*>(weight)[j], o) : o;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds at least 32 values of T in shared memory.
template <class T>
__device__ T block_sum(T v, T* scratch) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    T t = lane < n_warps ? scratch[lane] : T(0);
    return warp_sum(t);
}

}  // namespace dsv4::cuda
