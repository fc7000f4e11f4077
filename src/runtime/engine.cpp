// Engine: continuous batching over a fixed set of KV-cache slots. Each step: drop cancelled requests, admit
// queued ones into free slots (restoring the longest cached prefix), plan one batch (every decoding sequence's
// next token first, then prompt chunks within the step budget, cut at prefix-cache block boundaries), run it
// as one model step, then sample, stream and stop.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/check.h"
#include "runtime/device_draw.h"
#include "runtime/engine_sequence.h"
#include "runtime/speculative.h"

namespace dsv4 {

const char* generation_end_name(GenerationEnd r) {
    switch (r) {
        case GenerationEnd::none: return "none";
        case GenerationEnd::stop: return "stop";
        case GenerationEnd::length: return "length";
        case GenerationEnd::cancelled: return "cancelled";
        case GenerationEnd::error: return "error";
    }
    return "none";
}

int64_t resolved_prefill_chunk(const EngineOptions& opt, const Backend& backend) {
    return opt.prefill_chunk > 0 ? opt.prefill_chunk : backend.is_host() ? 256 : 4096;
}

Engine::Engine(Model& model, const Tokenizer& tokenizer, EngineOptions opt)
    : model_(model), runner_(model), tok_(tokenizer), opt_(opt) {
    const bool host = model_.backend().is_host();
    opt_.prefill_chunk = resolved_prefill_chunk(opt_, model_.backend());
    if (opt_.step_token_budget <= 0) opt_.step_token_budget = host ? 512 : opt_.prefill_chunk + opt_.n_slots;
    DSV4_CHECK(opt_.n_slots > 0 && opt_.n_ctx > 0 && opt_.prefill_chunk > 0);
    opt_.step_token_budget = std::max<int64_t>(opt_.step_token_budget, opt_.n_slots);
    DSV4_CHECK(check_speculative(model_, opt_.speculative).ok());
    const bool spec = opt_.speculative > 0;
    for (int i = 0; i < opt_.n_slots; ++i) caches_.push_back(model_.new_cache(opt_.n_ctx, spec, kv_store_for(opt_.quant_sim)));
    cache_busy_.assign(opt_.n_slots, false);
    if (spec) {
        const ModelConfig& c = model_.config();
        const size_t stream = (size_t)c.hc * c.n_embd * sizeof(float);
        for (int i = 0; i < opt_.n_slots; ++i) {
            spec_hidden_.push_back(static_cast<float*>(model_.backend().alloc(stream * c.window)));
            spec_chain_.push_back(static_cast<float*>(model_.backend().alloc(2 * stream)));
        }
    }
    if (opt_.prefix_cache) prefix_ = std::make_unique<PrefixCache>(opt_.prefix_block, opt_.prefix_cache_bytes);
    stats_.kv_tokens_capacity = opt_.n_ctx * opt_.n_slots;
}

Engine::~Engine() {
    for (float* p : spec_hidden_) model_.backend().free(p);
    for (float* p : spec_chain_) model_.backend().free(p);
}

Result<uint64_t> Engine::submit(GenerationRequest req, Callback on_event) {
    if (req.prompt.empty()) return make_error("the prompt is empty");
    DSV4_TRY(tok_.check_ids(req.prompt));
    DSV4_TRY(validate_sampling_params(req.sampling));
    if (req.max_tokens < 0) return make_error("max_tokens must not be negative");
    const int64_t need = (int64_t)req.prompt.size() + req.max_tokens;
    if (need > opt_.n_ctx)
        return make_error("the prompt (" + std::to_string(req.prompt.size()) + " tokens) plus max_tokens (" +
                          std::to_string(req.max_tokens) + ") exceeds the context size of " +
                          std::to_string(opt_.n_ctx) + " tokens");
    auto s = std::make_unique<Sequence>();
    s->req = std::move(req);
    s->cb = std::move(on_event);
    s->tokens = s->req.prompt;
    s->n_prompt = (int64_t)s->tokens.size();
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.size() >= opt_.max_queue) {
        ++stats_.requests_rejected;
        return make_error("the server is busy: " + std::to_string(queue_.size()) + " requests are waiting");
    }
    s->id = next_id_++;
    const uint64_t id = s->id;
    ++stats_.requests_total;
    queue_.push_back(std::move(s));
    cv_.notify_all();
    return id;
}

