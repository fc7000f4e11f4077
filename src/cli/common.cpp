#include "cli/common.h"

#include "core/thread_pool.h"
#if defined(DSV4_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace dsv4::cli {

void add_device_options(CLI::App& app, DeviceOptions& d) {
    app.add_option("--device", d.device, "compute device: auto, cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("-t,--threads", d.threads, "CPU threads (default: all cores)");
}

Result<std::unique_ptr<Backend>> make_backend(const DeviceOptions& d) {
    const int threads = d.threads > 0 ? d.threads : ThreadPool::default_threads();
#if defined(DSV4_HAVE_CUDA)
    if (d.device == "cuda" || (d.device == "auto" && cuda_device_available())) return make_cuda_backend(0);
#else
    if (d.device == "cuda") return make_error("this dsv4 was built without CUDA (configure with -DDSV4_CUDA=ON)");
#endif
    return make_cpu_backend(threads);
}

}  // namespace dsv4::cli
