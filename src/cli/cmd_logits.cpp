// `dsv4 logits`: run a token list through the model and write float32 logits, the interface the golden
// acceptance check (shared/tools/golden_check.py) drives.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"

namespace dsv4::cli {

int cmd_logits(int argc, char** argv) {
    CLI::App app{"Run tokens through the model and write little-endian float32 logits [rows, vocab]"};
    ModelOptions mo;
    std::string tokens_path, out_path, quant_sim = "on";
    int64_t prefill = -1, chunk = 256;
    bool stepwise = false, mtp = false, no_graphs = false;
    DeviceOptions dev;
    app.add_option("-m,--model", mo.path, "model GGUF")->required();
    app.add_option("--tokens", tokens_path, "JSON array of token ids")->required();
    app.add_option("-o,--output", out_path, "output file (float32)")->required();
    app.add_option("--prefill", prefill, "tokens processed as one prefill (default: all)");
    app.add_flag("--stepwise", stepwise, "feed every token alone from position 0");
    // --mtp alone: the MTP block of the model (its own, or a sidecar found beside it); --mtp FILE: that sidecar's.
    auto* mtp_opt = app.add_option("--mtp", mo.mtp,
                                   std::string("write the MTP block's logits (row t: hidden at t, token t+1). With FILE: ") +
                                       kMtpHelp)
                        ->expected(0, 1)
                        ->option_text("[FILE]");
    app.add_option("--quant-sim", quant_sim, "model's FP8/FP4 rounding: on, or off for exact mode")
        ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
    app.add_option("--prefill-chunk", chunk, "tokens per prefill step")->capture_default_str()->check(positive_number());
    add_no_graphs_flag(app, no_graphs);
    add_device_options(app, dev);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    auto tokens = read_tokens(tokens_path);
    if (!tokens.ok()) return fail(tokens.error());
    if (tokens->empty()) return fail("the token list is empty");
    mtp = mtp_opt->count() > 0;
    dev.gemm_auto = "f32";  // the reference check: f32 unless --gemm bf16 asks for the tensor cores
    dev.exact = quant_sim == "off";
    auto backend = make_backend(dev);
    if (!backend.ok()) return fail(backend.error());
    auto model = Model::load(mo.path, **backend, model_load_options(mo));
    if (!model.ok()) return fail(model.error());
    Model& m = **model;
    StepRunner runner(m);  // --stepwise decodes through step graphs unless --no-graphs
    const int64_t V = m.config().n_vocab;
    for (int32_t t : *tokens)
        if (t >= V) return fail("token id " + std::to_string(t) + " is out of range for vocabulary " + std::to_string(V));
    if (mtp && !m.has_mtp())
        return fail("'" + mo.path + "' has no MTP block and no MTP sidecar was attached (--mtp FILE names one)");

    const int64_t T = (int64_t)tokens->size();
    const int64_t rows_main = mtp ? T - 1 : T;  // with --mtp the last token is only an MTP input
    if (rows_main <= 0) return fail("--mtp needs at least two tokens");
    int64_t P = stepwise ? 0 : (prefill < 0 ? rows_main : std::min(prefill, rows_main));

    StepOptions opt;
    opt.quant_sim = quant_sim == "on";
    opt.all_logits = true;
    opt.graphs = !no_graphs;
    auto cache = m.new_cache(T + 1, mtp, kv_store_for(opt.quant_sim));
    std::vector<float> out((size_t)rows_main * V);
    std::vector<float> logits, hidden, mlogits;
    const auto t0 = std::chrono::steady_clock::now();

    // Main model rows [begin, end) in one step; with --mtp the MTP block follows on the same rows.
    auto run = [&](int64_t begin, int64_t end) -> Status {
        std::span<const int32_t> toks(tokens->data() + begin, end - begin);
        DSV4_TRY(runner.step(*cache, toks, opt, mtp ? nullptr : &logits, mtp ? &hidden : nullptr));
        if (!mtp) {
            std::copy(logits.begin(), logits.end(), out.begin() + begin * V);
            return {};
        }
        std::span<const int32_t> next(tokens->data() + begin + 1, end - begin);
        DSV4_TRY(m.mtp_step(*cache, hidden, next, opt, &mlogits));
        std::copy(mlogits.begin(), mlogits.end(), out.begin() + begin * V);
        return {};
    };
    for (int64_t b = 0; b < P; b += chunk) {
        Status s = run(b, std::min(P, b + chunk));
        if (!s.ok()) return fail(s.error());
    }
    for (int64_t t = P; t < rows_main; ++t) {
        Status s = run(t, t + 1);
        if (!s.ok()) return fail(s.error());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::FILE* f = std::fopen(out_path.c_str(), "wb");
    if (!f) return fail("cannot write '" + out_path + "'");
    const size_t wrote = std::fwrite(out.data(), sizeof(float), out.size(), f);
    const bool ok = std::fclose(f) == 0 && wrote == out.size();
    if (!ok) return fail("short write to '" + out_path + "'");
    std::fprintf(stderr, "logits: %lld rows x %lld vocab in %.2f s (%.1f tokens/s) on %s\n", (long long)rows_main,
                 (long long)V, secs, rows_main / secs, (*backend)->name());
    return 0;
}

}  // namespace dsv4::cli
