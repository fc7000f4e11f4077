// UTF-8 scanning and the streaming decoder's character reassembly (see utf8.h).
#include "tokenizer/utf8.h"

namespace dsv4 {

Utf8Scan utf8_scan(const char* p, size_t n) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    const unsigned char b0 = u[0];
    if (b0 < 0x80) return {Utf8Kind::complete, 1};
    // The allowed range of the second byte is what excludes overlong forms, surrogates and values above
    // U+10FFFF (Unicode Table 3-7, "well-formed UTF-8 byte sequences"); later bytes are plain 80..BF.
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 == 0xE0) {
        need = 3, lo = 0xA0;
    } else if (b0 == 0xED) {
        need = 3, hi = 0x9F;
    } else if (b0 >= 0xE1 && b0 <= 0xEF) {
        need = 3;
    } else if (b0 == 0xF0) {
        need = 4, lo = 0x90;
    } else if (b0 >= 0xF1 && b0 <= 0xF3) {
        need = 4;
    } else if (b0 == 0xF4) {
        need = 4, hi = 0x8F;
    } else {
        return {Utf8Kind::invalid, 1};  // 80..C1 (stray continuation or overlong lead), F5..FF
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= n) return {Utf8Kind::incomplete, n};
        const unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (u[i] < lo_i || u[i] > hi_i) return {Utf8Kind::invalid, i};
    }
    return {Utf8Kind::complete, need};
}

size_t utf8_valid_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        // ASCII fast path: most text is ASCII, and a byte test is far cheaper than a full scan.
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        const Utf8Scan r = utf8_scan(s.data() + i, s.size() - i);
        if (r.kind != Utf8Kind::complete) break;
        i += r.len;
    }
    return i;
}

bool utf8_is_valid(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

std::string Utf8Streamer::push(std::string_view bytes) {
    std::string buf;
    buf.reserve(pending_.size() + bytes.size());
    buf += pending_;
    buf += bytes;
    pending_.clear();
    std::string out;
    out.reserve(buf.size());
    size_t i = 0;
    while (i < buf.size()) {
        const Utf8Scan r = utf8_scan(buf.data() + i, buf.size() - i);
        if (r.kind == Utf8Kind::incomplete) {
            pending_.assign(buf, i, std::string::npos);  // only possible at the end: wait for more bytes
            break;
        }
        if (r.kind == Utf8Kind::invalid && mode_ == Invalid::replace) {
            out += kReplacement;
        } else {
            out.append(buf, i, r.len);
        }
        i += r.len;
    }
    return out;
}

std::string Utf8Streamer::flush() {
    std::string out;
    if (pending_.empty()) return out;
    out = mode_ == Invalid::replace ? std::string(kReplacement) : pending_;
    pending_.clear();
    return out;
}

}  // namespace dsv4
