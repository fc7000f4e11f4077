// The collective operations of a model split over ranks (one backend each, the routed experts divided between
// them: docs/architecture.md, "Several devices"). Every rank issues the same collectives in the same order
// with the same sizes; the backends call them from their all_reduce_sum op, so a step graph replays them with
// the other ops. Implementations: in-process threads sharing host memory (exec/thread_collective.h, the CPU
// test of the sharding); NCCL for GPUs (not built yet).
#pragma once

#include <cstdint>

namespace dsv4 {

class Collective {
public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // x [n floats, this rank's backend memory] becomes the sum over the ranks' x, added in rank order
    // (((x_0 + x_1) + x_2) ...), the same bits on every rank.
    virtual void all_reduce_sum(float* x, int64_t n) = 0;
};

}  // namespace dsv4
