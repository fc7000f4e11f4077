#include "util/step_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>

namespace dsv4::test {

std::vector<float> step_in_chunks(StepRunner& runner, KvCache& cache, const std::vector<int32_t>& toks,
                                  const std::vector<int64_t>& chunks, const StepOptions& opt) {
    std::vector<float> out, l;
    size_t ci = 0;
    for (int64_t b = 0; b < (int64_t)toks.size();) {
        const int64_t e = std::min<int64_t>((int64_t)toks.size(), b + chunks[ci++ % chunks.size()]);
        Status s = runner.step(cache, std::span<const int32_t>(toks.data() + b, e - b), opt, &l);
        EXPECT_TRUE(s.ok()) << s.error();
        out.insert(out.end(), l.begin(), l.end());
        b = e;
    }
    return out;
}

}  // namespace dsv4::test