void Engine::cancel(uint64_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    cancelled_.push_back(id);
    cv_.notify_all();
}

void Engine::notify() { cv_.notify_all(); }

void Engine::wait_for_work(const std::atomic<bool>& stop, int timeout_ms) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                 [&] { return stop.load() || !queue_.empty() || !cancelled_.empty() || !running_.empty(); });
}

bool Engine::idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.empty() && running_.empty();
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    EngineStats s = stats_;
    s.queue_depth = queue_.size();
    return s;
}

void Engine::release(Sequence& s) {
    if (s.slot >= 0) cache_busy_[s.slot] = false;
    s.slot = -1;
    s.cache = nullptr;
}

void Engine::publish_prefix(Sequence& s) {
    if (!prefix_ || !s.block_snap || !s.cache) return;
    const int64_t p = s.block_snap->pos;
    if (p <= 0 || p > (int64_t)s.tokens.size()) return;
    prefix_->insert(std::span<const int32_t>(s.tokens.data(), p), s.cache->add_entries(*s.block_snap));
}

void Engine::finish(Sequence& s, GenerationEnd r, const std::string& error) {
    if (s.done) return;
    s.done = true;
    TokenEvent ev;
    ev.request_id = s.id;
    if (s.stop && r != GenerationEnd::error) ev.text = s.stop->flush().text;
    ev.finished = true;
    ev.reason = r;
    ev.error = error;
    ev.prompt_tokens = s.n_prompt;
    ev.completion_tokens = (int64_t)s.generated.size();
    ev.cached_tokens = s.cached;
    ev.stop_index = s.stop_index;
    if (r != GenerationEnd::error && r != GenerationEnd::cancelled) publish_prefix(s);
    release(s);
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.requests_finished;
        if (r == GenerationEnd::cancelled) ++stats_.requests_cancelled;
    }
    if (s.cb) s.cb(ev);
}

void Engine::admit() {
    for (;;) {
        int slot = -1;
        for (int i = 0; i < (int)cache_busy_.size(); ++i)
            if (!cache_busy_[i]) {
                slot = i;
                break;
            }
        if (slot < 0) return;
        std::unique_ptr<Sequence> s;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (queue_.empty()) return;
            s = std::move(queue_.front());
            queue_.pop_front();
        }
        if (s->req.max_tokens == 0 && !s->req.prompt_logprobs) {
            // Nothing to generate and nothing to score: done before any step.
            finish(*s, GenerationEnd::length);
            continue;
        }
        cache_busy_[slot] = true;
        s->slot = slot;
        s->cache = caches_[slot].get();
        s->cache->reset();
        s->sampler.emplace(s->req.sampling);
        s->spec = opt_.speculative > 0 && !s->req.constraint;
        s->stop.emplace(s->req.stop, s->req.max_tokens);
        if (s->req.constraint) {
            std::vector<int32_t> ends = s->req.stop_tokens;
            if (!s->req.ignore_eos) ends.push_back(tok_.eos());
            s->matcher.emplace(s->req.constraint, std::move(ends));
        }
        if (prefix_ && !s->req.prompt_logprobs) {
            // Keep at least one prompt token to compute, so the first sampled token has logits.
            const KvCache::Snapshot* snap = prefix_->lookup(s->tokens, s->n_prompt - 1);
            if (snap && s->cache->restore(*snap).ok()) {
                s->n_fed = s->cached = snap->pos;
            } else {
                s->cache->reset();
            }
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            stats_.prompt_tokens += s->n_prompt;
            stats_.cached_prompt_tokens += s->cached;
        }
        running_.push_back(std::move(s));
    }
}

