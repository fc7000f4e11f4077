// `dsv4 bench`: prefill and decode tokens/s at several context depths, with the weight bytes a decoded token
// reads and the bandwidth that implies. A benchmark, not a test: it prints measurements only. `--synth`
// builds a random-weight model straight into backend memory (no file), so a model larger than the disk can
// be measured.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "cli/bench_batch.h"
#include "cli/bench_counts.h"
#include "cli/bench_e2e.h"
#include "cli/bench_speculative.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generate.h"
#include "cli/synth_options.h"
#include "exec/profiling_backend.h"
#include "exec/step_runner.h"
#include "format/gguf.h"
#include "model/deepseek4.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) v.push_back(std::stoll(item));
    return v;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    CLI::App app{"Measure prefill and decode speed (tokens/s) and the achieved weight-read bandwidth"};
    ModelOptions mo;
    SynthOptions synth;
    std::string ctx_list = "0";
    int64_t n_prompt = 128, n_gen = 32, chunk = 256, repeat = 1;
    bool json = false, exact = false, profile = false;
    double peak_gbs = 0, peak_tflops = 0, prefill_limit = 0;
    DeviceOptions dev;
    add_model_options(app, mo, false);
    add_synth_options(app, synth, "benchmark");
    app.add_option("--prompt", n_prompt, "prompt tokens for the prefill measurement")->capture_default_str()->check(positive_number());
    app.add_option("--gen", n_gen, "decoded tokens per measurement")->capture_default_str()->check(positive_number());
    app.add_option("--repeat", repeat,
                   "measurements of --gen tokens at each depth, one after the other; the decode row reports their "
                   "median (and the slowest and fastest): single short runs of one build vary by several percent")
        ->check(CLI::Range(1, 1000));
    std::string batch_list;
    app.add_option("--batch", batch_list,
                   "comma-separated batch sizes (e.g. 1,8,16,32,64): that many sequences also decode together, a "
                   "token each per step, at every --ctx depth (the engine's batched forward pass and a greedy draw "
                   "on the device, only the ids downloaded; no detokenizing): tokens/s in all and per stream, weight "
                   "bytes per step, KV bytes per sequence; with --e2e also that many requests at once through one "
                   "engine, as server clients");
    app.add_option("--ctx", ctx_list, "comma-separated context depths at which to measure decode (e.g. 0,4096)");
    app.add_option("--prefill-chunk", chunk, "tokens per prefill step")->capture_default_str()->check(positive_number());
    app.add_option("--peak-gbs", peak_gbs, "memory bandwidth peak in GB/s to report the achieved fraction against");
    app.add_option("--peak-tflops", peak_tflops,
                   "arithmetic peak in TFLOP/s of the prefill's path (e.g. the bf16 tensor cores') to report the "
                   "achieved fraction against");
    app.add_flag("--exact", exact, "exact mode (no FP8/FP4 rounding simulation)");
    app.add_flag("--profile", profile,
                 "after the measurements, decode --gen tokens more with every op timed one at a time and print "
                 "where a token's time goes, for n_gen more decode steps and one prefill chunk (per op and weight "
                 "type; the ops do not overlap while profiled)");
    app.add_flag("--json", json, "print one JSON object instead of a table");
    bool no_graphs = false, skip_fill = false;
    app.add_option("--prefill-limit", prefill_limit,
                   "stop the prefill at the first chunk boundary past this many seconds and report what it reached "
                   "(a 1M-token prompt within a time budget); 0: the whole prompt")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--skip-fill", skip_fill,
                 "reach each --ctx depth without prefilling it: the cache's windows and entries get random values "
                 "and its position is set (decode timing at depth in seconds instead of minutes; the logits mean "
                 "nothing)");
    bool e2e = false;
    E2eBench eb;
    std::string e2e_prompts;
    app.add_flag("--e2e", e2e,
                 "also run --repeat requests of random prompts and --gen tokens through the generation engine, as "
                 "`run` and one server request do (sampling, detokenizing, stop checks), greedy, at `run`'s "
                 "default sampling and at temperature 1: time to first token and tokens/s as a user sees them");
    app.add_option("--e2e-prompts", e2e_prompts, "comma-separated prompt lengths of the --e2e requests (default --prompt)");
    app.add_option("--e2e-schema", eb.schema_path,
                   "a JSON schema file: the --e2e requests are constrained to it (as the server's response_format), "
                   "greedy and at temperature 1, and each row says how many answers parse");
    std::string speculative;
    double draft_oracle = -1;
    app.add_option("--speculative", speculative,
                   "also measure speculative decoding with the MTP block, mtp or mtp:K: verify steps of 1 .. K+1 "
                   "tokens at the --prompt depth, then greedy generation of --gen tokens through the engine "
                   "without speculation and with 1 .. K drafts per step (needs the tokenizer, as --e2e)");
    app.add_option("--draft-oracle", draft_oracle,
                   "with --speculative: propose the plain run's next token with this probability instead of the "
                   "MTP block's draft (random weights accept almost nothing; the block still runs, so the cost "
                   "is real and only the drafts' source is not)")
        ->check(CLI::Range(0.0, 1.0));
    add_no_graphs_flag(app, no_graphs);
    add_device_options(app, dev);
    add_kernel_options(app, dev);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    if (mo.path.empty() == synth.preset.empty()) return fail("give exactly one of -m MODEL or --synth PRESET");
    if (!mo.mtp.empty() && mo.path.empty()) return fail("--mtp attaches a sidecar to -m MODEL, not to --synth");
    std::vector<int64_t> depths;
    try {
        depths = parse_list(ctx_list);
    } catch (const std::exception&) {
        return fail("--ctx takes comma-separated integers, got '" + ctx_list + "'");
    }
    if (depths.empty()) depths.push_back(0);
    if (!synth.vocab_path.empty() && synth.preset.empty()) return fail("--vocab gives a --synth model its tokenizer");
    std::vector<int64_t> batch_sizes;
    try {
        batch_sizes = parse_list(batch_list);
    } catch (const std::exception&) {
        return fail("--batch takes comma-separated integers, got '" + batch_list + "'");
    }
    for (int64_t n : batch_sizes)
        if (n <= 0 || n > 4096) return fail("--batch sizes must be in 1..4096, got " + std::to_string(n));

    dev.exact = exact;
    auto real_backend = make_backend(dev);
    if (!real_backend.ok()) return fail(real_backend.error());
    // The model runs on a profiling wrapper that passes calls straight through until --profile turns it on.
    ProfilingBackend profiler(**real_backend);
    profiler.set_enabled(false);
    const auto load_t0 = Clock::now();
    SynthTypes types;
    auto load = [&]() -> Result<std::unique_ptr<Model>> {
        if (synth.preset.empty()) return Model::load(mo.path, profiler, model_load_options(mo));
        return make_synth_model(synth, profiler, dev.threads, !json, &types);  // the cores the CPU backend uses
    };
    auto model = load();
    if (!model.ok()) return fail(model.error());
    profiler.synchronize();
    const double load_s = seconds_since(load_t0);
    Model& m = **model;
    StepRunner runner(m);  // decode steps replay as step graphs unless --no-graphs (or --profile's ops)
    const auto& cfg = m.config();
    const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
    // --profile decodes n_gen more tokens after the last depth's measurement.
    auto cache = m.new_cache(std::max(max_depth, n_prompt) + n_gen * (repeat + (profile ? 1 : 0)) + 1, false,
                             kv_store_for(!exact));  // as bytes_per_token below reports
    std::mt19937 rng(1);
    auto random_tokens = [&](int64_t n) {
        std::vector<int32_t> t(n);
        for (auto& x : t) x = (int32_t)(rng() % cfg.n_vocab);
        return t;
    };
    StepOptions opt;
    opt.quant_sim = !exact;
    opt.graphs = !no_graphs;
    std::vector<float> logits;

    // Prefill from position 0, timed in segments of depth (about eighths of the prompt, whole chunks), so a long
    // prompt shows how its rate falls with the context; --prefill-limit stops it at a chunk boundary.
    auto prompt = random_tokens(n_prompt);
    const int64_t seg_chunks = std::max<int64_t>(1, (n_prompt + 8 * chunk - 1) / (8 * chunk));
    nlohmann::ordered_json segments = nlohmann::ordered_json::array();
    const size_t free0 = profiler.memory_free();
    size_t free_min = free0;
    int64_t done = 0;
    auto t0 = Clock::now(), seg_t0 = t0;
    for (int64_t b = 0, k = 0; b < n_prompt; b += chunk, ++k) {
        const int64_t e = std::min(n_prompt, b + chunk);
        Status s = runner.step(*cache, std::span<const int32_t>(prompt.data() + b, e - b), opt, e == n_prompt ? &logits : nullptr);
        if (!s.ok()) return fail(s.error());
        done = e;
        const bool stop = prefill_limit > 0 && seconds_since(t0) >= prefill_limit;
        if ((k + 1) % seg_chunks == 0 || e == n_prompt || stop) {
            profiler.synchronize();
            free_min = std::min(free_min, profiler.memory_free());
            const int64_t from = segments.empty() ? 0 : segments.back()["to"].get<int64_t>();
            const double secs = seconds_since(seg_t0);
            segments.push_back({{"from", from}, {"to", e}, {"seconds", secs}, {"tokens_per_s", (e - from) / secs}});
            if (!json && seg_chunks > 1)  // a long prompt's progress, as it goes
                std::fprintf(stderr, "prefill  %lld of %lld tokens, %.1f tokens/s at depth %lld..%lld\n", (long long)e,
                             (long long)n_prompt, (e - from) / secs, (long long)from, (long long)e);
            seg_t0 = Clock::now();
        }
        if (stop) break;
    }
    profiler.synchronize();
    const double prefill_s = seconds_since(t0);

    const double bytes_per_token = decode_weight_bytes(m);
    const double tflops = prefill_flops(m, done, chunk) / prefill_s / 1e12;
    nlohmann::ordered_json out;
    out["model"] = synth.preset.empty() ? mo.path : "synth:" + synth.preset;
    if (!synth.preset.empty()) {
        out["synth_types"] = "experts " + std::string(ggml_type_name(types.expert_gate_up)) + "/" +
                             std::string(ggml_type_name(types.expert_down)) + ", dense " +
                             std::string(ggml_type_name(types.dense));
    }
    out["device"] = profiler.name();
    const std::string gemm = std::string(profiler.name()) == "cuda" ? gemm_precision_name(dev).value() : "f32";
    out["prefill_gemm"] = gemm;
    out["layers"] = cfg.n_layer;
    out["weight_bytes_per_decoded_token"] = bytes_per_token;
    out["weight_bytes"] = m.weights().bytes_matrices;
    const KvStore store = kv_store_for(!exact);
    const KvCache::TokenBytes kvb = KvCache::bytes_per_token(cfg, store);
    out["kv_bytes_per_token"] = {{"store", store == KvStore::quant_sim ? "quant_sim" : "exact"},
                                 {"csa_layer_entries", kvb.csa_entry},
                                 {"csa_layer_indexer_keys", kvb.csa_index},
                                 {"hca_layer", kvb.hca},
                                 {"all_layers", kvb.all}};
    out["load_seconds"] = load_s;
    out["prefill"] = {{"tokens", done}, {"chunk", chunk}, {"seconds", prefill_s},
                      {"tokens_per_s", done / prefill_s}, {"tflop_per_s", tflops}};
    if (done < n_prompt) out["prefill"]["stopped"] = {{"asked_tokens", n_prompt}, {"limit_seconds", prefill_limit}};
    if (peak_tflops > 0) out["prefill"]["fraction_of_peak"] = tflops / peak_tflops;
    out["prefill"]["segments"] = segments;
    // Device memory the prefill took beyond what was in use before it (sampled at the segments' ends: the cache,
    // the step's scratch and recorded graphs), on backends that report free memory.
    if (free0 != SIZE_MAX) {
        out["prefill"]["device_memory_free_gb"] = free_min / 1e9;
        out["prefill"]["device_memory_taken_gb"] = (double)(free0 - std::min(free0, free_min)) / 1e9;
    }
    out["decode"] = nlohmann::ordered_json::array();
    for (int64_t depth : depths) {
        // Bring the cache to `depth` tokens (untimed), then time single-token decode steps.
        cache->reset();
        if (Status s = reach_depth(m, runner, *cache, depth, chunk, skip_fill, opt, rng); !s.ok()) return fail(s.error());
        // --repeat measurements in a row (each starts where the last ended: the depth grows by n_gen each).
        std::vector<double> runs;
        for (int64_t rep = 0; rep < repeat; ++rep) {
            auto gen = random_tokens(n_gen);
            profiler.synchronize();
            t0 = Clock::now();
            for (int64_t i = 0; i < n_gen; ++i) {
                Status s = runner.step(*cache, std::span<const int32_t>(&gen[i], 1), opt, &logits);
                if (!s.ok()) return fail(s.error());
            }
            profiler.synchronize();
            runs.push_back(seconds_since(t0));
        }
        const double dt = median_of(runs);
        const double gbs = bytes_per_token * n_gen / dt / 1e9;
        nlohmann::ordered_json d = {{"context", depth}, {"tokens", n_gen}, {"seconds", dt},
                                    {"tokens_per_s", n_gen / dt}, {"weight_gb_per_s", gbs}};
        if (repeat > 1) {
            d["repeats"] = repeat;
            d["tokens_per_s_runs"] = nlohmann::ordered_json::array();
            for (double r : runs) d["tokens_per_s_runs"].push_back(n_gen / r);
            const auto [fastest, slowest] = std::minmax_element(runs.begin(), runs.end());
            d["tokens_per_s_min"] = n_gen / *slowest;
            d["tokens_per_s_max"] = n_gen / *fastest;
        }
        if (skip_fill) d["fill"] = "skipped: random cache entries";
        if (peak_gbs > 0) d["fraction_of_peak"] = gbs / peak_gbs;
        out["decode"].push_back(d);
    }
    if (!batch_sizes.empty()) {
        BatchBench bb;
        bb.sizes = batch_sizes;
        bb.depths = depths;
        bb.n_gen = n_gen;
        bb.repeat = repeat;
        bb.chunk = chunk;
        bb.skip_fill = skip_fill;
        bb.peak_gbs = peak_gbs;
        if (profile) bb.profiler = &profiler;
        auto rows = bench_batches(m, runner, opt, bb, rng);
        if (!rows.ok()) return fail(rows.error());
        out["batch"] = std::move(*rows);
    }
    if (e2e) {
        auto tok = Tokenizer::from_gguf(m.file());
        if (!tok.ok())
            return fail("--e2e needs the model's tokenizer (give --synth models one with --vocab FILE): " + tok.error());
        eb.prompts = {n_prompt};
        if (!e2e_prompts.empty()) {
            try {
                eb.prompts = parse_list(e2e_prompts);
            } catch (const std::exception&) {
                return fail("--e2e-prompts takes comma-separated integers, got '" + e2e_prompts + "'");
            }
            for (int64_t p : eb.prompts)
                if (p <= 0) return fail("--e2e-prompts lengths must be positive");
        }
        eb.n_gen = n_gen;
        eb.repeat = repeat;
        eb.quant_sim = !exact;
        auto rows = bench_e2e(m, **tok, eb, rng);
        if (!rows.ok()) return fail(rows.error());
        out["e2e"] = std::move(*rows);
        if (!batch_sizes.empty()) {
            auto brows = bench_e2e_batches(m, **tok, eb, batch_sizes, rng);
            if (!brows.ok()) return fail(brows.error());
            out["e2e_batch"] = std::move(*brows);
        }
    }
    if (!speculative.empty()) {
        auto k = speculative_drafts(speculative, m);
        if (!k.ok()) return fail(k.error());
        auto tok = Tokenizer::from_gguf(m.file());
        if (!tok.ok())
            return fail("--speculative needs the model's tokenizer (give --synth models one with --vocab FILE): " +
                        tok.error());
        SpecBench sb;
        sb.max_drafts = *k;
        sb.oracle = draft_oracle;
        sb.n_prompt = n_prompt;
        sb.n_gen = n_gen;
        sb.repeat = repeat;
        sb.quant_sim = !exact;
        if (profile) sb.profiler = &profiler;
        auto rows = bench_speculative(m, runner, **tok, sb, rng);
        if (!rows.ok()) return fail(rows.error());
        out["speculative"] = std::move(*rows);
    } else if (draft_oracle >= 0) {
        return fail("--draft-oracle goes with --speculative");
    }
    if (const StepGraphStats* g = runner.graph_stats()) {
        out["step_graphs"] = {{"segments", g->segments}, {"eager", g->eager}, {"captures", g->captures},
                              {"replays", g->replays}};
    }
    std::string profile_report, prefill_report;
    if (profile) {
        auto gen = random_tokens(n_gen);
        profiler.set_enabled(true);
        for (int64_t i = 0; i < n_gen; ++i) {
            Status s = runner.step(*cache, std::span<const int32_t>(&gen[i], 1), opt, &logits);
            if (!s.ok()) return fail(s.error());
        }
        profiler.set_enabled(false);
        profile_report = profiler.report(n_gen);
        out["profile"] = nlohmann::ordered_json::array();
        for (const OpProfileRow& r : profiler.rows())
            out["profile"].push_back({{"op", r.key}, {"calls", r.calls}, {"seconds", r.seconds}, {"bytes", r.bytes}});
        // Then one prefill chunk from position 0, profiled the same way.
        if (n_prompt > 0) {
            const int64_t len = std::min(chunk, n_prompt);
            cache->reset();
            profiler.reset();
            profiler.set_enabled(true);
            Status s = runner.step(*cache, std::span<const int32_t>(prompt.data(), len), opt, nullptr);
            profiler.set_enabled(false);
            if (!s.ok()) return fail(s.error());
            prefill_report = profiler.report(1);
            out["profile_prefill"] = {{"tokens", len}, {"ops", nlohmann::ordered_json::array()}};
            for (const OpProfileRow& r : profiler.rows())
                out["profile_prefill"]["ops"].push_back(
                    {{"op", r.key}, {"calls", r.calls}, {"seconds", r.seconds}, {"bytes", r.bytes}});
        }
    }
    if (json) {
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    }
    std::printf("model    %s (%d layers) on %s, prefill matmuls in %s\n", out["model"].get<std::string>().c_str(),
                cfg.n_layer, profiler.name(), gemm.c_str());
    const std::string origin =
        synth.preset.empty() ? "" : ", generated in memory: " + out["synth_types"].get<std::string>();
    std::printf("load     %.2f GB of weight matrices in %.1f s (%.2f GB/s)%s\n", m.weights().bytes_matrices / 1e9,
                load_s, m.weights().bytes_matrices / 1e9 / load_s, origin.c_str());
    std::printf("weights  %.1f MB read per decoded token\n", bytes_per_token / 1e6);
    std::printf("kv       %.0f bytes per token of context in all layers (%s store): a CSA layer %.0f (entries %.0f, "
                "indexer keys %.0f), an HCA layer %.1f\n",
                kvb.all, store == KvStore::quant_sim ? "quant-sim" : "exact", kvb.csa_entry + kvb.csa_index,
                kvb.csa_entry, kvb.csa_index, kvb.hca);
    std::printf("prefill  %lld tokens in %.3f s: %.1f tokens/s, %.4g TFLOP/s", (long long)done, prefill_s,
                done / prefill_s, tflops);
    if (peak_tflops > 0) std::printf(" (%.1f%% of %.0f TFLOP/s)", 100 * tflops / peak_tflops, peak_tflops);
    if (done < n_prompt)
        std::printf(" (stopped by --prefill-limit %.0f s at %lld of %lld tokens)", prefill_limit, (long long)done,
                    (long long)n_prompt);
    std::printf("\n");
    if (segments.size() > 1)
        for (const auto& g : segments)
            std::printf("prefill  depth %lld..%lld: %.1f tokens/s\n", (long long)g["from"].get<int64_t>(),
                        (long long)g["to"].get<int64_t>(), g["tokens_per_s"].get<double>());
    if (out["prefill"].contains("device_memory_free_gb"))
        std::printf("memory   the prefill took %.2f GB of device memory, %.2f GB free at the least\n",
                    out["prefill"]["device_memory_taken_gb"].get<double>(),
                    out["prefill"]["device_memory_free_gb"].get<double>());
    for (const auto& d : out["decode"]) {
        std::printf("decode   ctx %-7lld %lld tokens in %.3f s: %.2f tokens/s, %.2f GB/s of weights",
                    (long long)d["context"].get<int64_t>(), (long long)d["tokens"].get<int64_t>(),
                    d["seconds"].get<double>(), d["tokens_per_s"].get<double>(), d["weight_gb_per_s"].get<double>());
        if (d.contains("fraction_of_peak")) std::printf(" (%.1f%% of %.0f GB/s)", 100 * d["fraction_of_peak"].get<double>(), peak_gbs);
        if (d.contains("repeats"))
            std::printf("; median of %lld runs, %.2f to %.2f tokens/s", (long long)d["repeats"].get<int64_t>(),
                        d["tokens_per_s_min"].get<double>(), d["tokens_per_s_max"].get<double>());
        std::printf("\n");
    }
    if (out.contains("batch")) print_batches(out["batch"], peak_gbs);
    if (out.contains("e2e")) print_e2e(out["e2e"]);
    if (out.contains("e2e_batch")) print_e2e_batches(out["e2e_batch"]);
    if (out.contains("speculative")) print_speculative(out["speculative"]);
    if (out.contains("step_graphs")) {
        const auto& g = out["step_graphs"];
        std::printf("graphs   %lld recorded steps: %lld run as issued, %lld captured, %lld replayed\n",
                    (long long)g["segments"].get<int64_t>(), (long long)g["eager"].get<int64_t>(),
                    (long long)g["captures"].get<int64_t>(), (long long)g["replays"].get<int64_t>());
    } else {
        std::printf("graphs   off\n");
    }
    if (profile) {
        std::printf("\nprofile of %lld decode steps after the last context (ops timed one at a time):\n%s",
                    (long long)n_gen, profile_report.c_str());
        if (!prefill_report.empty())
            std::printf("\nprofile of one %lld-token prefill chunk from position 0:\n%s",
                        (long long)std::min(chunk, n_prompt), prefill_report.c_str());
    }
    return 0;
}

}  // namespace dsv4::cli
