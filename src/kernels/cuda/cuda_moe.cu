// CUDA mixture of experts. Routing: a block per token ranks the experts by sqrt(softplus(logit)) + bias and
// keeps the top-k (or takes the hash table's experts), with the CPU's tie rule. Experts: the (token, slot) pairs are
// grouped per expert on the device (no host round trip), the gate/up/down projections run as grouped matmuls that read
// only the chosen experts' weights, and each token's slots are summed in ascending expert id, the CPU's order.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"
#include "kernels/cuda/cuda_select.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

constexpr int kMaxExperts = 2048;  // the routing kernel's shared memory holds a key per expert (16 KiB)
constexpr int kMaxK = 32;
constexpr int kRouteThreads = 256;

__device__ __forceinline__ float route_score(const float* logits, int e) { return sqrtf(softplus(logits[e])); }

// A block per token. Every thread scores experts tid, tid + blockDim, ... into shared memory as top-k keys
// (make_key: the selection key, NaN as -infinity, then the lower id first), which order the experts as the CPU
// picks them. An expert's rank is the number of keys above its own, counted in parallel over independent loads
// (no early exit, so the loads overlap); the experts of rank < k are the top-k and the rank is their slot. This
// replaces k dependent warp arg-max rounds on one warp, a chain as long as k. The raw scores are summed
// in slot order, as the CPU.
__global__ void __launch_bounds__(kRouteThreads)
    moe_route_kernel(int32_t* ids, float* weights, const float* logits, const float* bias, const int32_t* tid2eid,
                     const int32_t* tokens, int n_experts, int k, float scale, bool norm) {
    pdl_begin();
    extern __shared__ uint64_t route_smem[];
    uint64_t* key = route_smem;                                     // [n_experts rounded up to even]
    float* chosen = reinterpret_cast<float*>(key + n_experts + 1);  // [k] the chosen experts' raw scores, by slot
    const int64_t i = blockIdx.x;
    const float* lg = logits + i * n_experts;
    int32_t* out = ids + i * k;
    float* w = weights + i * k;
    if (tid2eid) {
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            const int e = tid2eid[(int64_t)tokens[i] * k + j];
            if (e < 0 || e >= n_experts) {
                printf("dsv4: CUDA moe_route: token %lld slot %d has expert %d, outside [0, %d)\n", (long long)i, j, e,
                       n_experts);
                __trap();
            }
            out[j] = e;
            chosen[j] = route_score(lg, e);
        }
    } else {
        const int padded = (n_experts + 1) / 2 * 2;
        for (int e = threadIdx.x; e < padded; e += blockDim.x) {
            const float v = e < n_experts ? route_score(lg, e) + (bias ? bias[e] : 0.0f) : -INFINITY;
            key[e] = make_key(score_bits(isnan(v) ? -INFINITY : v), e);  // the pad: below every expert
        }
        __syncthreads();
        const ulonglong2* pairs = reinterpret_cast<const ulonglong2*>(key);
        for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
            const uint64_t mine = key[e];
            int rank = 0;
#pragma unroll 8
            for (int j = 0; j < padded / 2; ++j) {
                const ulonglong2 o = pairs[j];
                rank += (o.x > mine) + (o.y > mine);
            }
            if (rank < k) {
                out[rank] = e;
                chosen[rank] = route_score(lg, e);
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0;
        for (int j = 0; j < k; ++j) sum += chosen[j];
        for (int j = 0; j < k; ++j) w[j] = (norm ? chosen[j] / sum : chosen[j]) * scale;
    }
}

