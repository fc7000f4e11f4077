#include "cli/common.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/progress.h"
#include "core/thread_pool.h"
#if defined(DSV4_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace dsv4::cli {

namespace {

// A number check with a plain message; `positive` excludes 0.
CLI::Validator number_at_least_zero(bool positive) {
    return CLI::Validator(
        [positive](std::string& s) -> std::string {
            char* end = nullptr;
            errno = 0;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end == s.c_str() || *end != '\0' || errno == ERANGE || std::isnan(v)) {
                return "'" + s + "' is not a number";
            }
            if (positive && !(v > 0)) return "must be greater than 0 (got " + s + ")";
            if (!positive && v < 0) return "must not be negative (got " + s + ")";
            return {};
        },
        positive ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace

CLI::Validator positive_number() { return number_at_least_zero(true); }
CLI::Validator non_negative_number() { return number_at_least_zero(false); }

const char* const kMtpHelp =
    "MTP sidecar GGUF whose MTP block is attached to the model (its dimensions must match); default: a "
    "*mtp*.gguf file beside the model, when the model holds no MTP block itself";

void add_model_options(CLI::App& app, ModelOptions& m, bool required) {
    auto* o = app.add_option("-m,--model", m.path, "model GGUF");
    if (required) o->required();
    app.add_option("--mtp", m.mtp, kMtpHelp)->option_text("FILE");
}

ModelLoadOptions model_load_options(const ModelOptions& m) {
    ModelLoadOptions o;
    o.mtp_path = m.mtp;
    o.find_mtp = m.mtp.empty();
    o.note = [](const std::string& line) { std::fprintf(stderr, "dsv4: %s\n", line.c_str()); };
    return o;
}

Result<std::unique_ptr<Model>> load_model(const ModelOptions& m, Backend& backend, bool report) {
    const bool tty = isatty(STDERR_FILENO) != 0;
    ModelLoadOptions o = model_load_options(m);
    ProgressLine line("loading " + m.path, tty);
    o.progress = [&line](uint64_t done, uint64_t total) { line.update(done, total); };
    const auto t0 = std::chrono::steady_clock::now();
    auto model = Model::load(m.path, backend, o);
    if (!model.ok()) return model;
    backend.synchronize();
    line.finish();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (report || tty) {
        const double gb = (double)(*model)->weights().bytes_matrices / 1e9;
        std::fprintf(stderr, "dsv4: ready: %.2f GB of weights on %s in %.1f s (%.2f GB/s)\n", gb, backend.name(), s,
                     s > 0 ? gb / s : 0.0);
    }
    return model;
}

void add_device_options(CLI::App& app, DeviceOptions& d) {
    app.add_option("--device", d.device, "compute device: auto, cpu or cuda")
        ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("-t,--threads", d.threads, "CPU threads (default: all cores)");
    app.add_option(
           "--gemm", d.gemm,
           "CUDA only: matmul precision of prefill chunks and batches of 16 or more rows. bf16 runs their "
           "matmuls, experts and attention on the tensor cores with bf16 inputs, as the official model does; f32 "
           "is exact and reproduces the f32 reference to ~1e-6. Decode steps of fewer rows run the exact kernels "
           "either way. auto (default): f32 in exact mode and for `logits`, else bf16. The CPU ignores it")
        ->capture_default_str()->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

void add_kernel_options(CLI::App& app, DeviceOptions& d) {
    app.add_option("--skip-ops", d.skip_ops,
                   "CUDA only, what-if timing: these ops (comma-separated backend op names) launch nothing, so the "
                   "step's time without them shows; the model's numbers are then wrong")
        ->delimiter(',');
    app.add_option("--kernel", d.kernels,
                   "CUDA only: OP=KERNEL runs that kernel wherever it serves a call (ops: matmul, moe_experts, "
                   "attention, hc_pre_norm, sample; kernels in docs/cuda.md); repeatable")
        ->delimiter(',');
}

void add_no_graphs_flag(CLI::App& app, bool& no_graphs) {
    app.add_flag("--no-graphs", no_graphs,
                 "run every op of a small step (decode, a short prompt's chunk) as it is called (default: a step "
                 "that repeats an earlier one replays it as one graph)");
}

Result<std::string> gemm_precision_name(const DeviceOptions& d) {
    const std::string g = d.gemm == "auto" || d.gemm.empty() ? (d.exact ? "f32" : d.gemm_auto) : d.gemm;
    if (g != "f32" && g != "bf16") return make_error("--gemm must be auto, f32 or bf16, not '" + g + "'");
    return g;
}

Result<std::unique_ptr<Backend>> make_backend(const DeviceOptions& d) {
    const int threads = d.threads > 0 ? d.threads : ThreadPool::default_threads();
    DSV4_ASSIGN_OR_RETURN(const std::string gemm, gemm_precision_name(d));
#if defined(DSV4_HAVE_CUDA)
    if (d.device == "cuda" || (d.device == "auto" && cuda_device_available())) {
        CudaOptions o;
        o.gemm = gemm == "f32" ? GemmPrecision::F32 : GemmPrecision::BF16;
        o.skip_ops = d.skip_ops;
        for (const std::string& k : d.kernels)
            if (!set_kernel_force(o.force, k))
                return make_error("--kernel " + k + ": not OP=KERNEL with a known op and kernel (docs/cuda.md)");
        return make_cuda_backend(0, o);
    }
#else
    (void)gemm;  // checked above so a bad value fails the same way in every build
    if (d.device == "cuda") return make_error("this dsv4 was built without CUDA (configure with -DDSV4_CUDA=ON)");
#endif
    if (!d.skip_ops.empty() || !d.kernels.empty()) return make_error("--skip-ops and --kernel apply to CUDA only");
    return make_cpu_backend(threads);
}

Result<size_t> parse_byte_size(const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    const std::string unit = end ? std::string(end) : "";
    double scale = 1;
    if (unit == "K" || unit == "k") scale = 1024.0;
    else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (!unit.empty()) return make_error("'" + text + "' is not a size (a number with K, M, G or T)");
    if (end == text.c_str() || errno != 0 || !std::isfinite(v) || v * scale < 1 || v * scale > 1e18)
        return make_error("'" + text + "' is not a positive size (a number with K, M, G or T)");
    return (size_t)(v * scale);
}

Result<std::vector<int32_t>> read_tokens(const std::string& path) {
    std::ifstream in(path);
    if (!in) return make_error("cannot open tokens file '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_array()) return make_error("tokens file '" + path + "' is not a JSON array");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
        if (!v.is_number_integer()) return make_error("tokens file '" + path + "' holds a non-integer entry");
        const int64_t x = v.get<int64_t>();
        if (x < 0 || x > INT32_MAX) return make_error("token id " + std::to_string(x) + " is out of range");
        ids.push_back((int32_t)x);
    }
    return ids;
}

}  // namespace dsv4::cli
