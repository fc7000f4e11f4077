// The generation engine: requests in, token events out. One step is three moves (nano-vllm style): the
// scheduler plans which sequences run (prefill chunks and single-token decodes), the model runs them as one
// batched forward, and the scheduler updates them (sample, stream, stop, prefix-cache snapshots).
// Thread model: submit()/cancel() may be called from any thread; step() runs on one thread (the server's
// engine loop, or the CLI's own loop). Event callbacks run on the stepping thread and must not block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/step_runner.h"
#include "model/deepseek4.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Why a generation ended ("stop" covers EOS, stop tokens and stop strings).
enum class GenerationEnd { none, stop, length, cancelled, error };
const char* generation_end_name(GenerationEnd r);

struct GenerationRequest {
    std::vector<int32_t> prompt;          // full prompt ids (BOS included by the caller when wanted)
    SamplingParams sampling;
    // Generated tokens at most (also bounded by the context). 0: none; with prompt_logprobs the prompt is
    // only scored, without it the request ends at once (reason length).
    int64_t max_tokens = 256;
    std::vector<std::string> stop;        // stop strings (not included in the output)
    bool ignore_eos = false;              // keep going past the end-of-sequence token
    std::vector<int32_t> stop_tokens;     // extra token ids that end generation (e.g. an end-of-turn token)
    int top_logprobs = 0;                 // alternatives reported per token (0 = only the chosen one)
    bool logprobs = false;
    // Score the prompt (OpenAI's echo with logprobs): one event with prompt = true per prompt token after the
    // first, in order, each with its logprob and sampling.top_logprobs alternatives from the prefill's logits
    // (every row of each prompt chunk). Such a request is not restored from the prefix cache, so that every
    // prompt token is computed.
    bool prompt_logprobs = false;
    // Constrained decoding: the grammar's token mask applies before every draw; EOS and stop_tokens are
    // allowed exactly where the grammar's value is complete.
    GrammarConstraint constraint;
};

// One streamed event. `text` is the newly released output text: complete UTF-8, with any text that could
// still become a stop string held back until it is disambiguated.
struct TokenEvent {
    uint64_t request_id = 0;
    int32_t token = -1;                   // -1 for the final event when it carries no token
    bool prompt = false;                  // a scored prompt token (prompt_logprobs), not a generated one
    std::string text;                     // generated text (never set on prompt events)
    float logprob = 0;
    std::vector<TokenLogprob> top;        // when requested
    bool finished = false;
    GenerationEnd reason = GenerationEnd::none;
    std::string error;                    // when reason == error
    int64_t prompt_tokens = 0;            // usage, filled on the final event
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;            // prompt tokens restored from the prefix cache
    int32_t stop_index = -1;              // final event of a generation a stop string ended: which one
};

// Where tokens are drawn: on the model's backend (only ids and logprobs cross to the host; constrained
// requests and more than kSampleMaxTop alternatives stay on the host) or by the host Sampler over downloaded
// logits. `automatic`: the backend unless it is the host itself.
enum class DrawPlace { automatic, host, backend };

struct EngineOptions {
    int n_slots = 4;               // sequences decoding at once (each owns a KV cache)
    int64_t n_ctx = 4096;          // tokens per sequence (prompt + generation)
    // Prompt tokens per sequence per step, and rows per batched step (decodes first, then prefill chunks);
    // 0: by backend. A device runs a prompt's matmuls on tensor cores, whose cost per step is nearly fixed up
    // to thousands of rows, so it takes 4096-token chunks (a 4K prompt in one step); the host takes 256.
    int64_t prefill_chunk = 0;
    int64_t step_token_budget = 0;
    bool quant_sim = true;         // the model's inference-time rounding
    bool prefix_cache = true;
    int64_t prefix_block = 64;     // snapshot granularity in tokens
    size_t prefix_cache_bytes = (size_t)2 << 30;
    size_t max_queue = 256;        // waiting requests beyond this are rejected (HTTP 429)
    // Bytes the KV-cache slots may take, for plan_slots (runtime/slot_plan.h); 0: the backend's free memory
    // less room for the largest step's activations. The Engine itself allocates n_slots caches as told.
    size_t kv_memory = 0;
    DrawPlace draw = DrawPlace::automatic;
    // Speculative decoding with the model's MTP block (runtime/speculative.h): drafts per step, 0 = off
    // (check_speculative says whether the model takes it). Constrained requests decode plainly.
    int speculative = 0;
    // Mechanics mode (bench, tests): called with every draft the MTP block proposes (request id, the index
    // the draft would take in the request's tokens, the proposal); the returned token is verified instead.
    // The MTP block still runs, so the cost of a step is real; only the drafts' source is not.
    std::function<int32_t(uint64_t request, int64_t index, int32_t proposed)> draft_override;
};

