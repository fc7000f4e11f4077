// The shared generation path and POST /v1/chat/completions, /v1/completions (see generation.h). Every
// endpoint follows it: parse and validate, build the prompt ids, check them against the context, submit,
// then collect events (chat APIs through ChatRun and their ChatStreamWriter). Streaming
// uses httplib's chunked content provider: each call waits briefly for events, writes them as SSE, and
// when none came checks that the client is still connected (DataSink::is_writable); a provider returning
// false or a stream ending early cancels the engine request in the resource releaser. A non-streaming request
// looks at its connection between waits (Exchange::client_gone) and is cancelled once the client has gone.
#include "server/generation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "server/exchange.h"

namespace dsv4::server {

using json = nlohmann::ordered_json;

namespace {

// How long one wait for events lasts before the handler looks at the connection again.
constexpr std::chrono::milliseconds kPollInterval(200);

std::string hex(uint64_t x) {
    char buf[20];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
    return buf;
}

TokenLogprobs to_logprobs(const TokenEvent& ev) {
    TokenLogprobs lp;
    lp.token = ev.token;
    lp.logprob = ev.logprob;
    for (const auto& t : ev.top) lp.top.emplace_back(t.token, t.logprob);
    return lp;
}

std::string finish_reason(GenerationEnd end, bool tool_calls) {
    return finish_reason_name(end == GenerationEnd::length, tool_calls);
}

// The request log's token counts (exchange.h); events are applied on the thread serving the request.
void note_usage(const TokenEvent& ev) {
    if (Exchange* ex = current_exchange()) {
        ex->prompt_tokens = ev.prompt_tokens;
        ex->completion_tokens = ev.completion_tokens;
        ex->cached_tokens = ev.cached_tokens;
    }
}

void append(ChatDelta& a, ChatDelta b) {
    a.reasoning += b.reasoning;
    a.content += b.content;
    for (auto& t : b.tool_calls) a.tool_calls.push_back(std::move(t));
}

}  // namespace

void send_json(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) { send_json(res, error.status, error_json(error)); }

// A client that went away sees nothing; cancelled here means the server is stopping.
ApiError end_error(GenerationEnd end, const std::string& message) {
    ApiError e;
    if (end == GenerationEnd::cancelled) {
        e.status = 503;
        e.type = "server_error";
        e.code = "shutting_down";
        e.message = "the request was cancelled: the server is shutting down";
    } else {
        e.status = 500;
        e.type = "server_error";
        e.code = "generation_failed";
        e.message = "generation failed: " + message;
    }
    return e;
}

ChatOutcome ChatRun::outcome() const {
    if (job->end == GenerationEnd::length) return ChatOutcome::length;
    if (acc.has_tool_calls()) return ChatOutcome::tool_calls;
    if (job->stop_index >= 0) return ChatOutcome::stop_sequence;
    return ChatOutcome::end_turn;
}

std::string ChatRun::stop_sequence() const {
    if (job->stop_index < 0 || static_cast<size_t>(job->stop_index) >= stop.size()) return {};
    return stop[static_cast<size_t>(job->stop_index)];
}

std::string GenerationRoutes::id_hex(uint64_t x) const { return hex(ctx_.id_nonce) + hex(x); }

struct GenerationRoutes::TextState {
    std::shared_ptr<Job> job;
    bool logprobs = false;
    bool include_usage = false;
    std::string text;              // everything sent so far (echoed prompt included)
    std::string echo;              // prompt text to send first (streaming)
    bool echo_pending = false;     // the echo chunk has not gone out yet
    int64_t prompt_pending = 0;    // echo with logprobs: prompt tokens whose scores are still to come
    int64_t prompt_offset = 0;     // text offset of the next scored prompt token
    CompletionLogprobs lp;         // not yet sent (streaming) / all (blocking)
};

ApiResult<std::shared_ptr<Job>> GenerationRoutes::start(std::vector<int32_t> prompt,
                                                                            const GenerationParams& gen,
                                                                            int64_t max_tokens, const char* id_prefix,
                                                                            GrammarConstraint constraint,
                                                                            bool score_prompt) {
    GenerationRequest g;
    g.constraint = std::move(constraint);
    g.prompt = std::move(prompt);
    g.sampling = gen.sampling;
    // Without a seed every request draws its own; with one the same request gives the same text.
    if (!gen.seed_given) g.sampling.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    g.max_tokens = max_tokens;
    g.stop = gen.stop;
    g.logprobs = gen.logprobs;
    g.top_logprobs = gen.top_logprobs;
    g.prompt_logprobs = score_prompt;
    if (Status s = validate_sampling_params(g.sampling); !s.ok()) return bad_request(s.error(), {}, "invalid_value");

    ApiError unavailable;
    unavailable.status = 503;
    unavailable.type = "server_error";
    unavailable.code = "shutting_down";
    unavailable.message = "the server is shutting down";
    if (ctx_.registry->closed()) return unavailable;

    auto job = std::make_shared<Job>();
    job->channel = std::make_shared<EventChannel>();
    // The callback owns the channel, so a handler that has already returned (client gone) is never touched.
    auto id = ctx_.engine->submit(std::move(g), [ch = job->channel](const TokenEvent& ev) { ch->push(ev); });
    if (!id.ok()) {
        const EngineStats st = ctx_.engine->stats();
        if (st.queue_depth >= ctx_.engine->options().max_queue) {
            ApiError e;
            e.status = 429;
            e.type = "rate_limit_error";
            e.code = "queue_full";
            e.message = "the server is busy (" + std::to_string(st.queue_depth) +
                        " requests waiting); retry later";
            return e;
        }
        return bad_request(id.error());
    }
    job->id = *id;
    if (!ctx_.registry->add(job->id)) {
        ctx_.engine->cancel(job->id);
        return unavailable;
    }
    job->meta.id = std::string(id_prefix) + hex(ctx_.id_nonce) + hex(job->id);
    job->meta.model = ctx_.model_ids.front();  // the true id, whichever alias the request named
    job->meta.created = static_cast<int64_t>(std::time(nullptr));
    return job;
}

ApiResult<bool> GenerationRoutes::check_model(const GenerationParams& gen) const {
    const auto& ids = ctx_.model_ids;
    if (gen.model.empty() || std::find(ids.begin(), ids.end(), gen.model) != ids.end()) return true;
    return model_not_found(gen.model, ids);
}

template <class Apply>
bool GenerationRoutes::collect(Job& job, Apply apply) {
    const Exchange* ex = current_exchange();
    bool cancelled = false;
    std::vector<TokenEvent> events;
    while (!job.finished) {
        if (job.channel->wait(events, kPollInterval)) {
            for (const TokenEvent& ev : events) apply(ev);
        }
        if (!cancelled && !job.finished && ex && ex->client_gone()) {
            // Nobody will read the answer: free the slot now instead of generating to the end.
            ctx_.engine->cancel(job.id);
            ctx_.counters->count_disconnect();
            cancelled = true;
        }
    }
    ctx_.registry->remove(job.id);
    return !cancelled;
}

// 499 is the convention for "client closed the request".
ApiError client_gone_error() {
    ApiError e;
    e.status = 499;
    e.code = "client_closed_request";
    e.message = "the client closed the connection; the request was cancelled";
    return e;
}

void GenerationRoutes::end_stream(Job& job) {
    if (!job.finished) {
        // The client went away (or the server is stopping) before the end: free the slot now.
        ctx_.engine->cancel(job.id);
        ctx_.counters->count_disconnect();
    }
    ctx_.registry->remove(job.id);
    ctx_.counters->stream_ended();
}

// ---- the shared chat path ---------------------------------------------------------------------------------

namespace {

void finish_job(Job& job, const TokenEvent& ev) {
    job.finished = true;
    job.end = ev.reason;
    job.error = ev.error;
    job.usage = {ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens};
    job.stop_index = ev.stop_index;
    note_usage(ev);
}

}  // namespace

ChatDelta GenerationRoutes::apply(ChatRun& run, const TokenEvent& ev) {
    // The EOS token ends the turn; it is not part of the answer, so it gets no logprob entry either.
    if (run.logprobs && ev.token >= 0 && ev.token != tok().eos()) {
        run.pending_logprobs.push_back(chat_logprob_entry(tok(), to_logprobs(ev)));
    }
    ChatDelta d = run.acc.push(ev.text);
    if (ev.finished) {
        Job& job = *run.job;
        finish_job(job, ev);
        append(d, run.acc.finish());
        if (!run.acc.error().empty() && ev.reason != GenerationEnd::cancelled) {
            ctx_.counters->count_parse_error();
            std::fprintf(stderr, "dsv4 serve: %s: output withheld from the markup on: %s\n", job.meta.id.c_str(),
                         run.acc.error().c_str());
        }
    }
    return d;
}

ApiResult<std::vector<int32_t>> GenerationRoutes::chat_prompt(const ChatRequest& r) const {
    auto prompt = render_chat_prompt(r);
    if (!prompt.ok()) return prompt.error();
    // The rendered prompt spells its special tokens (BOS, turn markers) as text: parse them as tokens.
    return tok().encode(*prompt, /*parse_special=*/true);
}

ApiResult<std::shared_ptr<ChatRun>> GenerationRoutes::start_chat(const ChatRequest& r, const char* id_prefix,
                                                               const std::string& prompt_param) {
    if (auto m = check_model(r.gen); !m.ok()) return m.error();
    auto ids = chat_prompt(r);
    if (!ids.ok()) return ids.error();
    auto max_tokens = fit_context((int64_t)ids->size(), r.gen.max_tokens, ctx_.engine->options().n_ctx, prompt_param,
                                  ctx_.default_max_tokens);
    if (!max_tokens.ok()) return max_tokens.error();
    const int64_t n_prompt = static_cast<int64_t>(ids->size());
    GrammarConstraint constraint;
    if (r.output.grammar && ctx_.grammars) {
        auto tg = ctx_.grammars->get(r.output.key, [&]() -> Result<Grammar> { return *r.output.grammar; });
        if (!tg.ok()) return bad_request(tg.error(), {}, "unsupported_schema");
        constraint = GrammarConstraint{*tg, r.output.trigger, r.output.trigger_required, r.output.prefix};
        // The engine keeps a constrained answer within max_tokens only when its shortest form fits.
        if (const int64_t need = constraint_min_tokens(constraint, /*end_token=*/true); *max_tokens < need) {
            return bad_request("max_tokens is " + std::to_string(*max_tokens) + ", but the shortest answer the " +
                                   (r.output.key.rfind("tools", 0) == 0 ? "forced tool call" : "response format") +
                                   " allows needs at least " + std::to_string(need) + " tokens; raise max_tokens to " +
                                   std::to_string(need) + " or more",
                               "max_tokens", "invalid_value");
        }
    }
    auto job = start(std::move(*ids), r.gen, *max_tokens, id_prefix, std::move(constraint));
    if (!job.ok()) return job.error();
    auto run = std::make_shared<ChatRun>(ChatRun{
        *job, ChatAccumulator(r.chat.thinking_mode, r.forced_prefix, "call_" + hex(ctx_.id_nonce ^ (*job)->id)),
        r.gen.stop, n_prompt, r.gen.logprobs});
    return run;
}

bool GenerationRoutes::collect_chat(ChatRun& run) {
    return collect(*run.job, [&](const TokenEvent& ev) { (void)apply(run, ev); });
}

void GenerationRoutes::stream_chat(httplib::Response& res, std::shared_ptr<ChatRun> run,
                                   std::shared_ptr<ChatStreamWriter> writer) {
    ctx_.counters->stream_started();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, run, writer](size_t, httplib::DataSink& sink) { return pump_chat(*run, *writer, sink); },
        [this, run](bool) { end_stream(*run->job); });
}

