// Constrained-decoding cost over the real DeepSeek vocabulary (128k tokens): for a few typical schemas,
// simulated generations (each step draws from random logits under the mask at temperature 1, as a
// random-weight model would, up to 256 tokens per value) time GrammarMatcher::mask + accept per token and
// mask + draw + accept per token (the whole constrained step but the forward pass), in microseconds of this
// thread's CPU time.
// "warm" reuses the schema's mask cache across generations (the server keeps compiled schemas); "cold" is
// one uncached trie walk (a state seen the first time). The target is <= 50 us per token warm. The same again
// under a tight budget (the grammar's minimum + 8 draws), where masks drop the tokens that no longer fit.
//   usage: bench_grammar [VOCAB_GGUF] [GENERATIONS_PER_SCHEMA]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "runtime/json_schema.h"
#include "runtime/sampler.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace {

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Case {
    const char* name;
    const char* schema;  // nullptr: json_object mode
};

const Case kCases[] = {
    {"json_object", nullptr},
    {"flat object", R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "email": {"type": "string"}, "active": {"type": "boolean"}}, "required": ["name", "age", "email", "active"],
        "additionalProperties": false})"},
    {"nested + enum + array", R"({"type": "object", "properties": {"id": {"type": "integer"},
        "status": {"enum": ["open", "closed", "pending"]}, "tags": {"type": "array", "items": {"type": "string"},
        "maxItems": 4}, "owner": {"type": "object", "properties": {"name": {"type": "string"},
        "score": {"type": "number"}}, "required": ["name", "score"], "additionalProperties": false}},
        "required": ["id", "status", "tags", "owner"], "additionalProperties": false})"},
    {"recursive $ref + anyOf", R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string"}, "value": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["label", "value", "children"], "additionalProperties": false}}})"},
    {"maxLength strings", R"({"type": "object", "properties": {"customer": {"type": "string", "maxLength": 24},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 12},
        "quantity": {"type": "integer", "minimum": 1}, "gift": {"type": "boolean"}}, "required": ["sku", "quantity",
        "gift"], "additionalProperties": false}, "maxItems": 3}, "priority": {"enum": ["low", "normal", "high"]}},
        "required": ["customer", "items", "priority"], "additionalProperties": false})"},
    {"email", R"({"type": "object", "properties": {"contact": {"type": "string", "format": "email"}},
        "required": ["contact"], "additionalProperties": false})"},
    {"pattern + bounds + email", R"({"type": "object", "properties": {"code": {"type": "string",
        "pattern": "^[A-Z]{3}-\\d{4}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 500},
        "price": {"type": "number", "minimum": 0, "maximum": 10000}, "note": {"type": "string", "maxLength": 40},
        "contact": {"type": "string", "format": "email"}}, "required": ["code", "qty", "price", "note", "contact"],
        "additionalProperties": false})"},
};

}  // namespace

