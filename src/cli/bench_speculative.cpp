#include "cli/bench_speculative.h"

#include <chrono>
#include <cstdio>
#include <vector>

#include "cli/bench_batch.h"
#include "cli/bench_e2e.h"
#include "runtime/engine.h"

namespace dsv4::cli {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One verify step of n random tokens at the cache's depth, every row's token drawn greedily on the backend,
// then rolled back: milliseconds from the issue of its ops to their end.
Result<double> verify_step(Model& m, StepRunner& runner, KvCache& cache, int n, const StepOptions& opt,
                           std::mt19937& rng) {
    std::vector<int32_t> toks(n);
    for (int32_t& t : toks) t = (int32_t)(rng() % (uint32_t)m.config().n_vocab);
    std::vector<DrawRequest> draws(n);  // greedy: temperature 0, no adjustments
    std::vector<SampleOut> drawn(n);
    Model::BatchItem it;
    it.cache = &cache;
    it.tokens = toks;
    it.draw = draws.data();
    it.drawn = drawn.data();
    it.n_draws = n;
    DSV4_TRY(cache.save_for_rollback(n));
    m.backend().synchronize();
    const auto t0 = Clock::now();
    DSV4_TRY(runner.step_batch(std::span<Model::BatchItem>(&it, 1), opt));
    m.backend().synchronize();
    const double ms = 1e3 * since(t0, Clock::now());
    DSV4_TRY(cache.rollback(n));
    return ms;
}

// Verify steps of n = 1 .. max_n tokens, all at the same depth: median milliseconds per n (after an untimed
// step of each size, which records its step graph).
Result<nlohmann::ordered_json> verify_steps(Model& m, StepRunner& runner, KvCache& cache, int max_n, int64_t reps,
                                            const StepOptions& opt, std::mt19937& rng) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    double one = 0;
    for (int n = 1; n <= max_n; ++n) {
        std::vector<double> ms;
        for (int64_t r = -1; r < reps; ++r) {
            DSV4_ASSIGN_OR_RETURN(double t, verify_step(m, runner, cache, n, opt, rng));
            if (r >= 0) ms.push_back(t);
        }
        const double med = median_of(ms);
        if (n == 1) one = med;
        rows.push_back({{"tokens", n}, {"ms", med}, {"vs_one_token", med / one}});
    }
    return rows;
}

// The pieces of a speculative round besides the verify step, at the cache's depth (median ms): one MTP draft
// step (a token drawn greedily on the backend from the block's logits, undone after), and the rollback of a
// rejected draft (the rows a 2-token step overwrites saved, then put back).
Result<nlohmann::ordered_json> round_parts(Model& m, StepRunner& runner, KvCache& cache, int64_t reps, bool quant_sim,
                                           std::mt19937& rng) {
    StepOptions opt;
    opt.quant_sim = quant_sim;
    const ModelConfig& c = m.config();
    const size_t stream = (size_t)c.hc * c.n_embd;
    std::vector<float> h(stream);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (float& x : h) x = g(rng);
    float* hd = static_cast<float*>(m.backend().alloc(stream * sizeof(float)));
    m.backend().upload(hd, h.data(), stream * sizeof(float));
    DrawRequest greedy;
    SampleOut drawn;
    std::vector<double> draft, save, undo;
    Status st;
    for (int64_t r = -1; r < reps && st.ok(); ++r) {
        const int32_t t = (int32_t)(rng() % (uint32_t)c.n_vocab);
        Model::MtpItem it;
        it.cache = &cache;
        it.hidden = hd;
        it.next_tokens = std::span<const int32_t>(&t, 1);
        it.draw = &greedy;
        it.drawn = &drawn;
        st = cache.save_for_rollback(1, true);
        if (!st.ok()) break;
        m.backend().synchronize();
        auto t0 = Clock::now();
        st = runner.mtp_step(it, opt);
        m.backend().synchronize();
        auto t1 = Clock::now();
        if (st.ok()) st = cache.rollback(1, true);
        // The journal of a 2-token verify step: its save before the step, its rollback of one token after.
        const int32_t two[2] = {t, (int32_t)((t + 1) % c.n_vocab)};
        if (!st.ok()) break;
        m.backend().synchronize();
        auto t2 = Clock::now();
        st = cache.save_for_rollback(2);
        m.backend().synchronize();
        auto t3 = Clock::now();
        if (st.ok()) st = runner.step(cache, two, opt, nullptr);
        m.backend().synchronize();
        auto t4 = Clock::now();
        if (st.ok()) st = cache.rollback(2);
        m.backend().synchronize();
        auto t5 = Clock::now();
        if (r >= 0) {
            draft.push_back(1e3 * since(t0, t1));
            save.push_back(1e3 * since(t2, t3));
            undo.push_back(1e3 * since(t4, t5));
        }
    }
    m.backend().free(hd);
    DSV4_TRY(st);
    return nlohmann::ordered_json{{"mtp_draft_step_ms", median_of(draft)}, {"save_ms", median_of(save)},
                                  {"rollback_ms", median_of(undo)}};
}