bool Engine::emit_prompt_scores(Sequence& s, int64_t begin, int64_t n, const std::vector<float>& logits) {
    const size_t V = logits.size() / static_cast<size_t>(n);
    // Row r holds the distribution of the token at begin + r + 1; the chunk's last row predicts the next
    // chunk's first token (or, after the prompt, the first generated one, which the sampler scores).
    const int64_t last = std::min(begin + n, s.n_prompt - 1);
    for (int64_t t = begin + 1; t <= last; ++t) {
        std::span<const float> row(logits.data() + static_cast<size_t>(t - 1 - begin) * V, V);
        auto r = score_token(row, s.tokens[static_cast<size_t>(t)], s.req.sampling.top_logprobs);
        if (!r.ok()) {
            finish(s, GenerationEnd::error, r.error());
            return false;
        }
        TokenEvent ev;
        ev.request_id = s.id;
        ev.token = r->token;
        ev.prompt = true;
        ev.logprob = r->logprob;
        ev.top = std::move(r->top_logprobs);
        if (s.cb) s.cb(ev);
    }
    return true;
}

// A constrained draw: the grammar's mask before sampling, under the draws left (max_tokens and the context
// room, as emit_token ends a generation), so the value and its end token fit. Only a token that completes a
// constraint's trigger with bytes the value cannot start with (or too late to finish) is refused after the
// draw; it is banned and drawn again.
Result<SampleResult> Engine::sample_token(Sequence& s, std::span<const float> logits) {
    if (!s.matcher) return s.sampler->sample(logits, s.generated);
    int64_t left = opt_.n_ctx - static_cast<int64_t>(s.tokens.size()) + 1;
    if (s.req.max_tokens > 0) left = std::min(left, s.req.max_tokens - static_cast<int64_t>(s.generated.size()));
    constexpr int kMaxRedraws = 16;
    for (int tries = 0;; ++tries) {
        auto r = s.sampler->sample(logits, s.generated, s.matcher->mask(std::max<int64_t>(left, 1)));
        if (!r.ok()) return r;
        Status st = s.matcher->accept(r->token, tok_.token_text(r->token));
        if (st.ok()) return r;
        if (tries == kMaxRedraws) return make_error(st.error());
        s.matcher->ban(r->token);
    }
}

bool Engine::backend_draws() const {
    return opt_.draw == DrawPlace::backend || (opt_.draw == DrawPlace::automatic && !model_.backend().is_host());
}

bool Engine::draws_on_backend(const Sequence& s) const {
    return backend_draws() && !s.matcher && backend_draw_serves(s.req.sampling);
}

bool Engine::sample_and_emit(Sequence& s, std::span<const float> logits) { return emit_token(s, sample_token(s, logits)); }

bool Engine::emit_token(Sequence& s, Result<SampleResult> r) {
    if (!r.ok()) {
        finish(s, GenerationEnd::error, r.error());
        return false;
    }
    const int32_t tok = r->token;
    s.generated.push_back(tok);
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.generated_tokens;
    }
    const bool is_eos = !s.req.ignore_eos && tok == tok_.eos();
    const bool is_stop_token = std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), tok) != s.req.stop_tokens.end();
    TokenEvent ev;
    ev.request_id = s.id;
    ev.token = tok;
    ev.logprob = r->logprob;
    if (s.req.logprobs || s.req.top_logprobs > 0) ev.top = r->top_logprobs;
    if (is_eos || is_stop_token) {
        if (s.cb) s.cb(ev);
        finish(s, GenerationEnd::stop);
        return false;
    }
    StopUpdate u = s.stop->push(tok_.token_text(tok));
    ev.text = std::move(u.text);
    if (s.cb) s.cb(ev);
    if (u.finish == FinishReason::stop) {
        s.stop_index = u.stop_index;
        finish(s, GenerationEnd::stop);
        return false;
    }
    if (u.finish == FinishReason::length || (int64_t)s.tokens.size() + 1 > opt_.n_ctx) {
        finish(s, GenerationEnd::length);
        return false;
    }
    s.tokens.push_back(tok);
    return true;
}

