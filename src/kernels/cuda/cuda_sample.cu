// The token draw on the device (Backend::sample, ops/sample_args.h). One cluster of CL blocks per row (8; 16 for
// vocabularies past 8 slices: select_sample): each block holds a contiguous slice of
// the row in shared memory, so every pass after the load reads shared memory, and the blocks combine their
// partial results through distributed shared memory (one cluster barrier per exchange). Selections are radix
// selects over order-preserving keys (4 digits of 8 bits) measured in counts (top-k, top_logprobs) or integer
// weights (top-p), so every sum is exact and the result is the CPU oracle's bit for bit; the draw walks the
// kept set in id order.
//
// The pieces are in cuda_sample_row.cuh (the exchanges, scans and sums), cuda_sample_walk.cuh (the draw's walks)
// and cuda_sample_select.cuh (the selections); here the kernel that strings them
// together, its launch and the device facts the kernel choice reads.
#include "core/check.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_sample_select.cuh"
#include "kernels/cuda/cuda_select.cuh"

namespace dsv4::cuda {

namespace {

using namespace draw;

template <int CL>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(SampleOut* out, const float* logits, int64_t V, const SampleArgs* args, const SampleAdjust* adjust) {
    // Dynamic shared memory: the block's state, then its slice (static shared memory stops at 48 KB).
    extern __shared__ __align__(16) unsigned char smem[];
    Shared& sh = *reinterpret_cast<Shared*>(smem);
    float* slice = reinterpret_cast<float*>(smem + sizeof(Shared));
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int64_t row_i = blockIdx.x / CL;
    const SampleArgs a = args[row_i];
    const float* raw = logits + a.row * V;
    const int64_t S = (V + CL - 1) / CL;
    const int64_t lo = rank * S, hi = min(V, lo + S), n = hi > lo ? hi - lo : 0;
    // The histograms start at zero (radix_select leaves them so).
    uint4* z = reinterpret_cast<uint4*>(&sh.sub[0][0][0]);
    for (int i = threadIdx.x; i < (int)(sizeof(sh.sub) / sizeof(uint4)); i += kThreads) z[i] = make_uint4(0, 0, 0, 0);
    if (threadIdx.x == 0) sh.cut.active = false;  // no selection has left a cut
    // The slice into shared memory, eight loads in flight per thread, scanned on the way (each thread's ids
    // ascending, as scan_add needs). The scan's exchange is the barrier before any thread reads the slice.
    Scan own = kScanEmpty;
    for (int64_t j0 = threadIdx.x; j0 < n; j0 += 8 * kThreads) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = j0 + u * kThreads < n ? raw[lo + j0 + u * kThreads] : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (j0 + u * kThreads < n) {
                slice[j0 + u * kThreads] = v[u];
                scan_add(own, v[u], (int32_t)(lo + j0 + u * kThreads));
            }
    }
    Row<CL> r{slice, lo, n, rank, sh};
    SampleOut* o = out + row_i;
    auto finish_error = [&](int32_t status, int32_t bad) {
        if (rank == 0 && threadIdx.x == 0) {
            o->status = status;
            o->bad_token = bad;
            o->token = -1;
            o->n_top = 0;
            o->logprob = 0;
        }
        cluster.sync();  // no block leaves while another may still read its shared memory
    };

