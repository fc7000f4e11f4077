// Pre-tokenizer: cuts text into the words BPE encodes separately, as a sequence of regex splits (PCRE2 in
// UTF + UCP mode, JIT-compiled when available) each of which keeps both its matches and the unmatched text
// between them as pieces ("Isolated" in HF tokenizers), applied to every piece of the split before it.
//
// Invalid UTF-8: bytes that are not valid UTF-8 (stray continuation bytes, truncated or overlong
// sequences, surrogates, values above U+10FFFF) never reach the regexes. Each maximal run of them becomes one
// piece of its own, and the valid text on either side is split as if the run were the edge of the text.
// BPE then encodes such a piece from byte tokens like any other, so encoding never fails and every byte
// string round-trips through encode and decode.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class PreTokenizer {
public:
    // The pre-tokenizer a GGUF names in `tokenizer.ggml.pre`. Known: "deepseek-v3" (also DeepSeek-V4's).
    static Result<std::unique_ptr<PreTokenizer>> create(std::string_view name);
    // A custom sequence of split patterns (PCRE2 syntax), for tests and future models.
    static Result<std::unique_ptr<PreTokenizer>> from_patterns(const std::vector<std::string>& patterns);
    // The split patterns of a named pre-tokenizer (empty for an unknown name).
    static std::vector<std::string> patterns(std::string_view name);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Appends the pieces of `text` to `out` in order; they are views into `text`, never empty, and
    // concatenate to exactly `text`. Thread-safe.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

    size_t n_patterns() const;
    bool jit() const;  // whether every pattern was JIT-compiled

private:
    struct Impl;
    explicit PreTokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