bool Engine::step() {
    // Cancellations.
    std::vector<uint64_t> cancelled;
    std::vector<std::unique_ptr<Sequence>> dropped;
    {
        std::lock_guard<std::mutex> lk(mu_);
        cancelled.swap(cancelled_);
        for (uint64_t id : cancelled) {
            auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& q) { return q->id == id; });
            if (it != queue_.end()) {
                dropped.push_back(std::move(*it));
                queue_.erase(it);
            }
        }
    }
    for (auto& d : dropped) finish(*d, GenerationEnd::cancelled);
    for (uint64_t id : cancelled)
        for (auto& s : running_)
            if (s->id == id) finish(*s, GenerationEnd::cancelled);
    std::erase_if(running_, [](const auto& s) { return s->done; });

    admit();
    if (running_.empty()) {
        refresh_stats();
        return !dropped.empty();
    }

    // Plan: decodes first (one token each), then prompt chunks while the budget lasts.
    struct Planned {
        Sequence* s;
        int64_t n;
        bool want_logits;  // the step ends the prompt or decodes: sample from its last row
        bool score;        // a prompt chunk of a prompt_logprobs request: logits for every row
        bool verify;       // a speculating sequence's decode: its last token and drafts (engine_speculative.cpp)
    };
    std::vector<Planned> plan;
    int64_t budget = opt_.step_token_budget;
    // Speculation while the verify steps stay small: past kMaxGraphTokens rows (several sequences decoding
    // at once) this step decodes every sequence plainly and drafts nothing for the next; the drafts come back
    // once the batch is small again (the MTP block's window then misses the plain steps' positions, which only
    // makes its first drafts worse: they are verified like any other).
    int64_t spec_decoders = 0;
    for (auto& s : running_) spec_decoders += s->spec && s->n_fed >= s->n_prompt;
    const bool speculate = spec_decoders * (1 + opt_.speculative) <= kMaxGraphTokens;
    for (auto& s : running_)
        if (s->n_fed >= s->n_prompt) {
            if (!speculate) s->drafts.clear();
            const int64_t n = 1 + (int64_t)s->drafts.size();  // drafts: only a speculating sequence's
            plan.push_back({s.get(), n, true, false, s->spec});
            budget -= n;
        }
    for (auto& s : running_) {
        if (s->n_fed >= s->n_prompt || budget <= 0) continue;
        int64_t end = std::min({s->n_prompt, s->n_fed + opt_.prefill_chunk, s->n_fed + budget});
        if (prefix_ && end < s->n_prompt) {
            // Cut at a block boundary so the state there can be snapshotted.
            const int64_t aligned = end / opt_.prefix_block * opt_.prefix_block;
            if (aligned > s->n_fed) end = aligned;
        }
        plan.push_back({s.get(), end - s->n_fed, end == s->n_prompt, s->req.prompt_logprobs, false});
        budget -= end - s->n_fed;
    }
    if (plan.empty()) return false;

    std::vector<Model::BatchItem> items(plan.size());
    // Each item's backend draws: one for a plain step's last row, one per row for a verify step.
    std::vector<std::vector<DrawRequest>> draws(plan.size());
    std::vector<std::vector<SampleOut>> drawn(plan.size());
    std::vector<std::string> draw_errors(plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
        Sequence& s = *plan[i].s;
        items[i].cache = s.cache;
        if (plan[i].verify) {
            if (Status st = prepare_verify(s, items[i], draws[i], drawn[i]); !st.ok()) draw_errors[i] = st.error();
            continue;
        }
        items[i].tokens = std::span<const int32_t>(s.tokens.data() + s.n_fed, plan[i].n);
        if (s.spec) {  // a prompt chunk: the MTP block reads the final streams of its last rows
            items[i].hidden_device = spec_hidden_[s.slot];
            items[i].hidden_from = std::max<int64_t>(0, plan[i].n - model_.config().window);
        }
        items[i].logits = plan[i].want_logits || plan[i].score ? &s.logits : nullptr;
        items[i].all_logits = plan[i].score;
        if (plan[i].want_logits && !plan[i].score && s.req.max_tokens != 0 && draws_on_backend(s)) {
            auto req = make_draw_request(*s.sampler, s.generated, model_.config().n_vocab);
            items[i].logits = nullptr;
            if (!req.ok()) {  // the step still runs the token; the sequence ends after it
                draw_errors[i] = req.error();
                continue;
            }
            draws[i].push_back(std::move(*req));
            drawn[i].resize(1);
            items[i].draw = draws[i].data();
            items[i].drawn = drawn[i].data();
        }
    }
    StepOptions opt;
    opt.quant_sim = opt_.quant_sim;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = runner_.step_batch(items, opt);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.steps;
        stats_.busy_seconds += dt;
    }
    if (!st.ok()) {
        for (auto& p : plan) finish(*p.s, GenerationEnd::error, st.error());
        std::erase_if(running_, [](const auto& s) { return s->done; });
        refresh_stats();
        return true;
    }
    for (size_t i = 0; i < plan.size(); ++i) {
        const Planned& p = plan[i];
        Sequence& s = *p.s;
        if (p.verify) {
            if (!draw_errors[i].empty())
                emit_token(s, make_error(draw_errors[i]));
            else
                finish_verify(s, items[i], drawn[i], speculate);
            continue;
        }
        const int64_t begin = s.n_fed;
        s.n_fed += p.n;
        const bool boundary = prefix_ && s.n_fed % opt_.prefix_block == 0;
        // With speculation the MTP block catches up on the chunk's last rows (and, after the prompt's last
        // chunk, drafts from the first generated token) before the state is worth keeping.
        auto catch_up = [&](bool propose) {
            const int64_t rows = std::min<int64_t>(p.n, model_.config().window);
            if (Status st = run_mtp(s, s.n_fed - rows, rows, propose); !st.ok()) {
                finish(s, GenerationEnd::error, st.error());
                return false;
            }
            if (boundary) take_block_snapshot(s);
            return true;
        };
        if (boundary && !s.spec) take_block_snapshot(s);
        if (s.spec && !p.want_logits && !catch_up(false)) continue;
        if (p.score && !emit_prompt_scores(s, begin, p.n, s.logits)) continue;
        if (!p.want_logits) continue;
        if (s.req.max_tokens == 0) {
            finish(s, GenerationEnd::length);  // the prompt was only to be scored
            continue;
        }
        bool alive;
        if (!draw_errors[i].empty()) {
            alive = emit_token(s, make_error(draw_errors[i]));
        } else if (items[i].draw) {
            alive = emit_token(s, draw_result(drawn[i][0]));
        } else {
            const size_t V = s.logits.size() / static_cast<size_t>(p.score ? p.n : 1);
            alive = sample_and_emit(s, std::span<const float>(s.logits).subspan(s.logits.size() - V));
        }
        if (alive && s.spec) catch_up(true);
    }
    std::erase_if(running_, [](const auto& s) { return s->done; });
    refresh_stats();
    return true;
}

void Engine::take_block_snapshot(Sequence& s) {
    s.block_snap = s.cache->snapshot(false);
    // A prompt boundary is worth sharing right away (concurrent requests with the same prefix).
    if (s.n_fed <= s.n_prompt) publish_prefix(s);
}

void Engine::refresh_stats() {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.running = running_.size();
    int64_t used = 0;
    for (auto& s : running_) used += s->n_fed;
    stats_.kv_tokens_used = used;
    if (prefix_) {
        stats_.prefix_cache_entries = prefix_->size();
        stats_.prefix_cache_bytes = prefix_->bytes();
        stats_.prefix_cache_hits = prefix_->hits();
        stats_.prefix_cache_misses = prefix_->misses();
    }
}

void Engine::run_until_idle() {
    while (step()) {
    }
}

}  // namespace dsv4
