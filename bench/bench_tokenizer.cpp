// Tokenizer throughput on one core: encode (cold word cache, then warm), pre-tokenization alone, and decode,
// in MB/s of input text per second of this thread's CPU time (so a busy machine does not skew it; wall-clock
// MB/s is shown beside it). The target is >= 10 MB/s encoding English prose.
//   usage: bench_tokenizer MODEL.gguf [TEXT_FILE ...]
// Without text files it reads the English licence texts in /usr/share/common-licenses.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Rate {
    double cpu_mbps, wall_mbps;
};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs `fn` (which processes `bytes` bytes) until at least `min_s` seconds of CPU time have passed.
template <class Fn>
Rate rate(size_t bytes, double min_s, Fn&& fn) {
    const auto w0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    size_t done = 0;
    double s = 0;
    do {
        fn();
        done += bytes;
        s = thread_cpu_seconds() - c0;
    } while (s < min_s);
    const double wall = std::chrono::duration<double>(Clock::now() - w0).count();
    return {static_cast<double>(done) / s / 1e6, static_cast<double>(done) / wall / 1e6};
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [TEXT_FILE ...]\n", argv[0]);
        return 2;
    }
    std::vector<std::string> files(argv + 2, argv + argc);
    if (files.empty()) {
        const std::filesystem::path dir = "/usr/share/common-licenses";
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
            if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path().string());
        }
    }
    std::string text;
    for (const auto& f : files) text += read_file(f);
    if (text.empty()) {
        std::fprintf(stderr, "bench_tokenizer: no text to encode (give TEXT_FILE arguments)\n");
        return 1;
    }

    auto file = dsv4::GgufFile::open(argv[1]);
    if (!file.ok()) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", file.error().c_str());
        return 1;
    }
    const auto t_load = Clock::now();
    auto tok = dsv4::Tokenizer::from_gguf(**file);
    if (!tok.ok()) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", tok.error().c_str());
        return 1;
    }
    const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load).count();
    const dsv4::Tokenizer& t = **tok;

    std::vector<int32_t> ids;
    const Rate cold = rate(text.size(), 0.5, [&] {
        t.clear_cache();
        ids = t.encode(text, true);
    });
    const Rate warm = rate(text.size(), 1.0, [&] { ids = t.encode(text, true); });
    std::vector<std::string_view> pieces;
    const Rate pre = rate(text.size(), 0.5, [&] {
        pieces.clear();
        t.pretokenizer().split(text, pieces);
    });
    std::string back;
    const Rate dec = rate(text.size(), 0.5, [&] { back = t.decode(ids); });

    std::printf("tokenizer: %lld tokens in vocabulary, loaded in %.0f ms, pre-tokenizer JIT %s\n",
                static_cast<long long>(t.n_vocab()), load_ms, t.pretokenizer().jit() ? "on" : "off");
    std::printf("text: %zu files, %.2f MB, %zu tokens (%.2f bytes/token), %zu words\n", files.size(),
                static_cast<double>(text.size()) / 1e6, ids.size(),
                static_cast<double>(text.size()) / static_cast<double>(ids.size()), pieces.size());
    auto row = [](const char* what, Rate r) {
        std::printf("%-20s %8.1f MB/s on one core   (%.1f MB/s wall clock)\n", what, r.cpu_mbps, r.wall_mbps);
    };
    row("encode, cold cache:", cold);
    row("encode, warm cache:", warm);
    row("pre-tokenize only:", pre);
    row("decode:", dec);
    if (back != text) {
        std::fprintf(stderr, "bench_tokenizer: decode(encode(text)) != text\n");
        return 1;
    }
    return 0;
}