    // The raw row: its scan, the log-sum-exp, the top alternatives.
    const Scan sr = scan_merge(r, own);
    if (sr.first_bad != INT32_MAX) return finish_error(kSampleBadLogit, sr.first_bad);
    const Measure w1{true, sr.max, sample_scale(1.0f)};
    const bool drawn = a.temperature > 0.0f;
    const Measure wt{true, sr.max, drawn ? sample_scale(a.temperature) : 1.0f};
    // Without adjustments the adjusted row is the raw one (same scan), so the top-p mass over every finite
    // token (no top-k cut) comes with the log-sum-exp's pass: -inf tokens weigh 0 in both.
    const bool mass_now = drawn && a.adjust_count == 0 && a.top_p < 1.0f && !(a.top_k > 0 && a.top_k < sr.n_finite);
    // That pass also adds each finite token's weight to the first digit of the top-p selection, which then runs
    // before the alternatives' selection (the two share the histograms; neither changes the row).
    const Bound all_finite{sample_key(-kInf), -1};
    // The shortest prefix that reaches ceil(top_p * mass) (at least one token).
    auto top_p_need = [&](u64 mass) {
        const u64 need = (u64)ceil((double)a.top_p * (double)mass);
        return need > 0 ? need : 1;
    };
    HistAdd first(sh, true);
    u64 S1, mass_raw;
    sum_row2(
        r,
        [&](int j, float x, u64& ta, u64& tb) {
            ta = w1(x);
            tb = 0;
            if (mass_now) {
                tb = wt(x);
                if (x > -kInf) {
                    const uint32_t k = sample_key(x);
                    first.add(k, k >> kFirstShift, tb);
                }
            }
        },
        S1, mass_raw);
    Bound keep_p = all_finite;
    if (mass_now) {  // a cut inside a tie stays unresolved until the draw (sh.cut, draw_cut)
        first.finish();
        keep_p = radix_select(r, all_finite, wt, top_p_need(mass_raw), &first, &sh.cut);  // no adjustment: wt is the measure
    }
    int n_top = a.n_top < V ? a.n_top : (int)V;
    if (n_top > kSampleMaxTop) n_top = kSampleMaxTop;
    if (n_top == 1 && sr.max != 0.0f) {
        // The best alternative is the row's first maximum (a nonzero maximum has one key; +0 and -0 do not).
        if (threadIdx.x == 0) {
            sh.top_ids[0] = sr.first_max;
            sh.top_l[0] = sr.max;
            sh.top_count = 1;
        }
    } else if (n_top > 0) {
        const Bound all{0u, -1};  // every token that is not NaN
        gather_top(r, radix_select(r, all, Measure{false, 0, 0}, (u64)n_top));
    }

    // Adjustments, then the adjusted row's scan.
    Scan s = sr;
    if (a.adjust_count > 0) {
        for (int j = threadIdx.x; j < a.adjust_count; j += kThreads) {
            const SampleAdjust e = adjust[a.adjust_begin + j];
            if (e.token >= lo && e.token < lo + n) slice[e.token - lo] = sample_adjust(slice[e.token - lo], e);
        }
        __syncthreads();
        s = scan_row(r);
        if (s.first_bad != INT32_MAX) return finish_error(kSampleBadAdjusted, s.first_bad);
    }
    if (s.n_finite == 0) return finish_error(kSampleAllBanned, -1);

    // The token and its logprob, written by one thread of the cluster.
    const double lse = (double)sr.max + log((double)S1 / kSampleFixedOne);
    auto put_token = [&](int32_t t) {
        o->token = t;
        o->logprob = t >= 0 ? (float)((double)raw[t] - lse) : 0.0f;
    };
    int32_t token = s.first_max;
    if (drawn) {
        const Measure wa{true, s.max, wt.scale};
        // The last selection's cut may stay inside a tie (sh.cut); a top-k cut that top-p then selects within
        // is resolved. At most one selection gets the cut: top-p with the log-sum-exp's pass excludes top-k.
        Bound keep = all_finite;
        const bool top_p_after = !mass_now && a.top_p < 1.0f;
        if (a.top_k > 0 && a.top_k < s.n_finite)
            keep = radix_select(r, all_finite, Measure{false, 0, 0}, (u64)a.top_k, nullptr,
                                top_p_after ? nullptr : &sh.cut);
        if (mass_now) {
            keep = keep_p;  // selected above
        } else if (top_p_after) {
            keep = radix_select(r, keep, wa, top_p_need(sum_within(r, keep, wa)), nullptr, &sh.cut);
        }
        auto weight = [&](float x) -> u64 {
            const u64 w = sample_weight(x, s.max, wa.scale);
            return w >= a.min_p_fixed ? w : 0;
        };
        auto kept_w = [&](int j) -> u64 {
            const float x = slice[j];
            return in_bound(keep, sample_key(x), (int32_t)(lo + j)) ? weight(x) : 0;
        };
        bool report = false;
        token = sh.cut.active ? draw_cut(r, a.u, sh.cut, weight, report) : draw_kept(r, a.u, kept_w, report);
        if (report && threadIdx.x == 0) put_token(token);  // one block of the cluster
    }