struct EngineStats {
    uint64_t requests_total = 0, requests_finished = 0, requests_rejected = 0, requests_cancelled = 0;
    uint64_t prompt_tokens = 0, generated_tokens = 0, cached_prompt_tokens = 0;
    uint64_t steps = 0;
    double busy_seconds = 0;       // time spent inside model steps
    size_t queue_depth = 0, running = 0;
    int64_t kv_tokens_used = 0, kv_tokens_capacity = 0;
    size_t prefix_cache_entries = 0, prefix_cache_bytes = 0;
    uint64_t prefix_cache_hits = 0, prefix_cache_misses = 0;
    // Speculative decoding: verify steps that had drafts, drafts proposed in them, drafts accepted.
    uint64_t spec_steps = 0, draft_tokens = 0, accepted_tokens = 0;
};

// Prompt tokens per sequence per step: opt.prefill_chunk, or the backend's default when 0 (4096 on a device,
// 256 on the host).
int64_t resolved_prefill_chunk(const EngineOptions& opt, const Backend& backend);

class Engine {
public:
    using Callback = std::function<void(const TokenEvent&)>;

    Engine(Model& model, const Tokenizer& tokenizer, EngineOptions opt);
    ~Engine();

    // Queue a request; its events go to `on_event` (the last one has finished = true). Returns its id, or
    // an error when the queue is full or the request cannot fit the context (prompt + max_tokens > n_ctx).
    Result<uint64_t> submit(GenerationRequest req, Callback on_event);
    // Stop a request (queued or running); its final event has reason `cancelled`. Unknown ids are ignored.
    void cancel(uint64_t id);

    // One scheduler iteration; returns false when there was nothing to do.
    bool step();
    // Step until no request is queued or running.
    void run_until_idle();
    // Block until a request is queued (or `stop` is set / timeout); for the server's engine loop.
    void wait_for_work(const std::atomic<bool>& stop, int timeout_ms);
    void notify();

    bool idle() const;
    EngineStats stats() const;
    const EngineOptions& options() const { return opt_; }
    const Model& model() const { return model_; }
    const Tokenizer& tokenizer() const { return tok_; }

private:
    struct Sequence;
    void admit();
    void finish(Sequence& s, GenerationEnd r, const std::string& error = {});
    void release(Sequence& s);
    void publish_prefix(Sequence& s);
    // The state at a prefix-cache block boundary (s.n_fed is one).
    void take_block_snapshot(Sequence& s);
    void refresh_stats();
    bool sample_and_emit(Sequence& s, std::span<const float> logits);
    // The rest of a draw (the token, or the error that ends the sequence): stop checks and the event.
    bool emit_token(Sequence& s, Result<SampleResult> r);
    // Where draws go (EngineOptions::draw), and whether this sequence's can go there.
    bool backend_draws() const;
    bool draws_on_backend(const Sequence& s) const;
    Result<SampleResult> sample_token(Sequence& s, std::span<const float> logits);
    // The prompt_logprobs events of a prompt chunk just run: logits [n, n_vocab] for tokens from `begin`.
    bool emit_prompt_scores(Sequence& s, int64_t begin, int64_t n, const std::vector<float>& logits);

    // Speculative decoding (engine_speculative.cpp). Before the step: how a sequence's item verifies its
    // drafts (the cache saved for rollback, every row's logits or draws). After it: the verdict on a verify
    // step (tokens emitted, cache rolled back), and the MTP block over the rows the step made final, which
    // proposes the next drafts (unless `draft_next` is off: the batch decodes plainly). `drawn` holds the
    // item's backend draws.
    Status prepare_verify(Sequence& s, Model::BatchItem& item, std::vector<DrawRequest>& draws,
                          std::vector<SampleOut>& drawn);
    void finish_verify(Sequence& s, const Model::BatchItem& item, std::span<const SampleOut> drawn, bool draft_next);
    // The MTP block on `rows` rows of the slot's hidden buffer at positions p0.. (next tokens from
    // s.tokens[p0 + 1 ..]), then drafts for the next step when `propose` is set.
    Status run_mtp(Sequence& s, int64_t p0, int64_t rows, bool propose);
    Result<int32_t> draft_token(Sequence& s, const SampleOut* drawn, std::span<const float> logits, int64_t index);
    int max_drafts(const Sequence& s) const;

    Model& model_;
    StepRunner runner_;  // the model's decode steps replay as step graphs
    const Tokenizer& tok_;
    EngineOptions opt_;
    std::vector<std::unique_ptr<KvCache>> caches_;
    std::vector<bool> cache_busy_;
    // Per slot, with speculation: the main model's final streams of the rows the MTP block reads next
    // ([window, hc, D]) and two [hc, D] buffers for chained drafts (backend memory).
    std::vector<float*> spec_hidden_, spec_chain_;
    std::unique_ptr<PrefixCache> prefix_;

    mutable std::mutex mu_;  // guards queue_, cancelled_, stats_
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Sequence>> queue_;
    std::vector<uint64_t> cancelled_;
    uint64_t next_id_ = 1;
    EngineStats stats_;
    std::vector<std::unique_ptr<Sequence>> running_;  // stepping thread only
};

}  // namespace dsv4
