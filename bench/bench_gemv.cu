// bench_gemv: decode-time weight streaming on the CUDA backend at DeepSeek-V4-Flash shapes. Times the
// backend's matmul (n = 1..8 activation rows) for every decode weight format and moe_experts (256 experts,
// 6 per token, gate/up IQ2_XXS, down Q2_K) with random expert ids, and prints the GB/s of weight bytes the
// call must read and the fraction of 4.0 TB/s (about what a bf16 cuBLAS GEMV reaches on an H200).
//
// Method: CUDA events around each call, after warm-up, median of the calls; weights rotate over copies
// totalling >= 256 MB (five times the 50 MB L2) so that no call finds its weights in L2; a spin kernel
// keeps the GPU busy while the host queues the timed calls, so host launch cost is not counted (the GPU's
// own per-launch gap is). The kernels run are those the backend chooses (cuda_select.cu); --force OP=KERNEL
// (kernel names in cuda_kernels.h) times one kernel wherever it serves a call, so one GPU session can A/B them.
//
// `floor` rows time a plain read of the same bytes (read_floor_kernel): the least a call of that size takes.
// --no-rotate keeps one copy of each weight, so calls smaller than L2 read it from there (A/B of DRAM).
// --bf16 runs the backend in the bf16 GEMM mode, where calls of 16 rows or more take the tensor-core kernels.
// --every-type times every block type the decode kernels read (the expert shapes, wo_b and an LM-head-sized
// matrix, whose 100-600 MB show each codec's streaming rate apart from a call's fixed cost) and the routed
// experts with all three stacks in each type.
//
// usage: bench_gemv [--n 1,2,4,8] [--reps N] [--only NAME] [--quick] [--no-rotate] [--bf16] [--every-type]
//                   [--force OP=KERNEL ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "format/ggml_type.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

using namespace dsv4;

namespace {

constexpr double kRotateBytes = 256e6;
constexpr double kReference = 4.0e12;  // bytes/s: the fraction printed is of this

__global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;  // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = (uint8_t)(z ^ (z >> 31));
    }
}

__global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

// The read floor: every byte of [p, p + n16 * 16) read once with 16-byte non-caching loads, UNROLL loads in
// flight per thread, folded into one word per block (written, so nothing is optimized away). What a weight
// stream of that size can take at best with a one-wave grid; the GEMV's time minus this is its own overhead.
template <int UNROLL>
__global__ void read_floor_kernel(const uint4* p, size_t n16, uint32_t* out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const uint4* q = p + i + u * stride;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(q));
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) acc ^= p[i].x;
    acc = __reduce_xor_sync(0xffffffffu, acc);
    if (threadIdx.x % 32 == 0) atomicXor(out + blockIdx.x, acc);
}

struct Options {
    std::vector<int64_t> ns = {1, 2, 4, 8};
    int reps = 50;
    std::string only;  // run only cases whose name contains this
    bool quick = false;
    bool no_rotate = false;  // one weight copy: calls under the 50 MB L2 then read it from L2
    bool every_type = false;  // every decode block type, not only V4-Flash's usual ones
};

class Bench {
public:
    Bench(Backend& b, cuda::CudaBackend& cb, const Options& o) : b_(b), cb_(cb), o_(o) {}

    // Device buffer of random bytes, owned by the bench.
    uint8_t* random_bytes(size_t n) {
        auto* p = static_cast<uint8_t*>(b_.alloc(n));
        owned_.push_back(p);
        fill_bytes_kernel<<<1024, 256, 0, cb_.stream()>>>(p, n, seed_++);
        CUDA_CHECK(cudaGetLastError());
        return p;
    }
    float* random_floats(int64_t n, float lo, float hi) {
        std::mt19937 g((unsigned)seed_++);
        std::uniform_real_distribution<float> u(lo, hi);
        std::vector<float> h((size_t)n);
        for (auto& v : h) v = u(g);
        auto* p = static_cast<float*>(b_.alloc(h.size() * sizeof(float)));
        owned_.push_back(p);
        b_.upload(p, h.data(), h.size() * sizeof(float));
        return p;
    }
    void release() {
        b_.synchronize();
        for (void* p : owned_) b_.free(p);
        owned_.clear();
    }

    // Copies of a call's bytes that the calls rotate over: enough to exceed kRotateBytes (so no call finds its
    // bytes in L2), or one with --no-rotate.
    int copies_for(double bytes) const {
        return o_.no_rotate ? 1 : (int)std::max(1.0, std::ceil(kRotateBytes / bytes));
    }

