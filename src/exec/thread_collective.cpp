#include "exec/thread_collective.h"

#include <barrier>

#include "core/check.h"

namespace dsv4 {

namespace {

// What the ranks share: a barrier and, per rank, the buffer and size of the collective in progress.
struct Group {
    explicit Group(int n) : sync(n), buffers((size_t)n), sizes((size_t)n) {}
    std::barrier<> sync;
    std::vector<float*> buffers;
    std::vector<int64_t> sizes;
};

class ThreadCollective final : public Collective {
public:
    ThreadCollective(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return (int)g_->buffers.size(); }

    void all_reduce_sum(float* x, int64_t n) override {
        Group& g = *g_;
        g.buffers[rank_] = x;
        g.sizes[rank_] = n;
        g.sync.arrive_and_wait();  // every rank's buffer is published
        for (int r = 0; r < size(); ++r)
            DSV4_CHECK_MSG(g.sizes[r] == n, "all_reduce_sum: rank %d sums %lld floats, rank %d %lld", rank_,
                           (long long)n, r, (long long)g.sizes[r]);
        sum_.resize((size_t)n);
        for (int64_t i = 0; i < n; ++i) {
            float s = g.buffers[0][i];
            for (int r = 1; r < size(); ++r) s += g.buffers[r][i];
            sum_[i] = s;
        }
        g.sync.arrive_and_wait();  // every rank has read every buffer: each may now overwrite its own
        std::copy(sum_.begin(), sum_.end(), x);
    }

private:
    std::shared_ptr<Group> g_;
    int rank_;
    std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_thread_collectives(int n) {
    DSV4_CHECK(n >= 1);
    auto g = std::make_shared<Group>(n);
    std::vector<std::unique_ptr<Collective>> out;
    for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCollective>(g, r));
    return out;
}

}  // namespace dsv4
