#include "cli/bench_e2e.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fstream>
#include <sstream>

#include "cli/bench_batch.h"
#include "runtime/engine.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"

namespace dsv4::cli {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

namespace {

struct Sampling {
    const char* name;
    float temperature, top_p;
};
constexpr Sampling kSamplings[] = {{"greedy", 0.0f, 1.0f}, {"run default", 0.6f, 0.95f}, {"temperature 1", 1.0f, 1.0f}};

Result<nlohmann::ordered_json> bench_row(Engine& engine, int64_t n_vocab, int64_t n_prompt, const Sampling& sp,
                                         const E2eBench& b, const GrammarConstraint& constraint, std::mt19937& rng) {
    std::vector<double> ttft, tps;
    double first_ttft = 0;
    int64_t parsed = 0;
    // One request first, out of the median: its steps are recorded, and their step graphs captured from the next
    // request on (a prompt chunk of more than 8 tokens from its length's ninth request on: exec/step_graphs.h),
    // so its first-token time, reported beside the median, is a prompt's whose length has not been seen before.
    for (int64_t rep = -1; rep < b.repeat; ++rep) {
        GenerationRequest req;
        req.prompt.resize((size_t)n_prompt);
        for (int32_t& t : req.prompt) t = (int32_t)(rng() % (uint32_t)n_vocab);
        req.max_tokens = b.n_gen;
        req.ignore_eos = true;
        req.sampling.temperature = sp.temperature;
        req.sampling.top_p = sp.top_p;
        req.sampling.seed = (uint64_t)(rep + 2);
        if (constraint) {
            req.constraint = constraint;
            req.ignore_eos = false;  // the answer ends where its value does
        }
        DSV4_ASSIGN_OR_RETURN(TimedRequest r, run_timed(engine, std::move(req), "bench --e2e"));
        if (rep < 0) {
            first_ttft = r.ttft_s;
            continue;
        }
        if (constraint && !nlohmann::json::parse(r.text, nullptr, false).is_discarded()) ++parsed;
        ttft.push_back(r.ttft_s);
        if (r.tokens.size() > 1) tps.push_back(r.tokens_per_s);
    }
    nlohmann::ordered_json j = {{"prompt_tokens", n_prompt}, {"tokens", b.n_gen}, {"requests", b.repeat},
                                {"sampling", sp.name}, {"temperature", sp.temperature}, {"top_p", sp.top_p},
                                {"ttft_ms", 1e3 * median_of(ttft)},
                                {"ttft_max_ms", 1e3 * *std::max_element(ttft.begin(), ttft.end())},
                                {"ttft_first_request_ms", 1e3 * first_ttft}};
    if (!tps.empty()) j["tokens_per_s"] = median_of(tps);
    if (constraint) j["parsed_json"] = parsed;
    return j;
}

}  // namespace

Result<TimedRequest> run_timed(Engine& engine, GenerationRequest req, const char* what) {
    TimedRequest r;
    Clock::time_point first{}, last{};
    std::string error;
    const auto t0 = Clock::now();
    auto id = engine.submit(std::move(req), [&](const TokenEvent& ev) {
        if (ev.token >= 0 && !ev.prompt) {
            last = Clock::now();
            if (r.tokens.empty()) first = last;
            r.tokens.push_back(ev.token);
        }
        r.text += ev.text;  // the text a user would be shown
        if (ev.finished && ev.reason == GenerationEnd::error) error = ev.error;
    });
    if (!id.ok()) return make_error(std::string(what) + ": " + id.error());
    engine.run_until_idle();
    if (!error.empty()) return make_error(std::string(what) + ": " + error);
    if (!r.tokens.empty()) r.ttft_s = since(t0, first);
    if (r.tokens.size() > 1) r.tokens_per_s = (double)(r.tokens.size() - 1) / since(first, last);
    return r;
}

Result<nlohmann::ordered_json> bench_e2e(Model& m, const Tokenizer& tok, const E2eBench& b, std::mt19937& rng) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    GrammarConstraint constraint;
    if (!b.schema_path.empty()) {
        std::ifstream f(b.schema_path);
        if (!f) return make_error("--e2e-schema: cannot open '" + b.schema_path + "'");
        std::stringstream ss;
        ss << f.rdbuf();
        auto schema = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
        if (schema.is_discarded()) return make_error("--e2e-schema: '" + b.schema_path + "' is not JSON");
        auto g = compile_json_schema(schema);
        if (!g.ok()) return make_error("--e2e-schema: " + g.error());
        constraint.grammar = std::make_shared<const TokenGrammar>(std::move(*g), TokenTrie::from_tokenizer(tok));
    }
    for (int64_t n_prompt : b.prompts) {
        EngineOptions eo;
        eo.n_slots = 1;
        eo.n_ctx = n_prompt + b.n_gen + 1;
        // Prompt chunks as `run` and the server take them (the engine's default for the backend).
        eo.quant_sim = b.quant_sim;
        eo.prefix_cache = false;  // every request computes its whole prompt
        Engine engine(m, tok, eo);
        for (const Sampling& sp : kSamplings) {
            if (constraint && sp.temperature > 0 && sp.temperature < 1) continue;  // greedy and T = 1 suffice
            DSV4_ASSIGN_OR_RETURN(nlohmann::ordered_json row,
                                  bench_row(engine, m.config().n_vocab, n_prompt, sp, b, constraint, rng));
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

void print_e2e(const nlohmann::ordered_json& rows) {
    for (const auto& e : rows) {
        std::printf("e2e      %5lld-token prompt, %-13s: first token in %7.1f ms",
                    (long long)e["prompt_tokens"].get<int64_t>(), e["sampling"].get<std::string>().c_str(),
                    e["ttft_ms"].get<double>());
        if (e.contains("tokens_per_s")) std::printf(", then %.2f tokens/s", e["tokens_per_s"].get<double>());
        if (e.contains("parsed_json"))
            std::printf(", schema-constrained: %lld of %lld answers parse as JSON", (long long)e["parsed_json"].get<int64_t>(),
                        (long long)e["requests"].get<int64_t>());
        std::printf(" (%lld tokens, median of %lld requests through the engine; first token at most %.1f ms, in %.1f ms "
                    "for the request before them)\n",
                    (long long)e["tokens"].get<int64_t>(), (long long)e["requests"].get<int64_t>(),
                    e["ttft_max_ms"].get<double>(), e["ttft_first_request_ms"].get<double>());
    }
}

Result<nlohmann::ordered_json> bench_e2e_batches(Model& m, const Tokenizer& tok, const E2eBench& b,
                                                 const std::vector<int64_t>& sizes, std::mt19937& rng) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    const int64_t n_prompt = b.prompts.front();
    const int64_t V = std::min<int64_t>(tok.n_vocab(), m.config().n_vocab);
    for (int64_t n : sizes) {
        EngineOptions eo;
        eo.n_slots = (int)n;
        eo.n_ctx = n_prompt + b.n_gen + 1;
        eo.quant_sim = b.quant_sim;
        eo.prefix_cache = false;
        Engine engine(m, tok, eo);
        std::vector<std::vector<Clock::time_point>> times((size_t)n);  // each generated token's arrival
        std::string error;
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < n; ++i) {
            GenerationRequest req;
            for (int64_t t = 0; t < n_prompt; ++t) req.prompt.push_back((int32_t)(rng() % V));
            req.max_tokens = b.n_gen;
            req.ignore_eos = true;
            req.sampling.temperature = 0;
            auto id = engine.submit(std::move(req), [&, i](const TokenEvent& ev) {
                if (ev.token >= 0 && !ev.prompt) times[i].push_back(Clock::now());
                if (ev.finished && ev.reason == GenerationEnd::error) error = ev.error;
            });
            if (!id.ok()) return make_error("bench --batch --e2e: " + id.error());
        }
        engine.run_until_idle();
        if (!error.empty()) return make_error("bench --batch --e2e: " + error);
        // The decoding window: from the last request's first token to the last token of any request; the
        // tokens in it are those that arrived after its start.
        Clock::time_point start = t0, end = t0;
        for (const auto& t : times) {
            if (t.empty()) return make_error("bench --batch --e2e: a request produced no token");
            start = std::max(start, t.front());
            end = std::max(end, t.back());
        }
        int64_t after = 0;
        std::vector<double> ttft;
        for (const auto& t : times) {
            ttft.push_back(since(t0, t.front()));
            after += std::count_if(t.begin(), t.end(), [&](Clock::time_point x) { return x > start; });
        }
        const double window = since(start, end);
        std::vector<double> sorted = ttft;
        std::sort(sorted.begin(), sorted.end());
        nlohmann::ordered_json r = {{"sequences", n}, {"prompt_tokens", n_prompt}, {"tokens", b.n_gen},
                                    {"ttft_p50_ms", 1e3 * median_of(ttft)}, {"ttft_max_ms", 1e3 * sorted.back()}};
        if (window > 0 && after > 0) {
            r["tokens_per_s"] = (double)after / window;
            r["tokens_per_s_per_stream"] = (double)after / window / (double)n;
        }
        rows.push_back(std::move(r));
    }
    return rows;
}

void print_e2e_batches(const nlohmann::ordered_json& rows) {
    for (const auto& r : rows) {
        std::printf("e2e      %3lld streams of a %lld-token prompt, greedy: first token p50 %.1f ms (slowest %.1f ms)",
                    (long long)r["sequences"].get<int64_t>(), (long long)r["prompt_tokens"].get<int64_t>(),
                    r["ttft_p50_ms"].get<double>(), r["ttft_max_ms"].get<double>());
        if (r.contains("tokens_per_s"))
            std::printf(", then %.1f tokens/s in all (%.2f per stream)", r["tokens_per_s"].get<double>(),
                        r["tokens_per_s_per_stream"].get<double>());
        std::printf(" (%lld tokens each, one engine of as many slots)\n", (long long)r["tokens"].get<int64_t>());
    }
}

}  // namespace dsv4::cli