int main(int argc, char** argv) {
    const std::string vocab_path = argc > 1 ? argv[1] : "../shared/fixtures/tokenizer/deepseek_v3/vocab.gguf";
    const int n_gen = argc > 2 ? std::atoi(argv[2]) : 50;
    auto file = dsv4::GgufFile::open(vocab_path);
    if (!file.ok()) {
        std::fprintf(stderr, "bench_grammar: %s\n", file.error().c_str());
        return 1;
    }
    auto tok = dsv4::Tokenizer::from_gguf(**file);
    if (!tok.ok()) {
        std::fprintf(stderr, "bench_grammar: %s\n", tok.error().c_str());
        return 1;
    }
    const double t_trie = thread_cpu_seconds();
    auto trie = dsv4::TokenTrie::from_tokenizer(**tok);
    std::printf("vocabulary: %lld tokens, trie %zu nodes (built in %.0f ms)\n", (long long)(*tok)->n_vocab(),
                trie->nodes.size(), (thread_cpu_seconds() - t_trie) * 1e3);
    std::printf("%-24s %10s %10s %12s %12s %10s %12s | %6s %10s %12s %9s\n", "schema", "tokens", "us/token", "+draw us/tok",
                "cache hits", "states", "cold us", "budget", "us/token", "cache hits", "ended");
    const int32_t eos = (*tok)->eos();
    // A pool of random logit rows, one picked per step.
    std::vector<std::vector<float>> pool(8, std::vector<float>((size_t)(*tok)->n_vocab()));
    {
        std::mt19937_64 prng(11);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& row : pool)
            for (float& x : row) x = nd(prng);
    }
    for (const Case& c : kCases) {
        dsv4::Grammar g;
        if (c.schema) {
            auto r = dsv4::compile_json_schema(nlohmann::ordered_json::parse(c.schema));
            if (!r.ok()) {
                std::fprintf(stderr, "bench_grammar: %s\n", r.error().c_str());
                return 1;
            }
            g = std::move(*r);
        } else {
            g = dsv4::json_object_grammar();
        }
        // Each generation under a budget of `budget` draws (-1: none).
        struct Run {
            double timed = 0, drawn = 0;
            long long n_tokens = 0, ended = 0;
        };
        auto generate = [&](const std::shared_ptr<dsv4::TokenGrammar>& tg, int64_t budget, Run& out, uint64_t seed) {
            std::mt19937_64 rng(7 + seed);
            for (int gen = 0; gen < n_gen; ++gen) {
                dsv4::GrammarMatcher m(dsv4::GrammarConstraint{tg}, {eos});
                dsv4::SamplingParams sp;
                sp.seed = seed * 1000 + static_cast<uint64_t>(gen);
                dsv4::Sampler sampler(sp);
                const int64_t steps = budget < 0 ? 256 : budget;
                for (int64_t step = 0; step < steps; ++step) {
                    const double t0 = thread_cpu_seconds();
                    auto mask = m.mask(budget < 0 ? -1 : budget - step);
                    const double t1 = thread_cpu_seconds();
                    auto r = sampler.sample(pool[rng() % pool.size()], {}, mask);
                    const double t2 = thread_cpu_seconds();
                    if (!r.ok()) break;
                    const int32_t pick = r->token;
                    const bool ok = m.accept(pick, (*tok)->token_text(pick)).ok();
                    const double t3 = thread_cpu_seconds();
                    out.timed += (t1 - t0) + (t3 - t2);
                    out.drawn += t3 - t0;
                    ++out.n_tokens;
                    if (!ok) return false;
                    if (pick == eos) {
                        ++out.ended;
                        break;
                    }
                }
            }
            return true;
        };
        dsv4::Grammar g_tight = g;
        auto tg = std::make_shared<dsv4::TokenGrammar>(std::move(g), trie);
        Run ample;
        if (!generate(tg, -1, ample, 0)) {
            std::fprintf(stderr, "bench_grammar: an allowed token was rejected\n");
            return 1;
        }
        const double timed = ample.timed, drawn = ample.drawn;
        const long long n_tokens = ample.n_tokens;
        // Tight: a budget of the minimum plus 8, so most steps run under a budget that removes tokens; timed
        // on a second round of generations (other seeds), the cache warm from the first as for the others.
        auto tight_g = std::make_shared<dsv4::TokenGrammar>(std::move(g_tight), trie);
        const int64_t budget = dsv4::constraint_min_tokens(dsv4::GrammarConstraint{tight_g}, true) + 8;
        Run warmup, tight;
        if (!generate(tight_g, budget, warmup, 1) || !generate(tight_g, budget, tight, 2)) {
            std::fprintf(stderr, "bench_grammar: an allowed token was rejected under a budget\n");
            return 1;
        }
        const auto tst = tight_g->cache_stats();
        // One uncached walk from the start state.
        dsv4::GrammarRunner run(tg->grammar());
        const dsv4::GrammarState s = run.initial();
        dsv4::TokenMask scratch;
        const int reps = 5;
        const double t2 = thread_cpu_seconds();
        for (int i = 0; i < reps; ++i) tg->compute_mask(s, scratch);
        const double cold_start = (thread_cpu_seconds() - t2) / reps;
        const auto st = tg->cache_stats();
        std::printf("%-24s %10lld %10.2f %12.2f %11.1f%% %10llu %12.0f | %6lld %10.2f %11.1f%% %7lld/%d\n", c.name,
                    n_tokens, timed / (double)n_tokens * 1e6, drawn / (double)n_tokens * 1e6,
                    100.0 * (double)st.hits / (double)(st.hits + st.misses), (unsigned long long)st.misses, cold_start * 1e6,
                    (long long)budget, tight.timed / (double)tight.n_tokens * 1e6,
                    100.0 * (double)tst.hits / (double)(tst.hits + tst.misses), tight.ended, n_gen);
    }
    // The widest mask: inside a string (nearly every token allowed), uncached; and what applying a mask adds
    // to a draw (Sampler::sample at temperature 1 with and without it).
    auto tg = std::make_shared<dsv4::TokenGrammar>(dsv4::json_object_grammar(), trie);
    dsv4::GrammarRunner run(tg->grammar());
    dsv4::GrammarState in_string = run.initial();
    (void)run.advance(in_string, "{\"k\":\"");
    dsv4::GrammarState after_key = run.initial();
    (void)run.advance(after_key, "{\"k\"");
    dsv4::TokenMask wide, narrow;
    const double t4 = thread_cpu_seconds();
    for (int i = 0; i < 5; ++i) tg->compute_mask(in_string, wide);
    std::printf("uncached mask inside a string: %.0f us\n", (thread_cpu_seconds() - t4) / 5 * 1e6);
    tg->compute_mask(after_key, narrow);
    std::mt19937_64 lrng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> logits((size_t)(*tok)->n_vocab());
    for (float& x : logits) x = nd(lrng);
    dsv4::SamplingParams sp;
    sp.seed = 1;
    dsv4::Sampler sampler(sp);
    auto draw_us = [&](std::span<const uint64_t> mask) {
        const int n = 200;
        const double t = thread_cpu_seconds();
        for (int i = 0; i < n; ++i) (void)sampler.sample(logits, {}, mask);
        return (thread_cpu_seconds() - t) / n * 1e6;
    };
    std::printf("draw at temperature 1: %.0f us unmasked, %.0f us with a string's mask, %.0f us with a mask after a key\n",
                draw_us({}), draw_us(wide), draw_us(narrow));
    std::printf("us/token: mask + accept; +draw: mask + draw + accept (cached masks reused across generations); cold us: one\n"
                "uncached walk from the start; after '|': generations under a budget of the grammar's minimum + 8 draws\n"
                "(mask + accept per token in a second round, the cache hits of both rounds, how many of the second\n"
                "round ended with EOS within the budget)\n");
    return 0;
}
