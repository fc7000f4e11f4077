// `dsv4 perplexity`: the sliding-window perplexity of a text file (tokenized with the model's tokenizer, BOS
// first when the model asks for it) or of a JSON array of token ids, as runtime/perplexity.h computes it.
// Progress goes to stderr, one line per window; the result to stdout (or as one JSON object with --json).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {
namespace {

Result<std::string> read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("cannot open text file '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return make_error("cannot read text file '" + path + "'");
    return ss.str();
}

// The ids to score: the text file through the model's tokenizer, or the --tokens file as given.
Result<std::vector<int32_t>> input_tokens(const Model& model, const std::string& text_path,
                                          const std::string& tokens_path) {
    if (!tokens_path.empty()) {
        DSV4_ASSIGN_OR_RETURN(std::vector<int32_t> ids, read_tokens(tokens_path));
        if (ids.empty()) return make_error("tokens file '" + tokens_path + "' holds no tokens");
        return ids;
    }
    DSV4_ASSIGN_OR_RETURN(std::string text, read_text(text_path));
    if (text.empty()) return make_error("text file '" + text_path + "' is empty");
    auto tok = Tokenizer::from_gguf(model.file());
    if (!tok.ok()) return make_error("cannot tokenize the text: " + tok.error() + " (score token ids with --tokens)");
    std::vector<int32_t> ids;
    if ((*tok)->add_bos()) ids.push_back((*tok)->bos());
    // Plain text: special-token spellings in it are text too.
    (*tok)->encode(text, /*parse_special=*/false, ids);
    return ids;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
    CLI::App app{"Perplexity of a text (or of token ids) in sliding windows: each token after the first is "
                 "scored once, by the first window that holds it with context before it"};
    std::string model_path, text_path, tokens_path, quant_sim = "on";
    int64_t ctx = 0, stride = 0, chunk = 256;
    bool json = false, quiet = false, no_graphs = false;
    DeviceOptions dev;
    app.add_option("-m,--model", model_path, "model GGUF")->required();
    auto* f = app.add_option("-f,--file", text_path, "text file to score (tokenized with the model's tokenizer)");
    auto* t = app.add_option("--tokens", tokens_path, "JSON array of token ids to score instead of a text");
    f->excludes(t);
    t->excludes(f);
    app.add_option("-c,--ctx", ctx, "tokens per window (0: min(4096, the model's context))")->capture_default_str()
        ->check(non_negative_number());
    app.add_option("--stride", stride, "tokens a window moves by (0: half the window)")->capture_default_str()
        ->check(non_negative_number());
    app.add_option("--quant-sim", quant_sim, "model's FP8/FP4 rounding: on, or off for exact mode")
        ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
    app.add_option("--prefill-chunk", chunk, "tokens per prefill step")->capture_default_str()->check(positive_number());
    app.add_flag("--json", json, "print the result as one JSON object");
    app.add_flag("-q,--quiet", quiet, "no progress lines");
    add_device_options(app, dev);
    add_no_graphs_flag(app, no_graphs);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    if (text_path.empty() && tokens_path.empty()) return fail("give the text to score with -f FILE (or ids with --tokens FILE)");

    dev.exact = quant_sim == "off";
    auto backend = make_backend(dev);
    if (!backend.ok()) return fail(backend.error());
    auto model = Model::load(model_path, **backend);
    if (!model.ok()) return fail(model.error());
    Model& m = **model;
    auto ids = input_tokens(m, text_path, tokens_path);
    if (!ids.ok()) return fail(ids.error());

    const int64_t n_ctx_train = m.config().n_ctx_train;
    if (ctx == 0) ctx = n_ctx_train > 0 ? std::min<int64_t>(4096, n_ctx_train) : 4096;
    if (n_ctx_train > 0 && ctx > n_ctx_train)
        return fail("--ctx " + std::to_string(ctx) + " exceeds the model's context of " + std::to_string(n_ctx_train) +
                    " tokens");
    if (stride == 0) stride = std::max<int64_t>(1, ctx / 2);
    const int64_t n = static_cast<int64_t>(ids->size());
    if (n < 2) return fail("there is nothing to score: the input is " + std::to_string(n) +
                           " token (the first token is only context)");
    if (ctx < 2) return fail("--ctx must be at least 2 (got " + std::to_string(ctx) + ")");
    if (stride > ctx)
        return fail("--stride " + std::to_string(stride) + " exceeds --ctx " + std::to_string(ctx) +
                    ": the tokens between windows would never be scored");

    PerplexityOptions po;
    po.ctx = ctx;
    po.stride = stride;
    po.chunk = chunk;
    po.step.quant_sim = quant_sim == "on";
    po.step.graphs = !no_graphs;
    StepRunner runner(m);
    const auto t0 = std::chrono::steady_clock::now();
    auto report = [&](const PerplexityProgress& p) {
        if (quiet) return;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "perplexity: window %zu/%zu, %lld tokens scored, perplexity so far %.4f (%.1f s)\n",
                     p.window, p.n_windows, (long long)p.n_scored,
                     p.n_scored > 0 ? std::exp(p.nll_sum / (double)p.n_scored) : 0.0, secs);
    };
    if (!quiet)
        std::fprintf(stderr, "perplexity: %lld tokens, window %lld, stride %lld, on %s\n", (long long)n,
                     (long long)std::min(ctx, n), (long long)stride, (*backend)->name());
    auto r = perplexity(runner, *ids, po, report);
    if (!r.ok()) return fail(r.error());

    if (json) {
        nlohmann::ordered_json j = {{"perplexity", r->perplexity()}, {"mean_nll", r->mean_nll()},
                                    {"tokens", r->n_scored},     {"windows", r->n_windows},
                                    {"ctx", std::min(ctx, n)},   {"stride", stride}};
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("perplexity: %.6f\nmean NLL: %.9f nats/token\ntokens scored: %lld (of %lld, %zu windows)\n",
                    r->perplexity(), r->mean_nll(), (long long)r->n_scored, (long long)n, r->n_windows);
    }
    return 0;
}

}  // namespace dsv4::cli
