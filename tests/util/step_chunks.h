// Feeding a token sequence through a cache in chunks of given sizes (cycled), collecting every row's logits:
// how the model tests compare chunkings, stores and batchings.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/step_runner.h"
#include "model/kv_cache.h"

namespace dsv4::test {

// Steps `toks` into `cache` in chunks of `chunks[0]`, `chunks[1]`, ... (cycled); returns the logits of every
// token (opt.all_logits should be set). A failed step fails the calling test.
std::vector<float> step_in_chunks(StepRunner& runner, KvCache& cache, const std::vector<int32_t>& toks,
                                  const std::vector<int64_t>& chunks, const StepOptions& opt);

}  // namespace dsv4::test