    // Median seconds of one call(i), i = 0, 1, ... (the callee rotates its buffers by i).
    double time(const std::function<void(int)>& call) {
        for (int i = 0; i < 3; ++i) call(i);
        const int reps = o_.quick ? 10 : o_.reps;
        std::vector<cudaEvent_t> ev(2 * (size_t)reps);
        for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
        spin_kernel<<<1, 1, 0, cb_.stream()>>>(4'000'000);  // ~2 ms: the host queues the calls meanwhile
        for (int i = 0; i < reps; ++i) {
            CUDA_CHECK(cudaEventRecord(ev[2 * i], cb_.stream()));
            call(3 + i);
            CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], cb_.stream()));
        }
        CUDA_CHECK(cudaStreamSynchronize(cb_.stream()));
        std::vector<float> ms((size_t)reps);
        for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
        for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
        std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
        return ms[reps / 2] * 1e-3;
    }

    void report(const char* op, const std::string& shape, GgmlType t, int64_t n, double bytes, double secs) {
        std::printf("%-10s %-22s %-8s %2lld %9.2f %9.2f %8.0f %6.1f%%\n", op, shape.c_str(),
                    std::string(ggml_type_name(t)).c_str(), (long long)n, bytes * 1e-6, secs * 1e6, bytes / secs * 1e-9,
                    100.0 * bytes / secs / kReference);
        std::fflush(stdout);
    }

    // groups matmuls of [M, K] (as the model's wo_a: group g reads columns [g K, (g+1) K) of x and writes
    // columns [g M, (g+1) M) of y).
    void dense(const char* op, GgmlType t, int64_t M, int64_t K, int groups) {
        if (!o_.only.empty() && std::string(op).find(o_.only) == std::string::npos) return;
        const size_t row_bytes = ggml_row_bytes(ggml_traits(t), K);
        const double call_bytes = (double)groups * M * row_bytes;
        const int copies = copies_for(call_bytes);
        std::vector<Weight> ws;
        for (int c = 0; c < copies; ++c) {
            Weight w;
            w.type = t;
            w.cols = K;
            w.rows = (int64_t)groups * M;
            w.row_bytes = row_bytes;
            w.data = random_bytes((size_t)groups * M * row_bytes);
            w.name = op;
            ws.push_back(w);
        }
        for (int64_t n : o_.ns) {
            const float* x = random_floats(n * groups * K, -1, 1);
            auto* y = static_cast<float*>(b_.alloc((size_t)(n * groups * M) * sizeof(float)));
            owned_.push_back(y);
            const double s = time([&](int i) {
                // One batch of the groups, as the model runs its grouped projection.
                const Weight& w = ws[(size_t)i % ws.size()];
                std::vector<Weight> parts((size_t)groups);
                std::vector<MatmulJob> jobs((size_t)groups);
                for (int g = 0; g < groups; ++g) {
                    parts[(size_t)g] = w.row_range(g * M, M);
                    jobs[(size_t)g] = {y + g * M, groups * M, x + g * K, groups * K, &parts[(size_t)g]};
                }
                b_.matmul_batch(jobs, n);
            });
            std::string shape = std::to_string(M) + "x" + std::to_string(K);
            if (groups > 1) shape = std::to_string(groups) + "x" + shape;
            report(op, shape, t, n, call_bytes, s);
        }
        release();
    }

    // The read floor of a call of `bytes` (read_floor_kernel, rotated like the weights), one wave of blocks.
    void floor(double bytes) {
        if (!o_.only.empty() && std::string("floor").find(o_.only) == std::string::npos) return;
        const size_t n16 = (size_t)(bytes / 16);
        const int copies = copies_for(bytes);
        std::vector<const uint4*> bufs;
        for (int c = 0; c < copies; ++c) bufs.push_back(reinterpret_cast<const uint4*>(random_bytes(n16 * 16)));
        const int blocks = 4 * cb_.props().multiProcessorCount;
        auto* out = static_cast<uint32_t*>(b_.alloc((size_t)blocks * sizeof(uint32_t)));
        owned_.push_back(out);
        const double s = time([&](int i) {
            read_floor_kernel<4><<<blocks, 512, 0, cb_.stream()>>>(bufs[(size_t)i % bufs.size()], n16, out);
            CUDA_CHECK(cudaGetLastError());
        });
        char shape[32];
        std::snprintf(shape, sizeof shape, "%.1f MB", bytes * 1e-6);
        report("floor", shape, GgmlType::F32, 1, bytes, s);
        release();
    }

    // moe_experts with V4-Flash's routed experts: E experts, k per token, gate/up [F, D], down [D, F].
    void experts(GgmlType tg, GgmlType td, int64_t n, int E, int k, int64_t D, int64_t F) {
        if (!o_.only.empty() && std::string("moe").find(o_.only) == std::string::npos) return;
        auto stack = [&](GgmlType t, int64_t rows, int64_t cols) {
            Weight w;
            w.type = t;
            w.cols = cols;
            w.rows = rows;
            w.n_experts = E;
            w.row_bytes = ggml_row_bytes(ggml_traits(t), cols);
            w.data = random_bytes((size_t)E * rows * w.row_bytes);
            w.name = "ffn_exps";
            return w;
        };
        MoeArgs a;
        a.gate = stack(tg, F, D);
        a.up = stack(tg, F, D);
        a.down = stack(td, D, F);
        const double per_expert = (double)F * (a.gate.row_bytes + a.up.row_bytes) + (double)D * a.down.row_bytes;
        // Id sets: each token k distinct random experts; the bytes are those of the distinct chosen experts.
        constexpr int kSets = 64;
        std::mt19937 g(1234);
        std::vector<int32_t> ids;
        double bytes = 0;
        for (int s = 0; s < kSets; ++s) {
            std::vector<int32_t> chosen;
            for (int64_t i = 0; i < n; ++i) {
                std::vector<int32_t> perm(E);
                for (int e = 0; e < E; ++e) perm[e] = e;
                std::shuffle(perm.begin(), perm.end(), g);
                ids.insert(ids.end(), perm.begin(), perm.begin() + k);
                chosen.insert(chosen.end(), perm.begin(), perm.begin() + k);
            }
            std::sort(chosen.begin(), chosen.end());
            bytes += (double)(std::unique(chosen.begin(), chosen.end()) - chosen.begin()) * per_expert / kSets;
        }
        auto* id_dev = static_cast<int32_t*>(b_.alloc(ids.size() * sizeof(int32_t)));
        owned_.push_back(id_dev);
        b_.upload(id_dev, ids.data(), ids.size() * sizeof(int32_t));
        a.x = random_floats(n * D, -1, 1);
        a.weights = random_floats(n * k, 0.05f, 1.0f);
        a.out = static_cast<float*>(b_.alloc((size_t)(n * D) * sizeof(float)));
        owned_.push_back(a.out);
        a.n = n;
        a.k = k;
        a.clamp = 10.0f;
        const double s = time([&](int i) {
            MoeArgs c = a;
            c.ids = id_dev + (size_t)(i % kSets) * n * k;
            b_.moe_experts(c);
        });
        char shape[64];
        std::snprintf(shape, sizeof shape, "E%d k%d %lldx%lld", E, k, (long long)D, (long long)F);
        char op[32];
        std::snprintf(op, sizeof op, "moe %s/%s", std::string(ggml_type_name(tg)).c_str(),
                      std::string(ggml_type_name(td)).c_str());
        report(op, shape, tg, n, bytes, s);
        release();
    }

