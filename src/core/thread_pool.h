// A fixed pool of worker threads running parallel_for over an index range. The CPU kernels split their
// rows across it; the calling thread takes part, so a pool of n threads has n-1 workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int n_threads() const { return n_threads_; }
    // Run fn(begin, end, thread_index) over [0, n) split into contiguous chunks of at least `grain` items.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

    // Default number of threads: the hardware concurrency (at least 1).
    static int default_threads();

private:
    void worker(int index);
    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
    int64_t job_n_ = 0, job_chunk_ = 0;
    int n_chunks_ = 0, next_chunk_ = 0, pending_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

}  // namespace dsv4