struct GenRun {
    std::vector<int32_t> tokens;
    double tokens_per_s = 0;
    EngineStats stats;
};

// `repeat` greedy requests of the same prompt through an engine; the tokens of the last, median tokens/s.
Result<GenRun> generate(Model& m, const Tokenizer& tok, const SpecBench& b, const std::vector<int32_t>& prompt, int k,
                        const std::vector<int32_t>* ref, std::mt19937& rng, float temperature = 0, float top_p = 1) {
    EngineOptions eo;
    eo.n_slots = 1;
    eo.n_ctx = (int64_t)prompt.size() + b.n_gen + 1;
    eo.quant_sim = b.quant_sim;
    eo.prefix_cache = false;
    eo.speculative = k;
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const int64_t n_prompt = (int64_t)prompt.size();
    const int32_t V = (int32_t)m.config().n_vocab;
    if (k > 0 && b.oracle >= 0 && ref) {
        eo.draft_override = [&](uint64_t, int64_t index, int32_t proposed) {
            const int64_t g = index - n_prompt;  // the draft's place among the generated tokens
            if (g < 0 || g >= (int64_t)ref->size()) return proposed;
            const int32_t right = (*ref)[g];
            return u01(rng) < b.oracle ? right : (right + 1) % V;
        };
    }
    Engine engine(m, tok, eo);
    GenRun run;
    std::vector<double> tps;
    for (int64_t rep = -1; rep < b.repeat; ++rep) {  // the first, untimed, records the step graphs
        GenerationRequest req;
        req.prompt = prompt;
        req.max_tokens = b.n_gen;
        req.ignore_eos = true;
        req.sampling.temperature = temperature;
        req.sampling.top_p = top_p;
        req.sampling.seed = (uint64_t)(rep + 2);
        DSV4_ASSIGN_OR_RETURN(TimedRequest r, run_timed(engine, std::move(req), "bench --speculative"));
        if (rep < 0) continue;
        if (r.tokens.size() > 1) tps.push_back(r.tokens_per_s);
        run.tokens = std::move(r.tokens);
    }
    run.tokens_per_s = median_of(tps);
    run.stats = engine.stats();
    return run;
}

}  // namespace

