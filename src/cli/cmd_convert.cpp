// `dsv4 convert HF_DIR -o OUT.gguf`: an official DeepSeek-V4 checkpoint (safetensors) to a deepseek4 GGUF,
// lossless by default (model/hf_convert.h), with the tokenizer when the folder has tokenizer.json.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/thread_pool.h"
#include "format/ggml_type.h"
#include "format/quant.h"
#include "model/hf_convert.h"

namespace dsv4::cli {

namespace {

int fail(const std::string& msg) {
    std::fprintf(stderr, "dsv4 convert: %s\n", msg.c_str());
    return 1;
}

Result<GgmlType> parse_type(const std::string& option, const std::string& name) {
    auto t = ggml_type_from_name(name);
    if (!t) return make_error(option + ": unknown ggml type '" + name + "'");
    if (!has_quantizer(*t)) return make_error(option + ": no quantizer for " + std::string(ggml_type_name(*t)));
    return *t;
}

}  // namespace

int cmd_convert(int argc, char** argv) {
    CLI::App app{"Convert an official DeepSeek-V4 checkpoint (HF safetensors folder) to a deepseek4 GGUF", argv[0]};
    std::string hf_dir, out_path, dense, experts, mtp = "main", mtp_out, tokenizer_dir;
    int threads = 0;
    bool quiet = false;
    app.add_option("hf_dir", hf_dir, "checkpoint folder: config.json, model.safetensors.index.json, shards")->required();
    app.add_option("-o,--output", out_path, "output GGUF path")->required();
    app.add_option("--dense", dense, "type of the 2-D weight matrices, e.g. q8_0 or bf16 (default: lossless)");
    app.add_option("--experts", experts, "type of the routed expert stacks, e.g. mxfp4, q8_0, q4_k (default: lossless)");
    app.add_option("--mtp", mtp, "MTP block: main (in the output), separate (own file, see --mtp-output) or none")
        ->check(CLI::IsMember({"main", "separate", "none"}));
    app.add_option("--mtp-output", mtp_out, "MTP file for --mtp separate (default: OUT with -mtp before .gguf)");
    app.add_option("--tokenizer-dir", tokenizer_dir, "folder with tokenizer.json (default: the checkpoint folder)");
    app.add_option("-t,--threads", threads, "quantizer threads (default: all cores)")->check(CLI::NonNegativeNumber);
    app.add_flag("-q,--quiet", quiet, "no progress on stderr");
    CLI11_PARSE(app, argc, argv);

    ConvertOptions o;
    if (!dense.empty()) {
        auto t = parse_type("--dense", dense);
        if (!t.ok()) return fail(t.error());
        o.dense = *t;
    }
    if (!experts.empty()) {
        auto t = parse_type("--experts", experts);
        if (!t.ok()) return fail(t.error());
        o.experts = *t;
    }
    o.mtp = mtp == "main" ? MtpPlacement::main : mtp == "separate" ? MtpPlacement::separate : MtpPlacement::drop;
    if (o.mtp == MtpPlacement::separate) {
        if (mtp_out.empty()) {
            mtp_out = out_path;
            const std::string ext = ".gguf";
            if (mtp_out.size() > ext.size() && mtp_out.compare(mtp_out.size() - ext.size(), ext.size(), ext) == 0)
                mtp_out.resize(mtp_out.size() - ext.size());
            mtp_out += "-mtp.gguf";
        }
        o.mtp_path = mtp_out;
    }
    o.tokenizer_dir = tokenizer_dir;
    o.threads = threads > 0 ? threads : ThreadPool::default_threads();
    if (!quiet) o.note = [](const std::string& n) { std::fprintf(stderr, "dsv4 convert: note: %s\n", n.c_str()); };
    ProgressLine progress("dsv4 convert", !quiet);
    o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
    remove_temp_on_signal(out_path, o.mtp_path);
    Status st = convert_checkpoint(hf_dir, out_path, o);
    if (!st.ok()) {
        if (!quiet) std::fprintf(stderr, "\n");
        return fail(st.error());
    }
    progress.finish();
    if (!quiet) std::fprintf(stderr, "dsv4 convert: wrote %s%s%s\n", out_path.c_str(),
                             o.mtp_path.empty() ? "" : " and ", o.mtp_path.c_str());
    return 0;
}

}  // namespace dsv4::cli