    if (rank == 0) {
        const int nt = n_top > 0 ? min(sh.top_count, n_top) : 0;
        if (threadIdx.x == 0) {
            o->status = kSampleOk;
            o->bad_token = -1;
            if (!drawn) put_token(token);
            o->n_top = nt;
        }
        if ((int)threadIdx.x < nt) {
            o->top_ids[threadIdx.x] = sh.top_ids[threadIdx.x];
            o->top_logprobs[threadIdx.x] = (float)((double)sh.top_l[threadIdx.x] - lse);
        }
    }
    cluster.sync();
}

static_assert(sizeof(Shared) % 16 == 0, "the slice after the state stays 16-byte aligned");

// Dynamic shared memory of a block: its state and its slice of the row.
template <int CL>
size_t smem_bytes(int64_t n_vocab) {
    return sizeof(Shared) + (size_t)((n_vocab + CL - 1) / CL) * sizeof(float);
}

template <int CL>
bool fits(int64_t n_vocab) {
    return n_vocab > 0 && n_vocab < INT32_MAX && (n_vocab + CL - 1) / CL <= kMaxSlice &&
           smem_bytes<CL>(n_vocab) <= device_limits().smem_optin;
}

// The kernel's attributes for `smem` bytes of dynamic shared memory (raised as vocabularies need; the cluster
// of 16 is beyond the portable size of 8).
template <int CL>
void prepare(size_t smem) {
    static size_t smem_set = 0;
    if (smem <= smem_set) return;
    CUDA_CHECK(cudaFuncSetAttribute(sample_kernel<CL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (CL > 8) CUDA_CHECK(cudaFuncSetAttribute(sample_kernel<CL>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    smem_set = smem;
}

template <int CL>
cudaLaunchConfig_t config(int64_t rows, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(rows * CL));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CL;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

template <int CL>
int max_clusters(int64_t n_vocab) {
    // Found once per vocabulary size (a device property: the SMs of a GPC that can host one cluster each).
    static int64_t for_vocab = -1;
    static int count = 0;
    if (n_vocab == for_vocab) return count;
    count = 0;
    if (fits<CL>(n_vocab)) {
        const size_t smem = smem_bytes<CL>(n_vocab);
        prepare<CL>(smem);
        cudaLaunchAttribute attr[1];
        const cudaLaunchConfig_t cfg = config<CL>(1, smem, nullptr, attr);
        if (cudaOccupancyMaxActiveClusters(&count, sample_kernel<CL>, &cfg) != cudaSuccess) {
            (void)cudaGetLastError();
            count = 0;
        }
    }
    for_vocab = n_vocab;
    return count;
}

template <int CL>
void launch_draw(SampleOut* out, const float* logits, int64_t n_vocab, const SampleArgs* args, int64_t rows,
                 const SampleAdjust* adjust, cudaStream_t stream) {
    DSV4_CHECK_MSG(fits<CL>(n_vocab) && rows * CL <= INT32_MAX,
                   "sample: a vocabulary of %lld tokens does not fit the draw's shared memory", (long long)n_vocab);
    const size_t smem = smem_bytes<CL>(n_vocab);
    prepare<CL>(smem);
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = config<CL>(rows, smem, stream, attr);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, sample_kernel<CL>, out, logits, n_vocab, args, adjust));
}

}  // namespace

int sample_max_clusters(SampleKernel k, int64_t n_vocab) {
    return k == SampleKernel::cluster16 ? max_clusters<16>(n_vocab) : max_clusters<8>(n_vocab);
}

void CudaBackend::sample(SampleOut* out, const float* logits, int64_t n_vocab, const SampleArgs* args, int64_t rows,
                         const SampleAdjust* adjust) {
    if (skipped("sample")) return;
    if (rows <= 0) return;
    const SampleKernel k = select_sample(*this, n_vocab);
    if (k == SampleKernel::cluster16)
        launch_draw<16>(out, logits, n_vocab, args, rows, adjust, stream_);
    else
        launch_draw<8>(out, logits, n_vocab, args, rows, adjust, stream_);
    ran(kernel_name(k));
}

}  // namespace dsv4::cuda