Result<nlohmann::ordered_json> bench_speculative(Model& m, StepRunner& runner, const Tokenizer& tok, const SpecBench& b,
                                                 std::mt19937& rng) {
    nlohmann::ordered_json j;
    std::vector<int32_t> prompt((size_t)b.n_prompt);
    for (int32_t& t : prompt) t = (int32_t)(rng() % (uint32_t)m.config().n_vocab);
    {
        auto cache = m.new_cache(b.n_prompt + b.max_drafts + 2, true, kv_store_for(b.quant_sim));
        StepOptions prefill;
        prefill.quant_sim = b.quant_sim;
        for (int64_t p = 0; p < b.n_prompt; p += 4096) {
            const int64_t e = std::min<int64_t>(b.n_prompt, p + 4096);
            DSV4_TRY(runner.step(*cache, std::span<const int32_t>(prompt.data() + p, e - p), prefill, nullptr));
        }
        StepOptions opt;
        opt.quant_sim = b.quant_sim;
        DSV4_ASSIGN_OR_RETURN(j["verify_steps"],
                              verify_steps(m, runner, *cache, b.max_drafts + 1, std::max<int64_t>(b.repeat, 5) * 4, opt, rng));
        j["context"] = b.n_prompt;
        if (b.profiler) {
            // One step of each size with every op timed, after the measured ones recorded its graph.
            j["verify_profiles"] = nlohmann::ordered_json::array();
            for (int n = 1; n <= b.max_drafts + 1; ++n) {
                b.profiler->reset();
                b.profiler->set_enabled(true);
                auto r = verify_step(m, runner, *cache, n, opt, rng);
                b.profiler->set_enabled(false);
                if (!r.ok()) return make_error(r.error());
                j["verify_profiles"].push_back({{"tokens", n}, {"report", b.profiler->report(1)}});
            }
        }
        // The MTP block's cache at the same depth (its window filled), then the round's other parts.
        cache->set_mtp_pos(b.n_prompt);
        DSV4_ASSIGN_OR_RETURN(j["round_parts"], round_parts(m, runner, *cache, std::max<int64_t>(b.repeat, 5) * 4,
                                                            b.quant_sim, rng));
    }
    DSV4_ASSIGN_OR_RETURN(GenRun plain, generate(m, tok, b, prompt, 0, nullptr, rng));
    j["draft_source"] = b.oracle >= 0 ? "oracle: the plain run's next token with probability " + std::to_string(b.oracle) +
                                            " (mechanics only; the MTP block still runs)"
                                      : "the MTP block";
    j["plain"] = {{"tokens", plain.tokens.size()}, {"tokens_per_s", plain.tokens_per_s}};
    j["speculative"] = nlohmann::ordered_json::array();
    for (int k = 1; k <= b.max_drafts; ++k) {
        DSV4_ASSIGN_OR_RETURN(GenRun r, generate(m, tok, b, prompt, k, &plain.tokens, rng));
        const EngineStats& s = r.stats;
        j["speculative"].push_back(
            {{"drafts", k},
             {"tokens_per_s", r.tokens_per_s},
             {"vs_plain", r.tokens_per_s / plain.tokens_per_s},
             {"acceptance", s.draft_tokens ? (double)s.accepted_tokens / (double)s.draft_tokens : 0.0},
             {"tokens_per_step", s.spec_steps ? (double)(s.accepted_tokens + s.spec_steps) / (double)s.spec_steps : 0.0},
             {"same_tokens_as_plain", r.tokens == plain.tokens}});
    }
    // `run`'s default sampling (temperature 0.6, top-p 0.95): the same verify path, every row drawn on the
    // device with its own uniform; the oracle's drafts are the greedy run's tokens, accepted when a row's
    // draw happens to equal them.
    DSV4_ASSIGN_OR_RETURN(GenRun plain_sampled, generate(m, tok, b, prompt, 0, nullptr, rng, 0.6f, 0.95f));
    DSV4_ASSIGN_OR_RETURN(GenRun spec_sampled, generate(m, tok, b, prompt, 1, &plain.tokens, rng, 0.6f, 0.95f));
    const EngineStats& ss = spec_sampled.stats;
    j["sampled"] = {{"plain_tokens_per_s", plain_sampled.tokens_per_s},
                    {"mtp1_tokens_per_s", spec_sampled.tokens_per_s},
                    {"acceptance", ss.draft_tokens ? (double)ss.accepted_tokens / (double)ss.draft_tokens : 0.0}};
    return j;
}

void print_speculative(const nlohmann::ordered_json& j) {
    for (const auto& v : j["verify_steps"])
        std::printf("verify   %d-token main step at ctx %lld: %.3f ms (%.2fx one token)\n", v["tokens"].get<int>(),
                    (long long)j["context"].get<int64_t>(), v["ms"].get<double>(), v["vs_one_token"].get<double>());
    const auto& rp = j["round_parts"];
    std::printf("draft    one MTP step (greedy draw on the backend): %.3f ms; rollback of a 2-token step: save %.3f ms, "
                "undo %.3f ms\n",
                rp["mtp_draft_step_ms"].get<double>(), rp["save_ms"].get<double>(), rp["rollback_ms"].get<double>());
    std::printf("spec     drafts from %s\n", j["draft_source"].get<std::string>().c_str());
    std::printf("spec     plain greedy: %.2f tokens/s\n", j["plain"]["tokens_per_s"].get<double>());
    for (const auto& r : j["speculative"])
        std::printf("spec     mtp:%d: %.2f tokens/s (%.2fx plain), acceptance %.1f%%, %.2f tokens per step, tokens %s plain\n",
                    r["drafts"].get<int>(), r["tokens_per_s"].get<double>(), r["vs_plain"].get<double>(),
                    100 * r["acceptance"].get<double>(), r["tokens_per_step"].get<double>(),
                    r["same_tokens_as_plain"].get<bool>() ? "same as" : "DIFFERENT from");
    const auto& sm = j["sampled"];
    std::printf("spec     temperature 0.6, top-p 0.95: plain %.2f tokens/s, mtp:1 %.2f tokens/s (acceptance %.1f%%)\n",
                sm["plain_tokens_per_s"].get<double>(), sm["mtp1_tokens_per_s"].get<double>(),
                100 * sm["acceptance"].get<double>());
    if (j.contains("verify_profiles"))
        for (const auto& p : j["verify_profiles"])
            std::printf("\nprofile of one %d-token verify step at ctx %lld (ops timed one at a time):\n%s",
                        p["tokens"].get<int>(), (long long)j["context"].get<int64_t>(),
                        p["report"].get<std::string>().c_str());
}

}  // namespace dsv4::cli
