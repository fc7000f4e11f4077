#include "cli/generate.h"

#include <chrono>
#include <cstdio>

#include "runtime/speculative.h"

namespace dsv4::cli {

Result<Loaded> load_model_and_tokenizer(const ModelOptions& m, const DeviceOptions& dev) {
    Loaded l;
    const std::string& path = m.path;
    DSV4_ASSIGN_OR_RETURN(l.backend, make_backend(dev));
    DSV4_ASSIGN_OR_RETURN(l.model, load_model(m, *l.backend, false));
    auto tok = Tokenizer::from_gguf(l.model->file());
    if (!tok.ok()) return make_error("'" + path + "' has no usable tokenizer: " + tok.error());
    l.tokenizer = std::move(*tok);
    if (l.tokenizer->n_vocab() != l.model->config().n_vocab)
        return make_error("the tokenizer has " + std::to_string(l.tokenizer->n_vocab()) + " tokens but the model " +
                          std::to_string(l.model->config().n_vocab));
    return l;
}

void add_sampling_options(CLI::App& app, SamplingOptions& s) {
    app.add_option("--temp", s.temperature, "sampling temperature (0 = greedy)")->capture_default_str()->check(non_negative_number());
    app.add_option("--top-p", s.top_p, "nucleus sampling probability mass")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0 = off)")->capture_default_str()->check(non_negative_number());
    app.add_option("--min-p", s.min_p, "drop tokens below min_p times the top probability")
        ->capture_default_str()->check(CLI::Range(0.0, 1.0));
    app.add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1 = off)")->capture_default_str();
    app.add_option("--seed", s.seed, "random seed (default: from the clock)");
}

SamplingParams to_sampling_params(const SamplingOptions& s) {
    SamplingParams p;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.top_k = s.top_k;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repeat_penalty;
    p.seed = s.seed >= 0 ? (uint64_t)s.seed
                         : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    return p;
}

GenerationResult generate_sync(Engine& engine, GenerationRequest req,
                               const std::function<void(std::string_view)>& on_text,
                               const std::atomic<bool>* interrupt) {
    GenerationResult out;
    out.prompt_tokens = (int64_t)req.prompt.size();
    const auto t0 = std::chrono::steady_clock::now();
    auto t_first = t0;
    bool first = true, done = false;
    auto id = engine.submit(std::move(req), [&](const TokenEvent& ev) {
        if (first && ev.token >= 0) {
            t_first = std::chrono::steady_clock::now();
            first = false;
        }
        if (!ev.text.empty()) on_text(ev.text);
        if (ev.finished) {
            done = true;
            out.reason = ev.reason;
            out.error = ev.error;
            out.completion_tokens = ev.completion_tokens;
            out.cached_tokens = ev.cached_tokens;
        }
    });
    if (!id.ok()) {
        out.reason = GenerationEnd::error;
        out.error = id.error();
        return out;
    }
    bool cancelled = false;
    while (!done) {
        if (interrupt && interrupt->load() && !cancelled) {
            engine.cancel(*id);
            cancelled = true;
        }
        engine.step();
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (first) t_first = t1;
    out.prompt_seconds = std::chrono::duration<double>(t_first - t0).count();
    out.generation_seconds = std::chrono::duration<double>(t1 - t_first).count();
    return out;
}

void print_speed(const GenerationResult& r) {
    const int64_t computed = r.prompt_tokens - r.cached_tokens;
    // The first token comes out of the prompt step; the rest are decode steps.
    const int64_t decoded = std::max<int64_t>(0, r.completion_tokens - 1);
    std::fprintf(stderr, "\nprompt: %lld tokens (%lld cached) in %.2f s (%.1f tok/s) | generation: %lld tokens in %.2f s (%.1f tok/s)\n",
                 (long long)r.prompt_tokens, (long long)r.cached_tokens, r.prompt_seconds,
                 r.prompt_seconds > 0 ? computed / r.prompt_seconds : 0.0, (long long)r.completion_tokens,
                 r.generation_seconds, r.generation_seconds > 0 ? decoded / r.generation_seconds : 0.0);
}

void add_speculative_option(CLI::App& app, std::string& spec) {
    app.add_option("--speculative", spec,
                   "speculative decoding with the model's MTP block: mtp (one draft per step) or mtp:K (K drafts, "
                   "the block applied to its own output); greedy output is unchanged, sampled output keeps the "
                   "model's distribution");
}

Result<int> speculative_drafts(const std::string& spec, const Model& model) {
    DSV4_ASSIGN_OR_RETURN(int k, parse_speculative(spec));
    DSV4_TRY(check_speculative(model, k));
    return k;
}

void print_speculation(const EngineStats& s, int drafts) {
    if (drafts <= 0 || s.spec_steps == 0) return;
    const double rate = s.draft_tokens ? (double)s.accepted_tokens / (double)s.draft_tokens : 0.0;
    std::fprintf(stderr, "speculation: %d draft%s per step, %llu of %llu accepted (%.1f%%), %.2f tokens per step\n",
                 drafts, drafts == 1 ? "" : "s", (unsigned long long)s.accepted_tokens,
                 (unsigned long long)s.draft_tokens, 100.0 * rate,
                 (double)(s.accepted_tokens + s.spec_steps) / (double)s.spec_steps);
}

}  // namespace dsv4::cli