// Group the n*k (token, slot) pairs by expert: offsets [E+1], and for grouped row r its token (x_rows) and
// pair (pair_of_row); per token, its k grouped rows in ascending expert id (sum_rows). Placement within an
// expert uses atomics, which cannot change any result: every grouped row is computed independently.
__global__ void moe_group_kernel(const int32_t* ids, int64_t n, int k, int n_experts, int32_t* offsets, int32_t* x_rows,
                                 int32_t* pair_of_row, int32_t* sum_rows) {
    pdl_begin();
    extern __shared__ int counts[];  // [n_experts] counts, then [n_experts] cursors
    int* cursor = counts + n_experts;
    const int64_t pairs = n * k;
    for (int e = threadIdx.x; e < 2 * n_experts; e += blockDim.x) counts[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int e = ids[p];
        if (e < 0 || e >= n_experts) {
            printf("dsv4: CUDA moe_experts: pair %lld has expert %d, outside [0, %d)\n", (long long)p, e, n_experts);
            __trap();
        }
        atomicAdd(&counts[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int e = 0; e < n_experts; ++e) {
            offsets[e] = run;
            cursor[e] = run;
            run += counts[e];
        }
        offsets[n_experts] = run;
    }
    __syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int pos = atomicAdd(&cursor[ids[p]], 1);
        x_rows[pos] = (int32_t)(p / k);
        pair_of_row[pos] = (int32_t)p;
        sum_rows[p] = pos;  // row of pair p; sorted per token below
    }
    __syncthreads();
    // Per token: order its rows by (expert, slot), an insertion sort over k <= kMaxK entries.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int32_t* rows = sum_rows + i * k;
        const int32_t* e = ids + i * k;
        int order[kMaxK], r[kMaxK];
        for (int j = 0; j < k; ++j) {
            order[j] = j;
            r[j] = rows[j];
        }
        for (int a = 1; a < k; ++a) {
            const int v = order[a];
            int b = a - 1;
            while (b >= 0 && e[order[b]] > e[v]) {
                order[b + 1] = order[b];
                --b;
            }
            order[b + 1] = v;
        }
        for (int j = 0; j < k; ++j) rows[j] = r[order[j]];
    }
}

// h = silu(min(g, clamp)) * clamp(u) (as the swiglu op), then times the row's routing weight.
__global__ void moe_swiglu_kernel(float* h, const float* g, const float* u, int64_t rows, int64_t f, float clamp,
                                  const float* weights, const int32_t* pair_of_row) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * f; t += (int64_t)gridDim.x * blockDim.x) {
        float gv = g[t], uv = u[t];
        if (clamp > 0) {
            gv = fminf(gv, clamp);
            uv = fminf(fmaxf(uv, -clamp), clamp);
        }
        const float hv = gv / (1.0f + expf(-gv)) * uv;
        h[t] = hv * weights[pair_of_row[t / f]];
    }
}

__global__ void moe_sum_kernel(float* out, const float* y, const int32_t* sum_rows, int64_t n, int k, int64_t D) {
    pdl_begin();
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n * D; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / D, d = t % D;
        float s = 0.0f;
        for (int j = 0; j < k; ++j) s += y[(int64_t)sum_rows[i * k + j] * D + d];
        out[t] = s;
    }
}

}  // namespace

// Every MoE kernel takes up to kMaxK slots; routing (its shared memory) and the grouping pass (2 ints per
// expert in 48 KiB) take kMaxExperts.
Backend::MoeLimits CudaBackend::moe_limits() const {
    static_assert(2 * kMaxExperts * sizeof(int) <= 48 * 1024, "the grouping kernel holds every expert");
    return MoeLimits{kMaxExperts, kMaxK};
}

