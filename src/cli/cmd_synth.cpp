// `dsv4 synth`: write a random-weight DeepSeek-V4 GGUF with the exact layout of real files (tiny, V4-Flash
// or V4-Pro sizes), for tests and benchmarks without downloading a model.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/ggml_type.h"
#include "format/gguf.h"
#include "model/synth.h"

namespace dsv4::cli {

namespace {

// Parse a --*-type option into a type the generator can write; the error names the option.
Result<GgmlType> parse_type(const std::string& option, const std::string& name) {
    auto t = ggml_type_from_name(name);
    if (!t) return make_error(option + ": unknown ggml type '" + name + "'");
    if (!synth_type_supported(*t))
        return make_error(option + ": type " + std::string(ggml_type_name(*t)) +
                          " cannot be generated (no quantizer for it)");
    return *t;
}

int synth_fail(const std::string& msg) {
    std::fprintf(stderr, "dsv4 synth: %s\n", msg.c_str());
    return 1;
}

}  // namespace

int cmd_synth(int argc, char** argv) {
    CLI::App app{"Write a random-weight DeepSeek-V4 GGUF with real tensor names and shapes", argv[0]};
    std::string preset, vocab_path, experts_type, dense_type, out_path;
    int n_layer = 0, n_threads = 0;
    uint64_t seed = 0;
    bool no_mtp = false, quiet = false, random_blocks = false;
    app.add_option("--preset", preset, "model sizes: tiny, flash (V4-Flash) or pro (V4-Pro)")
        ->required()
        ->check(CLI::IsMember({"tiny", "flash", "pro"}));
    app.add_option("--layers", n_layer, "main layer count (compress ratios follow the preset's pattern; default: the preset's)")
        ->check(positive_number());
    app.add_option("--vocab", vocab_path, "copy the tokenizer.* keys of this GGUF and use its vocabulary size");
    app.add_option("--experts-type", experts_type, "type of every routed-expert stack (default IQ2_XXS gate/up, Q2_K down)");
    app.add_option("--dense-type", dense_type, "type of the dense 2-D matrices (default Q8_0)");
    app.add_option("--seed", seed, "random seed (same seed, same bytes)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "generator threads (default: all cores)")->check(non_negative_number());
    app.add_flag("--no-mtp", no_mtp, "leave out the MTP block");
    app.add_flag("--random-blocks", random_blocks,
                 "write Q4_0..Q5_1, Q8_0, MXFP4 and K-quant tensors as random valid blocks instead of quantizing "
                 "Gaussian values (same types and sizes, ~100x faster for Q2_K; for benchmarks)");
    app.add_flag("-q,--quiet", quiet, "no progress on stderr");
    app.add_option("-o,--output", out_path, "output GGUF path")->required();
    CLI11_PARSE(app, argc, argv);

    auto hp = synth_preset(preset, n_layer);
    if (!hp.ok()) return synth_fail(hp.error());
    hp->mtp = !no_mtp;

    SynthTypes types;
    if (!experts_type.empty()) {
        auto t = parse_type("--experts-type", experts_type);
        if (!t.ok()) return synth_fail(t.error());
        types.expert_gate_up = types.expert_down = *t;
    }
    if (!dense_type.empty()) {
        auto t = parse_type("--dense-type", dense_type);
        if (!t.ok()) return synth_fail(t.error());
        types.dense = *t;
    }

    std::unique_ptr<GgufFile> vocab;
    if (!vocab_path.empty()) {
        auto f = GgufFile::open(vocab_path);
        if (!f.ok()) return synth_fail("--vocab: " + f.error());
        vocab = std::move(*f);
        auto n = synth_vocab_size(*vocab);
        if (!n.ok()) return synth_fail(n.error());
        hp->n_vocab = *n;
    }
    if (Status st = synth_validate(*hp); !st.ok()) return synth_fail(st.error());

    std::vector<std::string> notes;
    const auto plan = synth_plan(*hp, types, &notes);
    for (const auto& n : notes) std::fprintf(stderr, "dsv4 synth: note: %s\n", n.c_str());
    uint64_t bytes = 0;
    for (const auto& t : plan) bytes += t.n_bytes();
    if (!quiet)
        std::fprintf(stderr, "dsv4 synth: %s, %d layers%s, vocab %lld, %zu tensors, %.1f MB of tensor data -> %s\n",
                     preset.c_str(), hp->n_layer, hp->mtp ? " + MTP" : "", (long long)hp->n_vocab, plan.size(),
                     (double)bytes / 1e6, out_path.c_str());

    SynthWriteOptions opt;
    opt.seed = seed;
    opt.n_threads = n_threads;
    opt.progress = !quiet;
    opt.random_quantized = random_blocks;
    opt.vocab = vocab.get();
    if (Status st = synth_write(*hp, types, opt, out_path); !st.ok()) return synth_fail(st.error());
    return 0;
}

}  // namespace dsv4::cli