bool GenerationRoutes::pump_chat(ChatRun& run, ChatStreamWriter& writer, httplib::DataSink& sink) {
    Job& job = *run.job;
    std::string out;
    if (!run.opened) {
        // Sent at once so the client sees the stream open before the prompt is processed.
        out += writer.open(run);
        run.opened = true;
    }
    std::vector<TokenEvent> events;
    if (!job.channel->wait(events, kPollInterval)) {
        if (!out.empty()) return sink.write(out.data(), out.size());
        return sink.is_writable();  // nothing to send: is anyone still listening?
    }
    ChatDelta d;
    for (const TokenEvent& ev : events) append(d, apply(run, ev));
    out += writer.delta(run, d);
    if (job.finished) out += run.failed() ? writer.fail(run, end_error(job.end, job.error)) : writer.close(run);
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    if (job.finished) sink.done();
    return true;
}

// ---- chat completions ------------------------------------------------------------------------------------

namespace {

std::string chat_finish_reason(const ChatRun& run) {
    return finish_reason(run.job->end, run.acc.has_tool_calls());
}

// chat.completion.chunk events.
class OpenAiChatWriter : public ChatStreamWriter {
public:
    explicit OpenAiChatWriter(bool include_usage) : include_usage_(include_usage) {}

    std::string open(ChatRun& run) override {
        return sse_data(chat_chunk(run.job->meta, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr,
                                   include_usage_));
    }
    std::string delta(ChatRun& run, const ChatDelta& d) override {
        const ResponseMeta& meta = run.job->meta;
        std::vector<json> chunks = chat_delta_chunks(meta, d, include_usage_);
        if (!run.pending_logprobs.empty()) {
            // Logprobs ride on the chunk with the text they produced; held-back text still gets its entries now.
            if (chunks.empty()) chunks.push_back(chat_chunk(meta, json::object(), nullptr, nullptr, include_usage_));
            chunks.back()["choices"][0]["logprobs"] = json{{"content", std::move(run.pending_logprobs)}};
            run.pending_logprobs = json::array();
        }
        std::string out;
        for (const json& c : chunks) out += sse_data(c);
        return out;
    }
    std::string close(ChatRun& run) override {
        std::string out =
            sse_data(chat_chunk(run.job->meta, json::object(), chat_finish_reason(run), nullptr, include_usage_));
        if (include_usage_) out += sse_data(chat_usage_chunk(run.job->meta, run.job->usage));
        return out + std::string(kSseDone);
    }
    std::string fail(ChatRun&, const ApiError& error) override {
        return sse_data(error_json(error)) + std::string(kSseDone);
    }

private:
    bool include_usage_;
};

}  // namespace

