// Collectives between threads of one process (ops/collective.h): the ranks of a model split over several CPU
// backends, each stepped by its own thread. The test of the sharding logic: no GPU, no NCCL, the same model
// code and op order as a GPU split would run.
#pragma once

#include <memory>
#include <vector>

#include "ops/collective.h"

namespace dsv4 {

// n collectives of one group, rank i at index i; each is used by one thread.
std::vector<std::unique_ptr<Collective>> make_thread_collectives(int n);

}  // namespace dsv4
