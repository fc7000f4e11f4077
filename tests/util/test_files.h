// Helpers shared by tests that edit GGUF files and run the dsv4 binary: a copy of a GGUF with its
// metadata and tensor set edited, and a command run with its output captured.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "core/status.h"

namespace dsv4 {

class GgufFile;
class GgufWriter;

namespace test {

// What write_gguf_copy changes: `meta` runs after every key of the source is copied (it may set keys again,
// or add tensors of its own), `keep` selects the tensors copied (all when empty), `rename` renames them,
// `drop_key` is left out.
struct GgufCopy {
    std::function<void(GgufWriter&)> meta;
    std::function<bool(const std::string&)> keep;
    std::function<std::string(const std::string&)> rename;
    std::string drop_key;
};
Status write_gguf_copy(const GgufFile& src, const std::filesystem::path& out, const GgufCopy& edit);

struct CmdResult {
    int status = -1;  // exit status; -1 when it did not exit normally
    std::string out;  // stdout and stderr
};
// `dsv4 ARGS` (the binary the tests were built with), stdout and stderr captured together.
CmdResult run_dsv4(const std::string& args);

}  // namespace test
}  // namespace dsv4
