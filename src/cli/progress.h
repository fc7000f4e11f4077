// A one-line progress report on stderr for the long-running writers (convert, quantize): bytes done of the
// total, rate and ETA, redrawn in place at most a few times a second; and removal of a command's temporary
// output when it is interrupted (SIGINT/SIGTERM), so a stopped run leaves no half file behind.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dsv4::cli {

class ProgressLine {
public:
    ProgressLine(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}
    void update(uint64_t done, uint64_t total);
    // End the line (prints the final state once).
    void finish();

private:
    std::string label_;
    bool enabled_;
    bool drawn_ = false;
    uint64_t done_ = 0, total_ = 0;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_{};
    void draw();
};

// On SIGINT or SIGTERM, unlink `<path>.tmp` for each registered path (the GGUF writer's temporary name) and
// exit with 128 + the signal. Up to two paths; the strings are copied.
void remove_temp_on_signal(const std::string& path_a, const std::string& path_b = "");

}  // namespace dsv4::cli