void GenerationRoutes::chat(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body.ok()) return send_error(res, body.error());
    auto r = parse_chat_request(*body, ctx_.limits);
    if (!r.ok()) return send_error(res, r.error());
    auto run = start_chat(*r, "chatcmpl-", "messages");
    if (!run.ok()) return send_error(res, run.error());

    if (r->gen.stream) return stream_chat(res, *run, std::make_shared<OpenAiChatWriter>(r->gen.include_usage));
    ChatRun& c = **run;
    if (!collect_chat(c)) return send_error(res, client_gone_error());
    if (c.failed()) return send_error(res, end_error(c.job->end, c.job->error));
    send_json(res, 200,
              chat_completion_json(c.job->meta, c.acc.message(), c.acc.call_ids(), chat_finish_reason(c),
                                   c.job->usage, c.logprobs ? c.pending_logprobs : json(nullptr)));
}

// ---- text completions ------------------------------------------------------------------------------------

std::string GenerationRoutes::apply(TextState& st, const TokenEvent& ev) {
    if (ev.prompt) {
        // A scored prompt token (echo with logprobs); its text is already in the echo.
        st.lp.add(tok(), to_logprobs(ev), st.prompt_offset);
        st.prompt_offset += static_cast<int64_t>(tok().token_text(ev.token).size());
        --st.prompt_pending;
        return {};
    }
    if (st.logprobs && ev.token >= 0 && ev.token != tok().eos()) {
        st.lp.add(tok(), to_logprobs(ev), static_cast<int64_t>(st.text.size()));
    }
    st.text += ev.text;
    if (ev.finished) finish_job(*st.job, ev);
    return ev.text;
}

