// UTF-8 scanning for the tokenizer: strict validation of one sequence at a time (the pre-tokenizer cuts
// invalid bytes out of the text before its regexes run) and Utf8Streamer, which turns the bytes of a stream
// of decoded tokens into complete UTF-8 pieces for streaming output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

enum class Utf8Kind : uint8_t {
    complete,    // `len` bytes form one valid scalar value
    incomplete,  // all of the available bytes are a valid start of a longer sequence that was cut off
    invalid,     // the first `len` bytes (a "maximal subpart", >= 1) can never be part of valid text
};

struct Utf8Scan {
    Utf8Kind kind;
    size_t len;
};

// Look at the sequence that starts at p[0] (n >= 1). Strict per RFC 3629: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. An invalid result's `len` is the maximal subpart of the Unicode
// standard (the longest prefix of a well-formed sequence, or 1), so a replacement policy built on it
// substitutes U+FFFD the way the standard recommends.
Utf8Scan utf8_scan(const char* p, size_t n);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);
bool utf8_is_valid(std::string_view s);

// Append the UTF-8 encoding of a scalar value (cp <= 0x10FFFF, not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

// Turns a stream of byte chunks (token texts) into pieces that end on complete characters: a multi-byte
// sequence split across tokens is held back until its last byte arrives. Bytes that can never become valid
// are either replaced by U+FFFD (one per maximal subpart; the default, so that streamed text is always valid
// UTF-8 for JSON) or passed through unchanged, as the mode says.
class Utf8Streamer {
public:
    enum class Invalid : uint8_t { replace, keep };

    explicit Utf8Streamer(Invalid mode = Invalid::replace) : mode_(mode) {}

    // Feed the next bytes; returns what can be emitted now (possibly empty).
    std::string push(std::string_view bytes);
    // End of stream: emit whatever is held back (an unfinished sequence counts as invalid).
    std::string flush();
    // Bytes currently held back.
    size_t pending() const { return pending_.size(); }

private:
    Invalid mode_;
    std::string pending_;  // an incomplete sequence (at most 3 bytes)
};

}  // namespace dsv4