void CudaBackend::moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                            const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k, float scale,
                            bool norm) {
    if (skipped("moe_route")) return;
    if (n <= 0 || k <= 0) return;
    DSV4_CHECK_MSG(n_experts > 0 && n_experts <= kMaxExperts && k <= n_experts && k <= kMaxK,
                   "moe_route: %d experts, k %d", n_experts, k);
    DSV4_CHECK(n <= INT32_MAX);
    const size_t smem = (size_t)(n_experts + 1) * sizeof(uint64_t) + (size_t)k * sizeof(float);
    launch_pdl(moe_route_kernel, (unsigned)n, kRouteThreads, smem, stream_, ids, weights, logits, bias, tid2eid, tokens,
               n_experts, k, scale, norm);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::moe_experts(const MoeArgs& a) {
    if (skipped("moe_experts")) return;
    const int64_t D = a.gate.cols, F = a.gate.rows;
    DSV4_CHECK(a.down.cols == F && a.down.rows == D && a.up.rows == F && a.up.cols == D);
    DSV4_CHECK_MSG(!a.pair_out && a.expert_base == 0,
                   "moe_experts: expert parallelism (a model split over ranks) is not on the CUDA backend yet");
    DSV4_CHECK_MSG(a.k > 0 && a.k <= kMaxK, "moe_experts: k %d outside [1, %d]", a.k, kMaxK);
    if (a.n <= 0) return;
    const MoeKernel kernel = select_moe(*this, a);
    if (kernel == MoeKernel::decode_xreg || kernel == MoeKernel::decode_pipelined) {
        launch_moe_decode(*this, a, kernel == MoeKernel::decode_xreg);  // no grouping (cuda_moe_decode.cu)
        ran(kernel_name(kernel));
        return;
    }
    const int E = (int)a.gate.n_experts;
    const int64_t R = a.n * a.k;  // grouped rows
    Scratch s(*this);
    int32_t* offsets = s.get<int32_t>(E + 1);
    int32_t* x_rows = s.get<int32_t>(R);
    int32_t* pair_of_row = s.get<int32_t>(R);
    int32_t* sum_rows = s.get<int32_t>(R);
    float* y = s.get<float>(R * D);

    const size_t smem = 2 * (size_t)E * sizeof(int);
    DSV4_CHECK_MSG(smem <= 48 * 1024, "moe_experts: %d experts exceed the grouping kernel's shared memory", E);
    launch_pdl(moe_group_kernel, 1, 1024, smem, stream_, a.ids, a.n, a.k, E, offsets, x_rows, pair_of_row, sum_rows);
    CUDA_CHECK_LAUNCH();
    if (kernel == MoeKernel::tc_bf16 || kernel == MoeKernel::tc_blocks) {  // bf16 mode: tensor cores
        if (kernel == MoeKernel::tc_blocks)
            moe_experts_blocks(*this, a, offsets, x_rows, pair_of_row, y);  // cuda_moe_blocks.cu
        else
            moe_experts_tc(*this, a, offsets, x_rows, pair_of_row, y);  // cuda_gemm_tc.cu
        launch_pdl(moe_sum_kernel, grid_for(a.n * D, 256), 256, 0, stream_, a.out, y, sum_rows, a.n, a.k, D);
        CUDA_CHECK_LAUNCH();
        ran(kernel_name(kernel));
        return;
    }
    float* g = s.get<float>(R * F);
    float* u = s.get<float>(R * F);
    float* h = s.get<float>(R * F);

    auto grouped = [&](const Weight& w, const float* x, int64_t x_stride, const int32_t* rows, float* out) {
        launch_grouped_matmul(*this, w, x, x_stride, rows, out, R, offsets, E);
    };
    grouped(a.gate, a.x, D, x_rows, g);
    grouped(a.up, a.x, D, x_rows, u);
    launch_pdl(moe_swiglu_kernel, grid_for(R * F, 256), 256, 0, stream_, h, g, u, R, F, a.clamp, a.weights,
               pair_of_row);
    CUDA_CHECK_LAUNCH();
    grouped(a.down, h, F, nullptr, y);
    launch_pdl(moe_sum_kernel, grid_for(a.n * D, 256), 256, 0, stream_, a.out, y, sum_rows, a.n, a.k, D);
    CUDA_CHECK_LAUNCH();
    ran(kernel_name(kernel));
}

namespace {

// A thread per (token, slot) pair: the pair's place in its token's summation order (ascending expert id, ties by
// slot), as moe_sum_kernel's row list.
__global__ void moe_pair_order_kernel(const int32_t* ids, int64_t n, int k, int32_t* order) {
    pdl_begin();
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n * k; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = p / k;
        const int slot = (int)(p % k);
        order[i * k + slot_rank(ids, i, k, slot, ids[p])] = (int32_t)p;
    }
}

}  // namespace

void CudaBackend::moe_sum_pairs(float* out, const float* rows, const int32_t* ids, int64_t n, int k, int64_t D) {
    if (n * D <= 0) return;
    DSV4_CHECK_MSG(k > 0 && k <= kMaxK, "moe_sum_pairs: k %d outside [1, %d]", k, kMaxK);
    Scratch s(*this);
    int32_t* order = s.get<int32_t>(n * k);
    launch_pdl(moe_pair_order_kernel, grid_for(n * k, 256), 256, 0, stream_, ids, n, k, order);
    CUDA_CHECK_LAUNCH();
    launch_pdl(moe_sum_kernel, grid_for(n * D, 256), 256, 0, stream_, out, rows, order, n, k, D);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::all_reduce_sum(float*, int64_t) {}  // one rank: set_collective refuses more

Status CudaBackend::set_collective(Collective* c) {
    if (c && c->size() > 1)
        return make_error("the CUDA backend cannot take part in a model split over several ranks yet (NCCL is not "
                          "built)");
    collective_ = nullptr;
    return {};
}

}  // namespace dsv4::cuda