void GenerationRoutes::completions(const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (!body.ok()) return send_error(res, body.error());
    auto r = parse_completion_request(*body, ctx_.limits);
    if (!r.ok()) return send_error(res, r.error());
    if (auto m = check_model(r->gen); !m.ok()) return send_error(res, m.error());

    std::vector<int32_t> ids;
    std::string prompt_text;
    bool bos_added = false;  // the BOS is not in the prompt's text
    if (r->prompt_is_tokens) {
        ids = r->prompt_tokens;
        if (r->echo) prompt_text = tok().decode(ids);
    } else {
        // BOS as the model expects it, unless the prompt already spells it out.
        if (tok().add_bos()) ids.push_back(tok().bos());
        tok().encode(r->prompt_text, /*parse_special=*/true, ids);
        if (ids.size() >= 2 && tok().add_bos() && ids[1] == tok().bos()) ids.erase(ids.begin());
        else bos_added = tok().add_bos();
        prompt_text = r->prompt_text;
    }
    if (ids.empty()) return send_error(res, bad_request("'prompt' is empty", "prompt", "invalid_value"));
    auto max_tokens = fit_context((int64_t)ids.size(), r->gen.max_tokens, ctx_.engine->options().n_ctx, "prompt",
                                   ctx_.default_max_tokens);
    if (!max_tokens.ok()) return send_error(res, max_tokens.error());
    // Echo with logprobs scores the prompt: the first token gets null (nothing predicts it), the others
    // their logprobs from the prefill's logits.
    const bool score_prompt = r->echo && r->gen.logprobs;
    const int32_t first = ids.front();
    const int64_t n_prompt = static_cast<int64_t>(ids.size());
    auto job = start(std::move(ids), r->gen, *max_tokens, "cmpl-", {}, score_prompt);
    if (!job.ok()) return send_error(res, job.error());

    auto st = std::make_shared<TextState>();
    st->job = *job;
    st->logprobs = r->gen.logprobs;
    st->include_usage = r->gen.include_usage;
    if (r->echo) {
        st->echo = prompt_text;
        st->echo_pending = true;
    }
    st->text = st->echo;
    if (score_prompt) {
        st->lp.add_unscored(tok(), first, 0);
        st->prompt_offset = bos_added ? 0 : static_cast<int64_t>(tok().token_text(first).size());
        st->prompt_pending = n_prompt - 1;
    }

    if (!r->gen.stream) {
        if (!collect(*st->job, [&](const TokenEvent& ev) { (void)apply(*st, ev); })) return send_error(res, client_gone_error());
        const Job& j = *st->job;
        if (j.end == GenerationEnd::cancelled || j.end == GenerationEnd::error) {
            return send_error(res, end_error(j.end, j.error));
        }
        send_json(res, 200,
                  completion_json(j.meta, st->text, finish_reason(j.end, false), j.usage,
                                  st->logprobs ? st->lp.to_json() : json(nullptr)));
        return;
    }

    ctx_.counters->stream_started();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return pump_text(*st, sink); },
        [this, st](bool) { end_stream(*st->job); });
}

