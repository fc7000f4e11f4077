// Engine-to-handler event hand-off and the registry of requests in flight (see event_channel.h).
#include "server/event_channel.h"

namespace dsv4::server {

void EventChannel::push(const TokenEvent& ev) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        events_.push_back(ev);
    }
    cv_.notify_one();
}

bool EventChannel::wait(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
    out.clear();
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
    out.reserve(events_.size());
    for (TokenEvent& ev : events_) out.push_back(std::move(ev));
    events_.clear();
    return true;
}

bool RequestRegistry::add(uint64_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return false;
    ids_.insert(id);
    return true;
}

void RequestRegistry::remove(uint64_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    ids_.erase(id);
}

std::vector<uint64_t> RequestRegistry::close() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    return std::vector<uint64_t>(ids_.begin(), ids_.end());
}

bool RequestRegistry::closed() const {
    std::lock_guard<std::mutex> lk(mu_);
    return closed_;
}

size_t RequestRegistry::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return ids_.size();
}

}  // namespace dsv4::server
