// Regex pre-tokenization with PCRE2 (see pretokenizer.h). Built without PCRE2 (DSV4_MINIMAL), creating a
// pre-tokenizer fails with an error that says so.
#include "tokenizer/pretokenizer.h"

#include <algorithm>

#include "core/check.h"
#include "tokenizer/utf8.h"

#ifdef DSV4_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace dsv4 {

namespace {

// DeepSeek-V3's pre_tokenizer (tokenizer.json): digits in groups of at most three, runs of CJK ideographs
// and kana, then GPT-style words, punctuation and whitespace. Written exactly as tokenizer.json holds them
// (a test compares), including the raw CR and LF characters inside the classes.
std::vector<std::string> deepseek_v3_patterns() {
    return {
        "\\p{N}{1,3}",
        "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    };
}

}  // namespace

#ifdef DSV4_HAVE_PCRE2

namespace {

// HF tokenizers runs these patterns with Oniguruma, whose Unicode \s is exactly the White_Space property.
// PCRE2's UCP \s also takes U+180E (in \h for compatibility), so \s and \S become the property itself.
// Escaped backslashes are copied as they are, so "\\s" stays a literal backslash followed by 's'.
std::string onig_to_pcre2(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 32);
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c != '\\' || i + 1 == pattern.size()) {
            out += c;
            continue;
        }
        const char e = pattern[++i];
        if (e == 's') {
            out += "\\p{White_Space}";
        } else if (e == 'S') {
            out += "\\P{White_Space}";
        } else {
            out += '\\';
            out += e;
        }
    }
    return out;
}

}  // namespace

struct PreTokenizer::Impl {
    struct Pattern {
        pcre2_code* code = nullptr;
        bool jit = false;
    };
    std::vector<Pattern> patterns;
    uint32_t max_pairs = 1;  // ovector pairs a match data needs for every pattern

    ~Impl() {
        for (auto& p : patterns) pcre2_code_free(p.code);
    }

    // Split `piece` with pattern `stage` and hand every match and every gap to the next stage; past the
    // last stage a piece is final.
    void apply(size_t stage, std::string_view piece, pcre2_match_data* md, std::vector<std::string_view>& out) const {
        if (stage == patterns.size()) {
            out.push_back(piece);
            return;
        }
        const Pattern& p = patterns[stage];
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
        const size_t n = piece.size();
        size_t gap = 0;     // start of the text not yet handed on
        size_t search = 0;  // where the next match attempt starts
        while (search < n) {
            // The text was validated before, and match boundaries fall on character boundaries, so
            // PCRE2's own UTF check (a full scan per call) can be skipped.
            const int rc = p.jit ? pcre2_jit_match(p.code, subject, n, search, 0, md, nullptr)
                                 : pcre2_match(p.code, subject, n, search, PCRE2_NO_UTF_CHECK, md, nullptr);
            // No match, or a resource limit hit: the rest stays one unmatched piece, which still encodes
            // losslessly.
            if (rc < 0) break;
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t ms = ov[0], me = ov[1];
            if (me <= ms) {
                // An empty match (possible only in custom patterns) splits nothing; step one character on.
                if (ms >= n) break;
                const Utf8Scan r = utf8_scan(piece.data() + ms, n - ms);
                search = ms + r.len;
                continue;
            }
            if (ms > gap) apply(stage + 1, piece.substr(gap, ms - gap), md, out);
            apply(stage + 1, piece.substr(ms, me - ms), md, out);
            gap = search = me;
        }
        if (gap < n) apply(stage + 1, piece.substr(gap), md, out);
    }
};

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::from_patterns(const std::vector<std::string>& patterns) {
    auto impl = std::make_unique<Impl>();
    for (size_t i = 0; i < patterns.size(); ++i) {
        const std::string pcre = onig_to_pcre2(patterns[i]);
        int err = 0;
        PCRE2_SIZE err_off = 0;
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                                         PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
        if (code == nullptr) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return make_error("pre-tokenizer pattern " + std::to_string(i) + " does not compile at offset " +
                              std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
        }
        Impl::Pattern p;
        p.code = code;
        // Without JIT (unsupported CPU, or a build without it) the interpreter gives the same matches.
        p.jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
        impl->patterns.push_back(p);
        uint32_t captures = 0;
        pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &captures);
        impl->max_pairs = std::max(impl->max_pairs, captures + 1);
    }
    return std::unique_ptr<PreTokenizer>(new PreTokenizer(std::move(impl)));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    if (text.empty()) return;
    // One match data per call keeps split() thread-safe; it is a single small allocation.
    pcre2_match_data* md = pcre2_match_data_create(impl_->max_pairs, nullptr);
    DSV4_CHECK(md != nullptr);
    size_t i = 0;
    while (i < text.size()) {
        const size_t valid = utf8_valid_prefix(text.substr(i));
        if (valid > 0) impl_->apply(0, text.substr(i, valid), md, out);
        i += valid;
        // The run of bytes that are not valid UTF-8, up to the next complete character.
        const size_t bad_start = i;
        while (i < text.size()) {
            const Utf8Scan r = utf8_scan(text.data() + i, text.size() - i);
            if (r.kind == Utf8Kind::complete) break;
            i += r.len;
        }
        if (i > bad_start) out.push_back(text.substr(bad_start, i - bad_start));
    }
    pcre2_match_data_free(md);
}

bool PreTokenizer::jit() const {
    for (const auto& p : impl_->patterns) {
        if (!p.jit) return false;
    }
    return true;
}

#else  // !DSV4_HAVE_PCRE2

struct PreTokenizer::Impl {
    std::vector<std::string> patterns;
};

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::from_patterns(const std::vector<std::string>& patterns) {
    return make_error("the tokenizer needs PCRE2, and this build has none (DSV4_MINIMAL)");
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    if (!text.empty()) out.push_back(text);
}

bool PreTokenizer::jit() const { return false; }

#endif  // DSV4_HAVE_PCRE2

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(std::string_view name) {
    if (name == "deepseek-v3") return from_patterns(deepseek_v3_patterns());
    return make_error("pre-tokenizer '" + std::string(name) + "' is not supported (known: deepseek-v3)");
}

std::vector<std::string> PreTokenizer::patterns(std::string_view name) {
    if (name == "deepseek-v3") return deepseek_v3_patterns();
    return {};
}

PreTokenizer::PreTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreTokenizer::~PreTokenizer() = default;

size_t PreTokenizer::n_patterns() const { return impl_->patterns.size(); }

}  // namespace dsv4
