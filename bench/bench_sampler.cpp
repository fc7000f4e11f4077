// Host sampler cost per token over a DeepSeek-V4-sized vocabulary (129,280 logits), in microseconds of this
// thread's CPU time per Sampler::sample call (so a busy machine does not skew it; wall clock beside it), for
// the modes a user meets: greedy, temperature 1.0 over the full vocabulary, the CLI default (0.6, top-p 0.95),
// top-k 40, min-p 0.05, and the default with 5 top logprobs. Two logit shapes: flat (a random-weight model:
// N(0, 1), the nucleus spans most of the vocabulary) and peaked (a trained model: N(0, 2) plus a few clear
// favourites). The target is <= 50 us per token in every row.
//   usage: bench_sampler [MIN_SECONDS_PER_ROW]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kVocab = 129280;
constexpr int kShapes = 8;  // distinct logit vectors per shape, cycled so the draw is not one fixed path

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<std::vector<float>> make_logits(bool peaked) {
    std::vector<std::vector<float>> out;
    for (int s = 0; s < kShapes; ++s) {
        std::mt19937_64 rng(1000 + static_cast<uint64_t>(s) + (peaked ? 100 : 0));
        std::normal_distribution<float> nd(0.0f, peaked ? 2.0f : 1.0f);
        std::vector<float> v(kVocab);
        for (float& x : v) x = nd(rng);
        if (peaked)
            for (int k = 0; k < 5; ++k) v[rng() % kVocab] += 14.0f - 2.0f * static_cast<float>(k);
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    const double min_s = argc > 1 ? std::atof(argv[1]) : 0.5;
    struct Mode {
        const char* name;
        dsv4::SamplingParams p;
    };
    auto mode = [](float t, int32_t k, float top_p, float min_p, int32_t lp) {
        dsv4::SamplingParams p;
        p.temperature = t;
        p.top_k = k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.top_logprobs = lp;
        p.seed = 7;
        return p;
    };
    const std::vector<Mode> modes = {
        {"greedy", mode(0.0f, 0, 1.0f, 0.0f, 0)},
        {"temp 1.0 full vocab", mode(1.0f, 0, 1.0f, 0.0f, 0)},
        {"temp 0.6 top-p 0.95", mode(0.6f, 0, 0.95f, 0.0f, 0)},
        {"top-k 40", mode(1.0f, 40, 1.0f, 0.0f, 0)},
        {"min-p 0.05", mode(1.0f, 0, 1.0f, 0.05f, 0)},
        {"0.6/0.95 + top_logprobs 5", mode(0.6f, 0, 0.95f, 0.0f, 5)},
    };
    std::printf("sampler: %zu logits, us per token (thread CPU time; wall clock in parentheses)\n", kVocab);
    std::printf("%-28s %18s %18s\n", "mode", "flat", "peaked");
    const auto flat = make_logits(false), peaked = make_logits(true);
    for (const Mode& m : modes) {
        std::printf("%-28s", m.name);
        for (const auto* set : {&flat, &peaked}) {
            dsv4::Sampler sampler(m.p);
            const auto w0 = Clock::now();
            const double c0 = thread_cpu_seconds();
            long n = 0;
            int64_t checksum = 0;
            double s = 0;
            do {
                auto r = sampler.sample((*set)[static_cast<size_t>(n % kShapes)], {});
                if (!r.ok()) {
                    std::fprintf(stderr, "bench_sampler: %s\n", r.error().c_str());
                    return 1;
                }
                checksum += r->token;
                ++n;
                s = thread_cpu_seconds() - c0;
            } while (s < min_s);
            const double wall = std::chrono::duration<double>(Clock::now() - w0).count();
            std::printf(" %8.1f (%7.1f)", s / static_cast<double>(n) * 1e6, wall / static_cast<double>(n) * 1e6);
            if (checksum < 0) std::printf("?");  // keeps the draws observable
        }
        std::printf("\n");
    }
    return 0;
}
