// Draws on the model's backend (Backend::sample, ops/sample_args.h) for a Sampler's parameters: the request of
// one step (the uniform from the sampler's seeded RNG, logit bias and penalties as sparse adjustments of the
// tokens they touch) and the SampleResult from what the backend returns. The draw follows the same
// distribution as Sampler::sample (truncations and the kept set are defined the same way; the weights are
// integers of 2^-40 resolution rather than floats), but a seed gives another sequence than the host sampler.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "ops/sample_args.h"
#include "runtime/sampler.h"

namespace dsv4 {

// Whether a backend draw can serve these parameters (it reports at most kSampleMaxTop alternatives).
bool backend_draw_serves(const SamplingParams& p);

// One step's request; draws one uniform from `sampler` when the temperature is > 0. Fails (as Sampler::sample
// would) on bias or history tokens outside the vocabulary.
Result<DrawRequest> make_draw_request(Sampler& sampler, std::span<const int32_t> history, int64_t n_vocab);

// The backend's answer as a SampleResult, or the error Sampler::sample would give for that row.
Result<SampleResult> draw_result(const SampleOut& out);

}  // namespace dsv4
