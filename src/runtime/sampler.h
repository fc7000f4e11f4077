// Token selection and stopping for generation. Sampler turns one step's logits (plus the token history the
// penalties look at) into a token id, its logprob and optionally the top-N alternatives; StopChecker decides
// from the generated text when to stop (stop strings, max tokens) and how much text is final. Everything is
// deterministic for a given seed on every platform: the RNG is mt19937_64 (fully specified by the standard),
// floats come from its bits, weights from a fixed polynomial rather than libm, and the kept set and draw order
// never depend on the standard library (no sort of the vocabulary at all: see runtime/sampler_select.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

namespace sampling {
struct Scan;
}

struct SamplingParams {
    float temperature = 1.0f;         // 0 = greedy (argmax after bias and penalties)
    int32_t top_k = 0;                // keep the k most likely tokens; 0 = off
    float top_p = 1.0f;               // keep the smallest most-likely set with probability >= top_p; 1 = off
    float min_p = 0.0f;               // keep tokens with p >= min_p * p_max; 0 = off
    float repetition_penalty = 1.0f;  // HF / llama.cpp / vLLM: logit / r if positive, logit * r if not; 1 = off
    float presence_penalty = 0.0f;    // OpenAI: logit -= presence_penalty once per token seen
    float frequency_penalty = 0.0f;   // OpenAI: logit -= frequency_penalty * times seen
    std::map<int32_t, float> logit_bias;  // OpenAI: added to the logit; -inf bans a token
    uint64_t seed = 0;
    int32_t top_logprobs = 0;  // how many alternatives to report per step (OpenAI allows up to 20)
};

// Rejects values no sampler can honour (negative temperature, top_p outside (0, 1], ...), naming the field.
Status validate_sampling_params(const SamplingParams& params);

struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0.0f;
};

struct TokenProb {
    int32_t token = -1;
    double prob = 0.0;
};

struct SampleResult {
    int32_t token = -1;
    // Logprobs are the model's own distribution: log-softmax of the logits as given, before bias, penalties,
    // temperature and truncation (what vLLM reports by default and what an OpenAI client expects).
    float logprob = 0.0f;
    std::vector<TokenLogprob> top_logprobs;  // most likely first, ties by token id
};

// A token that is scored, not sampled (an echoed prompt token, perplexity): its logprob and the top_n most
// likely tokens' under log-softmax of `logits`, computed exactly as Sampler::sample reports a sampled token's.
// Fails on NaN or +inf logits and on a token outside the row.
Result<SampleResult> score_token(std::span<const float> logits, int32_t token, int32_t top_n);

// The pipeline, in order (llama.cpp's and HF's order): logit bias, then repetition / presence / frequency
// penalties over `history`, in place. Exposed so that tests and tools can see exactly what the sampler sees.
Status apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> history,
                                const SamplingParams& params);

// ... then temperature, top-k, top-p (on the top-k renormalised distribution), min-p: the tokens that can be
// drawn with their probabilities, most likely first when any truncation applied, by token id otherwise.
// `logits` are already biased and penalised. Needs temperature > 0.
Result<std::vector<TokenProb>> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

class Sampler {
public:
    // `params` must pass validate_sampling_params (checked: an invalid one is a caller bug).
    explicit Sampler(const SamplingParams& params);

    // logits: [n_vocab] for one step. history: the tokens the penalties count (the caller chooses: the
    // generated tokens for OpenAI semantics, or prompt + generated). Fails on NaN logits, ids outside the
    // vocabulary, or when every token is banned.
    // allowed: when not empty, a bitmask over the vocabulary (bit i of word i / 64: token i may be drawn; a
    // grammar's token mask, runtime/token_mask.h); the other tokens (and any past the mask's end) are banned
    // after bias and penalties. The draw then works on the allowed tokens only (its cost scales with how many
    // there are, beyond one pass over the mask's words); logprobs stay those of the model's own distribution,
    // which needs the full row's log-sum-exp.
    Result<SampleResult> sample(std::span<const float> logits, std::span<const int32_t> history,
                                std::span<const uint64_t> allowed = {});

    const SamplingParams& params() const { return params_; }
    // [0, 1) from the top 53 bits of one draw of the seeded RNG (a backend draw takes its uniform from here).
    double next_uniform();

private:
    std::optional<SampleResult> dense_mask_draw(std::span<const float> logits, const sampling::Scan& raw,
                                                std::span<const uint64_t> allowed);

    SamplingParams params_;
    std::mt19937_64 rng_;
    std::vector<float> work_;     // biased and penalised logits (only when bias or a penalty applies)
    std::vector<float> weights_;  // the draw's weights, reused across steps
    std::vector<double> blocks_;  // their sums per block of tokens
    std::vector<int32_t> allowed_ids_;   // a mask's allowed tokens, in id order
    std::vector<float> allowed_logits_;  // their (biased and penalised) logits
};

enum class FinishReason { none, stop, length };

struct StopUpdate {
    std::string text;                           // text that is final: send it now
    FinishReason finish = FinishReason::none;   // stop or length: generation ends with this token
    int32_t stop_index = -1;                    // which stop string matched (finish == stop)
};

// Text-level stopping: feed the text of each generated token; a stop string may span token boundaries. Text
// that could be the start of a stop string is held back until decided, as is an incomplete UTF-8 character;
// the stop string itself and anything after it are never emitted (OpenAI semantics). When several stop
// strings match, the one starting first wins.
class StopChecker {
public:
    // max_tokens <= 0: no limit. Empty stop strings are ignored.
    StopChecker(std::vector<std::string> stop_strings, int64_t max_tokens);

    // One generated token's text (may be empty or a partial UTF-8 sequence). Must not be called once finished.
    StopUpdate push(std::string_view token_text);
    // Generation ended for another reason (EOS, cancel): releases everything held back.
    StopUpdate flush();

    bool finished() const { return finished_; }
    int64_t n_tokens() const { return n_tokens_; }
    size_t held_bytes() const { return held_.size(); }

private:
    std::vector<std::string> stops_;
    int64_t max_tokens_;
    int64_t n_tokens_ = 0;
    bool finished_ = false;
    std::string held_;
};

}  // namespace dsv4
