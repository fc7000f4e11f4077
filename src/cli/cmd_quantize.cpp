// `dsv4 quantize IN.gguf OUT.gguf --type T | --recipe NAME [--tensor-type REGEX=TYPE ...]`: requantize a
// deepseek4 GGUF into one type or a named mix (model/quant_recipe.h), multi-threaded, with progress.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/thread_pool.h"
#include "format/quant.h"
#include "model/imatrix.h"
#include "model/requantize.h"

namespace dsv4::cli {

namespace {

int fail(const std::string& msg) {
    std::fprintf(stderr, "dsv4 quantize: %s\n", msg.c_str());
    return 1;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
    std::string recipes_help = "named mix:";
    for (const QuantRecipe& r : quant_recipes()) recipes_help += "\n  " + r.name + ": " + r.help;
    CLI::App app{"Requantize a deepseek4 GGUF to one type or a named mix", argv[0]};
    std::string in_path, out_path, type, recipe, imatrix_path;
    std::vector<std::string> overrides;
    int threads = 0;
    bool quiet = false;
    app.add_option("input", in_path, "input GGUF")->required();
    app.add_option("output", out_path, "output GGUF")->required();
    auto* type_opt = app.add_option("--type", type, "type of every weight matrix (q8_0, q6_k, q5_k, q4_k, q3_k, q2_k, "
                                                    "iq2_xxs, iq2_xs, iq1_s, mxfp4, bf16, ...)");
    auto* recipe_opt = app.add_option("--recipe", recipe, recipes_help);
    type_opt->excludes(recipe_opt);
    app.add_option("--tensor-type", overrides, "REGEX=TYPE: tensors whose name matches get TYPE (first match wins)");
    app.add_option("--imatrix", imatrix_path, "importance matrix (llama.cpp's GGUF imatrix format); used by the "
                                              "K (Q2_K..Q6_K) and IQ quantizers, the others take none");
    app.add_option("-t,--threads", threads, "quantizer threads (default: all cores)")->check(CLI::NonNegativeNumber);
    app.add_flag("-q,--quiet", quiet, "no progress on stderr");
    CLI11_PARSE(app, argc, argv);

    RequantizeOptions o;
    if (!type.empty()) {
        auto t = ggml_type_from_name(type);
        if (!t) return fail("--type: unknown ggml type '" + type + "'");
        if (!has_quantizer(*t)) return fail("--type: no quantizer for " + std::string(ggml_type_name(*t)));
        o.selection.base = *t;
    }
    if (!recipe.empty()) {
        auto r = find_quant_recipe(recipe);
        if (!r.ok()) return fail("--recipe: " + r.error());
        o.selection.recipe = *r;
    }
    for (const std::string& spec : overrides) {
        auto ov = parse_quant_override(spec);
        if (!ov.ok()) return fail(ov.error());
        o.selection.overrides.push_back(std::move(*ov));
    }
    if (!o.selection.base && !o.selection.recipe && o.selection.overrides.empty())
        return fail("give --type, --recipe or --tensor-type");
    std::unique_ptr<Imatrix> imatrix;
    if (!imatrix_path.empty()) {
        auto im = Imatrix::open(imatrix_path);
        if (!im.ok()) return fail(im.error());
        imatrix = std::move(*im);
        o.imatrix = imatrix.get();
    }
    o.threads = threads > 0 ? threads : ThreadPool::default_threads();
    if (!quiet) o.note = [](const std::string& n) { std::fprintf(stderr, "dsv4 quantize: note: %s\n", n.c_str()); };
    ProgressLine progress("dsv4 quantize", !quiet);
    o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
    remove_temp_on_signal(out_path);
    Status st = requantize_gguf(in_path, out_path, o);
    if (!st.ok()) {
        if (!quiet) std::fprintf(stderr, "\n");
        return fail(st.error());
    }
    progress.finish();
    if (!quiet) std::fprintf(stderr, "dsv4 quantize: wrote %s\n", out_path.c_str());
    return 0;
}

}  // namespace dsv4::cli
