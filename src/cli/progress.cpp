#include "cli/progress.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace dsv4::cli {

void ProgressLine::update(uint64_t done, uint64_t total) {
    done_ = done;
    total_ = total;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    draw();
}

void ProgressLine::draw() {
    if (!enabled_) return;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = secs > 0 ? (double)done_ / secs : 0;
    const double eta = rate > 0 ? (double)(total_ - done_) / rate : 0;
    std::fprintf(stderr, "\r%s: %.1f / %.1f MB (%3.0f%%)  %.1f MB/s  ETA %.0f s   ", label_.c_str(), done_ / 1e6,
                 total_ / 1e6, total_ ? 100.0 * (double)done_ / (double)total_ : 100.0, rate / 1e6, eta);
    std::fflush(stderr);
    drawn_ = true;
}

void ProgressLine::finish() {
    if (!enabled_) return;
    draw();
    std::fprintf(stderr, "\n");
}

namespace {

// Signal handlers take no context: the temporary names live here, written once before the handlers are
// installed and only read by them (unlink and _exit are async-signal-safe).
char g_temp_a[4096];
char g_temp_b[4096];

void on_signal(int sig) {
    if (g_temp_a[0]) unlink(g_temp_a);
    if (g_temp_b[0]) unlink(g_temp_b);
    _exit(128 + sig);
}

void copy_temp(char* dst, const std::string& path) {
    dst[0] = 0;
    if (path.empty() || path.size() + 5 >= sizeof g_temp_a) return;
    std::memcpy(dst, path.data(), path.size());
    std::memcpy(dst + path.size(), ".tmp", 5);
}

}  // namespace

void remove_temp_on_signal(const std::string& path_a, const std::string& path_b) {
    copy_temp(g_temp_a, path_a);
    copy_temp(g_temp_b, path_b);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
}

}  // namespace dsv4::cli
