#include "core/thread_pool.h"

#include <algorithm>

namespace dsv4 {

int ThreadPool::default_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : (int)n;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        while (next_chunk_ < n_chunks_) {
            int c = next_chunk_++;
            lk.unlock();
            int64_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
            (*job_)(b, e, index);
            lk.lock();
            if (--pending_ == 0) cv_done_.notify_all();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    int64_t max_chunks = (n + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(max_chunks, (int64_t)n_threads_ * 4);
    if (n_threads_ == 1 || chunks <= 1) {
        fn(0, n, 0);
        return;
    }
    std::unique_lock<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = (n + chunks - 1) / chunks;
    n_chunks_ = (int)((n + job_chunk_ - 1) / job_chunk_);
    next_chunk_ = 0;
    pending_ = n_chunks_;
    ++generation_;
    cv_start_.notify_all();
    while (next_chunk_ < n_chunks_) {
        int c = next_chunk_++;
        lk.unlock();
        int64_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
        fn(b, e, 0);
        lk.lock();
        --pending_;
    }
    cv_done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
}

}  // namespace dsv4
