// StoredOpsSupport: replays on a host backend are calls of the stored op list.
#include "ops/graph_support.h"

#include <algorithm>
#include <cstdlib>

#include "core/check.h"

namespace dsv4 {

void* StoredOpsSupport::alloc_staging(size_t bytes) {
    void* p = std::malloc(std::max<size_t>(bytes, 1));
    DSV4_CHECK_MSG(p != nullptr, "out of host memory allocating %zu bytes of step staging", bytes);
    return p;
}

void StoredOpsSupport::free_staging(void* p) { std::free(p); }

void* StoredOpsSupport::capture(const std::function<void()>& issue) { return new std::function<void()>(issue); }

void StoredOpsSupport::launch(void* graph) { (*static_cast<std::function<void()>*>(graph))(); }

void StoredOpsSupport::destroy(void* graph) { delete static_cast<std::function<void()>*>(graph); }

}  // namespace dsv4
