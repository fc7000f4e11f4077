// CUDA mixture of experts. Routing: a warp per token picks the top-k of sqrt(softplus(logit)) + bias (or the
// hash table's experts) with the CPU's tie rule. Experts: the (token, slot) pairs are grouped per expert on
// the device (no host round trip), the gate/up/down projections run as grouped matmuls that read only the
// chosen experts' weights, and each token's slots are summed in ascending expert id, the CPU's order.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gemm_tc.cuh"
#include "kernels/cuda/cuda_matmul.cuh"
#include "kernels/cuda/cuda_moe_decode.cuh"
#include "ops/numerics.h"

namespace dsv4::cuda {

namespace {

constexpr int kMaxExpertsPerLane = 64;  // n_experts <= 2048
constexpr int kMaxK = 32;

__device__ __forceinline__ float route_score(const float* logits, int e) { return sqrtf(softplus(logits[e])); }

// One warp per token. Lane l holds the scores of experts l + 32 c (c < C) in registers, computed once; each
// of the k picks is a warp arg-max with the winner's score carried along, so the weights need no second
// read of the logits. The raw scores are summed in slot order, as the CPU.
template <int C>
__global__ void moe_route_kernel(int32_t* ids, float* weights, const float* logits, const float* bias,
                                 const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k,
                                 float scale, bool norm) {
    pdl_begin();
    const int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (i >= n) return;  // warp-uniform
    const float* lg = logits + i * n_experts;
    int32_t* out = ids + i * k;
    float* w = weights + i * k;
    float sum = 0;  // lane 0's running sum of the chosen scores, in slot order
    if (tid2eid) {
        if (lane == 0)
            for (int j = 0; j < k; ++j) {
                const int e = tid2eid[(int64_t)tokens[i] * k + j];
                if (e < 0 || e >= n_experts) {
                    printf("dsv4: CUDA moe_route: token %lld slot %d has expert %d, outside [0, %d)\n", (long long)i,
                           j, e, n_experts);
                    __trap();
                }
                out[j] = e;
                w[j] = route_score(lg, e);
                sum += w[j];
            }
    } else {
        float score[C], sel[C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int e = lane + kWarp * c;
            score[c] = e < n_experts ? route_score(lg, e) : 0.0f;
            sel[c] = e < n_experts ? score[c] + (bias ? bias[e] : 0.0f) : 0.0f;
        }
        uint64_t taken = 0;  // bit c: expert lane + 32 c already chosen
        for (int j = 0; j < k; ++j) {
            float best = -INFINITY, best_s = 0.0f;
            int best_e = n_experts;
#pragma unroll
            for (int c = 0; c < C; ++c) {
                const int e = lane + kWarp * c;
                if (e < n_experts && !(taken >> c & 1) && (best_e == n_experts || sel[c] > best)) {
                    best = sel[c];  // ascending e: the first of equals wins
                    best_s = score[c];
                    best_e = e;
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const float os = __shfl_xor_sync(0xffffffffu, best_s, o);
                const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (oe < n_experts && (best_e == n_experts || ob > best || (ob == best && oe < best_e))) {
                    best = ob;
                    best_s = os;
                    best_e = oe;
                }
            }
            if (best_e % kWarp == lane) taken |= 1ull << (best_e / kWarp);
            if (lane == 0) {
                out[j] = best_e;
                w[j] = best_s;
                sum += best_s;
            }
        }
    }
    sum = __shfl_sync(0xffffffffu, sum, 0);
    __syncwarp();
    for (int j = lane; j < k; j += kWarp) w[j] = (norm ? w[j] / sum : w[j]) * scale;
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

void CudaBackend::moe_route(int32_t* ids, float* weights, const float* logits, const float* bias,
                            const int32_t* tid2eid, const int32_t* tokens, int64_t n, int n_experts, int k, float scale,
                            bool norm) {
    if (n <= 0 || k <= 0) return;
    DSV4_CHECK_MSG(n_experts > 0 && n_experts <= kWarp * kMaxExpertsPerLane && k <= n_experts,
                   "moe_route: %d experts, k %d", n_experts, k);
    const int threads = 256;
    const unsigned grid = ceil_div(n * kWarp, threads);
    auto launch = [&](auto kernel) {
        launch_pdl(kernel, grid, threads, 0, stream_, ids, weights, logits, bias, tid2eid, tokens, n, n_experts, k,
                   scale, norm);
    };
    if (n_experts <= kWarp * 8) launch(moe_route_kernel<8>);
    else if (n_experts <= kWarp * 16) launch(moe_route_kernel<16>);
    else launch(moe_route_kernel<kMaxExpertsPerLane>);
    CUDA_CHECK_LAUNCH();
}

void CudaBackend::moe_experts(const MoeArgs& a) {
    const int64_t D = a.gate.cols, F = a.gate.rows;
    DSV4_CHECK(a.down.cols == F && a.down.rows == D && a.up.rows == F && a.up.cols == D);
    DSV4_CHECK_MSG(a.k > 0 && a.k <= kMaxK, "moe_experts: k %d outside [1, %d]", a.k, kMaxK);
    if (a.n <= 0) return;
    if (moe_experts_decode(*this, a)) return;  // few (token, slot) pairs: no grouping (cuda_moe_decode.cu)
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
    if (moe_tc_wanted(*this, a)) {  // bf16 mode, prefill-sized: experts on the tensor cores (cuda_gemm_tc.cu)
        moe_experts_tc(*this, a, offsets, x_rows, pair_of_row, y);
        launch_pdl(moe_sum_kernel, grid_for(a.n * D, 256), 256, 0, stream_, a.out, y, sum_rows, a.n, a.k, D);
        CUDA_CHECK_LAUNCH();
        return;
    }
    float* g = s.get<float>(R * F);
    float* u = s.get<float>(R * F);
    float* h = s.get<float>(R * F);

    auto grouped = [&](const Weight& w, const float* x, int64_t x_stride, const int32_t* rows, float* out) {
        launch_grouped_matmul(w, x, x_stride, rows, out, R, offsets, E, tables_, stream_);
    };
    grouped(a.gate, a.x, D, x_rows, g);
    grouped(a.up, a.x, D, x_rows, u);
    launch_pdl(moe_swiglu_kernel, grid_for(R * F, 256), 256, 0, stream_, h, g, u, R, F, a.clamp, a.weights,
               pair_of_row);
    CUDA_CHECK_LAUNCH();
    grouped(a.down, h, F, nullptr, y);
    launch_pdl(moe_sum_kernel, grid_for(a.n * D, 256), 256, 0, stream_, a.out, y, sum_rows, a.n, a.k, D);
    CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
