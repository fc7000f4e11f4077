// The engine's speculative decoding (runtime/speculative.h): a sequence's decode step feeds its last token
// and the MTP block's drafts, every row's token is drawn as plain decoding draws it (on the device where the
// request's draws run there: only ids cross to the host), the drafts are kept while the draws equal them, the
// cache rolls back past the rest, and the MTP block runs over the rows that became final to draft the next
// step (its most likely token, drawn on the device too).
#include <algorithm>

#include "runtime/device_draw.h"
#include "runtime/engine.h"
#include "runtime/engine_sequence.h"
#include "runtime/speculative.h"

namespace dsv4 {

int Engine::max_drafts(const Sequence& s) const {
    // The next verify step feeds tokens.back() and the drafts from position tokens.size() - 1; it must fit
    // the context, and drafting past max_tokens is wasted work.
    const int64_t at = (int64_t)s.tokens.size() - 1;
    int64_t m = std::min<int64_t>(opt_.speculative, opt_.n_ctx - at - 1);
    if (s.req.max_tokens > 0) m = std::min<int64_t>(m, s.req.max_tokens - (int64_t)s.generated.size() - 1);
    return (int)std::max<int64_t>(0, m);
}

Status Engine::prepare_verify(Sequence& s, Model::BatchItem& item, std::vector<DrawRequest>& draws,
                              std::vector<SampleOut>& drawn) {
    s.feed.assign(1, s.tokens.back());
    s.feed.insert(s.feed.end(), s.drafts.begin(), s.drafts.end());
    const int64_t n = (int64_t)s.feed.size();
    item.tokens = s.feed;
    item.hidden_device = spec_hidden_[s.slot];
    item.hidden_from = 0;
    if (n > 1) DSV4_TRY(s.cache->save_for_rollback(n));
    if (draws_on_backend(s)) {
        // Row j's token is drawn with the history it has if drafts 1..j are accepted (and, sampled, its own
        // uniform from the request's RNG).
        std::vector<int32_t> history = s.generated;
        draws.clear();
        for (int64_t j = 0; j < n; ++j) {
            auto req = make_draw_request(*s.sampler, history, model_.config().n_vocab);
            if (!req.ok()) break;  // the host path below reports it
            draws.push_back(std::move(*req));
            if (j + 1 < n) history.push_back(s.drafts[j]);
        }
        if ((int64_t)draws.size() == n) {
            drawn.assign(n, SampleOut{});
            item.draw = draws.data();
            item.drawn = drawn.data();
            item.n_draws = (int)n;
            item.logits = nullptr;
            return {};
        }
    }
    item.logits = &s.logits;
    item.all_logits = true;
    return {};
}

void Engine::finish_verify(Sequence& s, const Model::BatchItem& item, std::span<const SampleOut> drawn,
                           bool draft_next) {
    const int64_t n = (int64_t)item.tokens.size();
    const int64_t p0 = s.n_fed;
    const size_t V = (size_t)model_.config().n_vocab;
    int64_t emitted = 0, accepted = 0;
    bool alive = true;
    for (int64_t j = 0; j < n && alive; ++j) {
        // The row's token as plain decoding draws it (s.generated holds the drafts accepted so far).
        Result<SampleResult> r = item.draw ? draw_result(drawn[j])
                                           : s.sampler->sample(std::span<const float>(s.logits.data() + j * V, V), s.generated);
        const bool agrees = r.ok() && j + 1 < n && r->token == s.drafts[j];
        alive = emit_token(s, std::move(r));
        ++emitted;
        if (!agrees) break;
        ++accepted;
    }
    if (n > 1) {
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.spec_steps;
        stats_.draft_tokens += n - 1;
        stats_.accepted_tokens += accepted;
    }
    if (!alive) return;  // finished: the cache goes back to the pool as it is
    if (n > 1) {
        if (Status st = s.cache->rollback(n - emitted); !st.ok()) {
            finish(s, GenerationEnd::error, st.error());
            return;
        }
    }
    s.n_fed = p0 + emitted;
    if (!draft_next) {
        s.drafts.clear();
    } else if (Status st = run_mtp(s, p0, emitted, true); !st.ok()) {
        finish(s, GenerationEnd::error, st.error());
        return;
    }
    if (prefix_ && s.n_fed % opt_.prefix_block == 0) take_block_snapshot(s);
}

Result<int32_t> Engine::draft_token(Sequence& s, const SampleOut* drawn, std::span<const float> logits, int64_t index) {
    int32_t d = -1;
    if (drawn) {
        DSV4_ASSIGN_OR_RETURN(SampleResult r, draw_result(*drawn));
        d = r.token;
    } else {
        const size_t V = (size_t)model_.config().n_vocab;
        Sampler argmax(SamplingParams{.temperature = 0});
        DSV4_ASSIGN_OR_RETURN(SampleResult r, argmax.sample(logits.subspan(logits.size() - V), {}));
        d = r.token;
    }
    if (opt_.draft_override) {
        const int32_t o = opt_.draft_override(s.id, index, d);
        if (o < 0 || o >= (int32_t)model_.config().n_vocab)
            return make_error("draft_override returned token " + std::to_string(o));
        d = o;
    }
    return d;
}

Status Engine::run_mtp(Sequence& s, int64_t p0, int64_t rows, bool propose) {
    KvCache& cache = *s.cache;
    cache.set_mtp_pos(p0);
    s.drafts.clear();
    const int m = propose ? max_drafts(s) : 0;
    // The drafts are greedy, so the request's own sampling does not decide where they are drawn.
    const bool device = backend_draws();
    const DrawRequest req;  // temperature 0, no adjustments (ops/sample_args.h)
    StepOptions opt;
    opt.quant_sim = opt_.quant_sim;
    const int64_t stream = (int64_t)model_.config().hc * model_.config().n_embd;
    float* chain_in = spec_chain_[s.slot];
    float* chain_out = chain_in + stream;
    // One MTP step: hidden rows and their next tokens in; the draft after the last row out (when drafting).
    auto mtp = [&](const float* hidden, std::span<const int32_t> next, bool draft, bool chain) -> Status {
        Model::MtpItem item;
        item.cache = &cache;
        item.hidden = hidden;
        item.next_tokens = next;
        SampleOut out;
        std::vector<float> logits;
        if (draft) {
            if (device) {
                item.draw = &req;
                item.drawn = &out;
            } else {
                item.logits = &logits;
            }
            if (chain) item.hidden_out = chain_out;
        }
        DSV4_TRY(runner_.mtp_step(item, opt));
        if (!draft) return {};
        DSV4_ASSIGN_OR_RETURN(int32_t d, draft_token(s, device ? &out : nullptr, logits,
                                                     (int64_t)s.tokens.size() + (int64_t)s.drafts.size()));
        s.drafts.push_back(d);
        return {};
    };
    DSV4_TRY(mtp(spec_hidden_[s.slot], std::span<const int32_t>(s.tokens.data() + p0 + 1, rows), m > 0, m > 1));
    if (m > 1) {
        // Further drafts: the block on its own output streams and its own last draft. Those steps run at
        // positions the next verify step will fill for real, so they are undone right after.
        DSV4_TRY(cache.save_for_rollback(m - 1, true));
        for (int j = 1; j < m; ++j) {
            std::swap(chain_in, chain_out);
            DSV4_TRY(mtp(chain_in, std::span<const int32_t>(&s.drafts[j - 1], 1), true, j + 1 < m));
        }
        DSV4_TRY(cache.rollback(m - 1, true));
    }
    return {};
}

}  // namespace dsv4
