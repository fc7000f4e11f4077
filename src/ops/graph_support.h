// What a backend offers for replaying recorded steps (exec/step_graphs.h records them): the part of step
// graphs a backend implements, so kernels/ depends on ops/ only and never on the execution machinery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace dsv4 {

class GraphSupport {
public:
    virtual ~GraphSupport() = default;
    // Host memory the device reads when a replay runs: recorded uploads copy from here.
    virtual void* alloc_staging(size_t bytes) = 0;
    virtual void free_staging(void* p) = 0;
    // Capture what `issue` sends to the backend as a replayable unit without running it; null when the
    // backend cannot (the ops then did not run).
    virtual void* capture(const std::function<void()>& issue) = 0;
    virtual void launch(void* graph) = 0;
    virtual void destroy(void* graph) = 0;  // only when no launch of it is in flight
    // How often the backend has waited for the device (download, synchronize) so far. A step whose ops change
    // it while they run (they read device data to plan their launches) is never captured.
    virtual int64_t host_waits() const { return 0; }
};

// A GraphSupport for host backends: a "graph" is the recorded op list itself, replayed call by call. It
// checks the recording machinery on the CPU: a replay runs the first recording's ops, not the current ones.
class StoredOpsSupport final : public GraphSupport {
public:
    void* alloc_staging(size_t bytes) override;
    void free_staging(void* p) override;
    void* capture(const std::function<void()>& issue) override;
    void launch(void* graph) override;
    void destroy(void* graph) override;
};

}  // namespace dsv4