private:
    Backend& b_;
    cuda::CudaBackend& cb_;
    const Options& o_;
    std::vector<void*> owned_;
    uint64_t seed_ = 1;
};

std::vector<int64_t> parse_list(const char* s) {
    std::vector<int64_t> v;
    for (const char* p = s; *p;) {
        v.push_back(std::strtoll(p, nullptr, 10));
        p = std::strchr(p, ',');
        if (!p) break;
        ++p;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CudaOptions cuda_options;
    std::string forced;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--n" && i + 1 < argc)
            o.ns = parse_list(argv[++i]);
        else if (a == "--reps" && i + 1 < argc)
            o.reps = std::max(1, std::atoi(argv[++i]));
        else if (a == "--only" && i + 1 < argc)
            o.only = argv[++i];
        else if (a == "--quick")
            o.quick = true;
        else if (a == "--bf16")
            cuda_options.gemm = GemmPrecision::BF16;
        else if (a == "--no-rotate")
            o.no_rotate = true;
        else if (a == "--every-type")
            o.every_type = true;
        else if (a == "--force" && i + 1 < argc) {
            const std::string f = argv[++i];
            if (!set_kernel_force(cuda_options.force, f)) {
                std::fprintf(stderr, "bench_gemv: --force %s: not OP=KERNEL with a kernel of cuda_kernels.h\n", f.c_str());
                return 2;
            }
            forced += " " + f;
        } else {
            std::fprintf(stderr,
                         "usage: bench_gemv [--n 1,2,4,8] [--reps N] [--only NAME] [--quick] [--no-rotate] [--bf16] "
                         "[--every-type] [--force OP=KERNEL ...]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }
    if (!cuda_device_available()) {
        std::fprintf(stderr, "bench_gemv: no CUDA device\n");
        return 1;
    }
    auto made = make_cuda_backend(0, cuda_options);
    if (!made.ok()) {
        std::fprintf(stderr, "bench_gemv: %s\n", made.error().c_str());
        return 1;
    }
    std::unique_ptr<Backend> backend = std::move(*made);
    auto& cb = static_cast<cuda::CudaBackend&>(*backend);
    std::printf("bench_gemv: %s, %d SMs, L2 %d MB; kernels %s; weights rotated over >= %.0f MB; median of %d calls\n",
                cb.props().name, cb.props().multiProcessorCount, cb.props().l2CacheSize >> 20,
                forced.empty() ? "as chosen" : ("forced:" + forced).c_str(), o.no_rotate ? 0.0 : kRotateBytes * 1e-6,
                o.quick ? 10 : o.reps);
    std::printf("%-10s %-22s %-8s %2s %9s %9s %8s %7s\n", "op", "shape", "type", "n", "MB/call", "us", "GB/s",
                "of 4TB/s");
    Bench b(*backend, cb, o);
    // Dense V4-Flash projections in their file format (Q8_0), the router in F32 and F16, the compressors in F16.
    const GgmlType q8 = GgmlType::Q8_0;
    for (double mb : {4.5, 8.9, 17.8, 35.6, 563.0}) b.floor(mb * 1e6);
    b.dense("q_a", q8, 1024, 4096, 1);
    b.dense("q_b", q8, 32768, 1024, 1);
    b.dense("kv", q8, 512, 4096, 1);
    b.dense("wo_a", q8, 1024, 4096, 8);
    b.dense("wo_b", q8, 4096, 8192, 1);
    b.dense("shexp_gu", q8, 2048, 4096, 1);
    b.dense("shexp_dn", q8, 4096, 2048, 1);
    b.dense("lm_head", q8, 129280, 4096, 1);
    b.dense("router", GgmlType::F32, 256, 4096, 1);
    b.dense("router", GgmlType::F16, 256, 4096, 1);
    // The compressors' kv and gate projections (F16, one input): the attention's and the indexer's.
    b.dense("compressor", GgmlType::F16, 1024, 4096, 2);
    b.dense("idx_comp", GgmlType::F16, 256, 4096, 2);
    // Every other decode format on an expert-sized and a large matrix (with --every-type, every block type the
    // decode kernels read, and an LM-head-sized matrix too).
    std::vector<GgmlType> types = {GgmlType::MXFP4, GgmlType::Q2_K,    GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q6_K,
                                   GgmlType::IQ2_XXS, GgmlType::F16, GgmlType::BF16, GgmlType::F32};
    if (o.every_type)
        types = {GgmlType::Q8_0,   GgmlType::Q6_K,   GgmlType::Q5_K,    GgmlType::Q5_1,  GgmlType::Q5_0,
                 GgmlType::Q4_K,   GgmlType::Q4_1,   GgmlType::Q4_0,    GgmlType::IQ4_XS, GgmlType::IQ4_NL,
                 GgmlType::MXFP4,  GgmlType::Q3_K,   GgmlType::IQ3_S,   GgmlType::IQ3_XXS, GgmlType::Q2_K,
                 GgmlType::IQ2_S,  GgmlType::IQ2_XS, GgmlType::IQ2_XXS, GgmlType::IQ1_M, GgmlType::IQ1_S,
                 GgmlType::F16,    GgmlType::BF16,   GgmlType::F32};
    for (GgmlType t : types) {
        b.dense("expert_gu", t, 2048, 4096, 1);
        b.dense("expert_dn", t, 4096, 2048, 1);
        b.dense("wo_b", t, 4096, 8192, 1);
        if (o.every_type) b.dense("lm_head", t, 129280, 4096, 1);
    }
    // Routed experts: 256, 6 per token, gate/up IQ2_XXS [2048, 4096], down Q2_K [4096, 2048].
    for (int64_t n : o.ns) b.experts(GgmlType::IQ2_XXS, GgmlType::Q2_K, n, 256, 6, 4096, 2048);
    // With --every-type, the same with all three stacks in each block type (the first n only).
    if (o.every_type && !o.ns.empty())
        for (GgmlType t : types) b.experts(t, t, o.ns.front(), 256, 6, 4096, 2048);
    return 0;
}