// The echoed prompt's chunk, with the prompt's logprobs when they were asked for.
std::string GenerationRoutes::echo_chunk(TextState& st) {
    st.echo_pending = false;
    const json lp = st.logprobs && !st.lp.empty() ? st.lp.to_json() : json(nullptr);
    st.lp.clear();
    return sse_data(completion_chunk(st.job->meta, st.echo, nullptr, lp, st.include_usage));
}

bool GenerationRoutes::pump_text(TextState& st, httplib::DataSink& sink) {
    Job& job = *st.job;
    std::string out;
    // The echo goes first: at once, or with logprobs once the prefill has scored the whole prompt.
    if (st.echo_pending && st.prompt_pending == 0) out += echo_chunk(st);
    std::vector<TokenEvent> events;
    if (!job.channel->wait(events, kPollInterval)) {
        if (!out.empty()) return sink.write(out.data(), out.size());
        return sink.is_writable();
    }
    std::string text;
    for (const TokenEvent& ev : events) {
        text += apply(st, ev);
        if (st.echo_pending && st.prompt_pending == 0) out += echo_chunk(st);
    }
    if (!st.echo_pending && (!text.empty() || !st.lp.empty())) {  // prompt scores wait for the echo
        out += sse_data(completion_chunk(job.meta, text, nullptr, st.logprobs ? st.lp.to_json() : json(nullptr),
                                         st.include_usage));
        st.lp.clear();
    }
    if (job.finished) {
        if (job.end == GenerationEnd::cancelled || job.end == GenerationEnd::error) {
            out += sse_data(error_json(end_error(job.end, job.error)));
        } else {
            out += sse_data(completion_chunk(job.meta, "", finish_reason(job.end, false), nullptr, st.include_usage));
            if (st.include_usage) out += sse_data(completion_usage_chunk(job.meta, job.usage));
        }
        out += kSseDone;
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    if (job.finished) sink.done();
    return true;
}

}  // namespace dsv4::server
