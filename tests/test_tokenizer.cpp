// Tokenizer tests: the DeepSeek-V3 fixture cases both ways (ids from HF tokenizers and transformers.js), the
// vocabulary and patterns against tokenizer.json, and properties that hold for any input: round trips of
// random text and bytes, whole-string special tokens, digit groups, invalid UTF-8 as documented, BPE against
// its textbook form, the word cache, UTF-8 streaming, and load errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace dsv4 {
namespace {

const std::string kDir = std::string(DSV4_SHARED_DIR) + "/fixtures/tokenizer/deepseek_v3";

const Tokenizer& fixture_tokenizer() {
    static const std::unique_ptr<Tokenizer> tok = [] {
        auto file = GgufFile::open(kDir + "/vocab.gguf");
        EXPECT_TRUE(file.ok()) << file.error();
        if (!file.ok()) std::abort();
        auto t = Tokenizer::from_gguf(**file);
        EXPECT_TRUE(t.ok()) << t.error();
        if (!t.ok()) std::abort();
        return std::move(*t);
    }();
    return *tok;
}

const nlohmann::json& tokenizer_json() {
    static const nlohmann::json j = [] {
        std::ifstream in(kDir + "/tokenizer.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string cp(uint32_t c) {
    std::string s;
    utf8_append(s, c);
    return s;
}

std::vector<std::string_view> split(const PreTokenizer& pre, std::string_view text) {
    std::vector<std::string_view> out;
    pre.split(text, out);
    return out;
}

// ---- the fixture cases -----------------------------------------------------------------------------------

TEST(TokenizerFixture, EveryCaseEncodesAndDecodes) {
    const Tokenizer& tok = fixture_tokenizer();
    std::ifstream in(kDir + "/cases.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto c = nlohmann::json::parse(line);
        const std::string text = c["text"];
        const std::vector<int32_t> ids = c["ids"];
        const std::string decoded = c["decoded"];
        EXPECT_EQ(tok.encode(text, /*parse_special=*/true), ids) << "text: " << text;
        EXPECT_EQ(tok.decode(ids), decoded) << "ids of: " << text;
        ++n;
    }
    EXPECT_GE(n, 40);  // the file has 45 cases; make sure they were read
}

TEST(TokenizerFixture, CasesHoldWithAColdAndAWarmCache) {
    const Tokenizer& tok = fixture_tokenizer();
    std::ifstream in(kDir + "/cases.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto c = nlohmann::json::parse(line);
        const std::vector<int32_t> ids = c["ids"];
        tok.clear_cache();
        EXPECT_EQ(tok.encode(c["text"].get<std::string>(), true), ids);
        EXPECT_EQ(tok.encode(c["text"].get<std::string>(), true), ids);
    }
}

TEST(TokenizerFixture, MetadataComesFromTheFile) {
    const Tokenizer& tok = fixture_tokenizer();
    EXPECT_EQ(tok.n_vocab(), 129280);  // the GGUF pads the 128815 HF tokens to the model's vocabulary size
    // BOS/EOS as tokenizer_config.json names them.
    const auto cfg = nlohmann::json::parse(read_file(kDir + "/tokenizer_config.json"));
    EXPECT_EQ(tok.find_special(cfg["bos_token"]["content"].get<std::string>()), tok.bos());
    EXPECT_EQ(tok.find_special(cfg["eos_token"]["content"].get<std::string>()), tok.eos());
    EXPECT_EQ(tok.add_bos(), cfg["add_bos_token"].get<bool>());
    EXPECT_TRUE(tok.is_control(tok.bos()));
    EXPECT_FALSE(tok.is_control(3));
    EXPECT_FALSE(tok.is_control(-1));
    EXPECT_FALSE(tok.is_control(static_cast<int32_t>(tok.n_vocab())));
}

TEST(TokenizerFixture, VocabularyAndMergesMatchTokenizerJson) {
    const Vocab& v = fixture_tokenizer().vocab();
    const auto& model = tokenizer_json()["model"];
    size_t n = 0;
    for (const auto& [text, id] : model["vocab"].items()) {
        ASSERT_EQ(v.text(id.get<int32_t>()), text) << "id " << id;
        ++n;
    }
    EXPECT_EQ(n, 128000u);
    const auto& merges = model["merges"];
    EXPECT_EQ(v.n_merges(), static_cast<int64_t>(merges.size()));
    // Spot-check ranks: merge r of tokenizer.json must have rank r.
    for (size_t r = 0; r < merges.size(); r += 997) {
        const std::string m = merges[r];
        const size_t sp = m.find(' ');
        const auto l = v.find(m.substr(0, sp)), rt = v.find(m.substr(sp + 1)), j = v.find(m.substr(0, sp) + m.substr(sp + 1));
        ASSERT_TRUE(l && rt && j) << m;
        const Vocab::Merge* mg = v.find_merge(*l, *rt);
        ASSERT_NE(mg, nullptr) << m;
        EXPECT_EQ(mg->rank, static_cast<int32_t>(r)) << m;
        EXPECT_EQ(mg->id, *j) << m;
    }
}

TEST(TokenizerFixture, PatternsAreTokenizerJsonsSplits) {
    std::vector<std::string> json_patterns;
    for (const auto& p : tokenizer_json()["pre_tokenizer"]["pretokenizers"]) {
        if (p["type"] == "Split") {
            EXPECT_EQ(p["behavior"], "Isolated");
            EXPECT_EQ(p["invert"], false);
            json_patterns.push_back(p["pattern"]["Regex"]);
        }
    }
    EXPECT_EQ(PreTokenizer::patterns("deepseek-v3"), json_patterns);
    EXPECT_TRUE(PreTokenizer::patterns("no-such").empty());
}

TEST(TokenizerFixture, AddedTokensAreRecognizedWhole) {
    const Tokenizer& tok = fixture_tokenizer();
    int n = 0;
    for (const auto& a : tokenizer_json()["added_tokens"]) {
        const std::string content = a["content"];
        const int32_t id = a["id"];
        // tokenizer.json: nothing is stripped around any of them, so whole-string matching is the rule.
        ASSERT_FALSE(a["lstrip"].get<bool>() || a["rstrip"].get<bool>() || a["single_word"].get<bool>());
        EXPECT_EQ(tok.find_special(content), id) << content;
        EXPECT_EQ(tok.token_type(id), a["special"].get<bool>() ? TokenType::control : TokenType::user_defined);
        EXPECT_EQ(tok.encode(content, true), std::vector<int32_t>{id}) << content;
        const std::vector<int32_t> plain = tok.encode(content, false);
        EXPECT_GT(plain.size(), 1u) << content;
        EXPECT_EQ(tok.decode(plain), content);
        EXPECT_EQ(tok.decode(std::vector<int32_t>{id}), content);
        ++n;
    }
    EXPECT_EQ(n, 818);
}

// ---- properties ------------------------------------------------------------------------------------------

TEST(TokenizerProps, SpecialTokensOnlyAsWholeStrings) {
    const Tokenizer& tok = fixture_tokenizer();
    const std::string user = "<｜User｜>", bos = "<｜begin▁of▁sentence｜>";
    const int32_t user_id = *tok.find_special(user), bos_id = *tok.find_special(bos);
    auto count = [&](const std::vector<int32_t>& ids, int32_t id) { return std::count(ids.begin(), ids.end(), id); };
    for (const std::string partial : {"<｜User", "<｜User｜", "｜User｜>", "<｜user｜>", "<｜ User｜>", "<|User|>"}) {
        const auto ids = tok.encode("x" + partial + "y", true);
        for (int32_t id : ids) EXPECT_FALSE(tok.is_special(id)) << partial;
        EXPECT_EQ(tok.decode(ids), "x" + partial + "y");
    }
    EXPECT_FALSE(tok.find_special("<｜User").has_value());
    EXPECT_FALSE(tok.find_special(user + " ").has_value());
    EXPECT_FALSE(tok.find_special("").has_value());
    // Embedded inside words, adjacent to each other, repeated: each occurrence is one token and the text
    // around it encodes as if the token were an edge.
    const std::string text = "abc" + user + bos + user + "def";
    std::vector<int32_t> want = tok.encode("abc", true);
    want.push_back(user_id);
    want.push_back(bos_id);
    want.push_back(user_id);
    for (int32_t id : tok.encode("def", true)) want.push_back(id);
    EXPECT_EQ(tok.encode(text, true), want);
    const auto plain = tok.encode(text, false);
    EXPECT_EQ(count(plain, user_id) + count(plain, bos_id), 0);
    EXPECT_EQ(tok.decode(plain), text);
}

TEST(TokenizerProps, NumbersSplitIntoGroupsOfAtMostThreeDigits) {
    const Tokenizer& tok = fixture_tokenizer();
    std::mt19937 rng(7);
    for (int len = 1; len <= 40; ++len) {
        std::string digits;
        for (int i = 0; i < len; ++i) digits += static_cast<char>('0' + rng() % 10);
        const auto pieces = split(tok.pretokenizer(), digits);
        ASSERT_EQ(pieces.size(), static_cast<size_t>((len + 2) / 3)) << digits;
        for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(pieces[i], digits.substr(3 * i, 3));
        // No token crosses a group boundary.
        size_t pos = 0;
        for (int32_t id : tok.encode(digits, false)) {
            const std::string_view t = tok.token_text(id);
            ASSERT_LE(t.size(), 3u);
            EXPECT_EQ(pos / 3, (pos + t.size() - 1) / 3) << digits;
            pos += t.size();
        }
        EXPECT_EQ(pos, digits.size());
    }
    // Other scripts' digits are \p{N} too: Arabic-Indic, fullwidth.
    const std::string arabic = cp(0x0661) + cp(0x0662) + cp(0x0663) + cp(0x0664);
    EXPECT_EQ(split(tok.pretokenizer(), arabic).size(), 2u);
}

TEST(TokenizerProps, WhitespaceIsUnicodeWhiteSpace) {
    // Oniguruma's \s (used by HF) is the White_Space property; U+180E left it in Unicode 6.3, so it is not
    // whitespace: " " before it is a piece of its own ("\s+(?!\S)" fails, "\s+" takes the space).
    const auto& pre = fixture_tokenizer().pretokenizer();
    const std::string mvs = cp(0x180E);
    EXPECT_EQ(split(pre, "x " + mvs), (std::vector<std::string_view>{"x", " ", mvs}));
    // U+3000 (ideographic space) is White_Space: two of them before a word leave one to prefix it.
    const std::string ideo = cp(0x3000);
    EXPECT_EQ(split(pre, ideo + ideo + "x"), (std::vector<std::string_view>{ideo, ideo + "x"}));
}

TEST(TokenizerProps, InvalidUtf8IsCutOutAndEncodedAsBytes) {
    const Tokenizer& tok = fixture_tokenizer();
    const auto& pre = tok.pretokenizer();
    // Documented in pretokenizer.h: each maximal run of invalid bytes is one piece; the valid text around
    // it is split as if the run were the edge of the text.
    EXPECT_EQ(split(pre, "ab\xff\xfe" "cd"), (std::vector<std::string_view>{"ab", "\xff\xfe", "cd"}));
    EXPECT_EQ(split(pre, " hello\x80 world"), (std::vector<std::string_view>{" hello", "\x80", " world"}));
    EXPECT_EQ(split(pre, "\xe4\xbd"), (std::vector<std::string_view>{"\xe4\xbd"}));  // 你 cut short
    EXPECT_EQ(split(pre, "12\xc0\xaf" "34"), (std::vector<std::string_view>{"12", "\xc0\xaf", "34"}));  // overlong
    EXPECT_EQ(split(pre, "a\xed\xa0\x80"), (std::vector<std::string_view>{"a", "\xed\xa0\x80"}));  // surrogate

    const Vocab& v = tok.vocab();
    EXPECT_EQ(tok.encode("\xff", true), std::vector<int32_t>{v.byte_token(0xFF)});
    std::vector<int32_t> want = tok.encode("ab", true);
    want.push_back(v.byte_token(0xFF));
    for (int32_t id : tok.encode("cd", true)) want.push_back(id);
    EXPECT_EQ(tok.encode("ab\xff" "cd", true), want);
    for (const std::string s : {"\xe4\xbd", "\xf0\x9f\x98", "\x80\x80\x80", "\xf5\xff", "ok\xc3", "\xc3(", "\xf4\x90\x80\x80"}) {
        EXPECT_EQ(tok.decode(tok.encode(s, true)), s);
    }
}

// A random string of mixed scripts; with `bytes`, also arbitrary bytes that may be invalid UTF-8.
std::string random_text(std::mt19937& rng, bool bytes, const std::vector<std::string>& specials) {
    static const char* kAscii[] = {"the", " quick", "Fox", " ", "  ", "\n", "\r\n", "\t", ".", ",", "!?", "'s",
                                   "'ll", "__", "->", "{", "}", "()", "\"", "#", "a", "Z", "   ", "\n\n"};
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
        switch (rng() % 12) {
            case 0: case 1: s += kAscii[rng() % std::size(kAscii)]; break;
            case 2: for (int k = rng() % 9; k >= 0; --k) s += static_cast<char>('0' + rng() % 10); break;
            case 3: s += cp(0x4E00 + rng() % (0x9FA5 - 0x4E00 + 1)); break;  // CJK ideographs
            case 4: s += cp(0x3040 + rng() % 0xC0); break;                   // kana
            case 5: s += cp(0xAC00 + rng() % 11172); break;                  // Hangul syllables
            case 6: s += cp(0x1F300 + rng() % 0x300); break;                 // emoji and pictographs
            case 7: s += cp(0x0300 + rng() % 0x70); break;                   // combining marks
            case 8: {                                                         // any scalar value
                uint32_t c = rng() % 0x110000;
                if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
                s += cp(c);
                break;
            }
            case 9: if (!specials.empty()) s += specials[rng() % specials.size()]; break;
            case 10: s += cp(0x00A0 + rng() % 0x200); break;  // Latin-1 supplement, Latin extended
            default:
                if (bytes) {
                    s += static_cast<char>(rng() % 256);
                } else {
                    s += cp(0x2000 + rng() % 0x70);  // general punctuation, odd spaces
                }
        }
    }
    return s;
}

TEST(TokenizerProps, RandomTextRoundTrips) {
    const Tokenizer& tok = fixture_tokenizer();
    std::vector<std::string> specials;
    for (int32_t id : tok.vocab().special_ids()) {
        if (specials.size() < 40 || id > 128790) specials.emplace_back(tok.vocab().text(id));
    }
    std::mt19937 rng(12345);
    for (int iter = 0; iter < 3000; ++iter) {
        const bool bytes = iter % 3 == 0;
        const std::string s = random_text(rng, bytes, specials);
        for (const bool parse_special : {true, false}) {
            const auto ids = tok.encode(s, parse_special);
            ASSERT_EQ(tok.decode(ids), s) << "iteration " << iter;
            ASSERT_TRUE(tok.check_ids(ids).ok());
            if (!parse_special) {
                for (int32_t id : ids) ASSERT_FALSE(tok.is_special(id)) << "iteration " << iter;
            }
        }
        // Pieces are non-empty, in order, and cover the text exactly.
        std::vector<std::string_view> pieces;
        tok.pretokenizer().split(s, pieces);
        std::string joined;
        for (auto p : pieces) {
            ASSERT_FALSE(p.empty());
            joined += p;
        }
        ASSERT_EQ(joined, s);
    }
}

TEST(TokenizerProps, AllSingleBytesAndLongRunsRoundTrip) {
    const Tokenizer& tok = fixture_tokenizer();
    for (int b = 0; b < 256; ++b) {
        const std::string s(1, static_cast<char>(b));
        EXPECT_EQ(tok.decode(tok.encode(s, true)), s) << b;
    }
    // Long runs stress the regexes' backtracking and the heap-based merge; they must simply work.
    for (const std::string unit : {" ", "a", "7", "\n", "😀", "你", "\xff", " \t", "ab ", "é"}) {
        std::string s;
        while (s.size() < 300000) s += unit;
        EXPECT_EQ(tok.decode(tok.encode(s, true)), s) << unit;
    }
}

TEST(TokenizerProps, EncodeIsSafeAcrossThreads) {
    const Tokenizer& tok = fixture_tokenizer();
    std::mt19937 rng(99);
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i) texts.push_back(random_text(rng, false, {}));
    std::vector<std::vector<int32_t>> want;
    for (const auto& t : texts) want.push_back(tok.encode(t, true));
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 50; ++rep) {
                const size_t i = (rep * 7 + t) % texts.size();
                if (tok.encode(texts[i], true) != want[i]) ++bad;
                if (rep % 10 == 0) tok.clear_cache();
            }
        });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
}

// ---- pieces -------------------------------------------------------------------------------------------

TEST(Bpe, HeapMergeEqualsTheTextbookLoop) {
    const Vocab& v = fixture_tokenizer().vocab();
    std::mt19937 rng(3);
    const std::string alphabet = "aeiou rstln\xc3\xa9\xe4\xbd\xa0 ";
    for (int iter = 0; iter < 2000; ++iter) {
        std::string w;
        const size_t len = 1 + rng() % (iter % 2 ? 200 : 40);
        for (size_t i = 0; i < len; ++i) {
            w += iter % 5 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
        }
        std::vector<int32_t> fast, slow;
        bpe_encode_word(v, w, fast);
        bpe_encode_word_simple(v, w, slow);
        ASSERT_EQ(fast, slow) << "word of " << len << " bytes, iteration " << iter;
    }
}

TEST(Bpe, CacheStaysBoundedAndKeepsWhatItReturns) {
    BpeCache cache(/*n_slots=*/4);
    auto name = [](int i) {
        std::string w = "w";  // built in two steps: GCC 12 warns falsely (-Wrestrict) on "w" + to_string(i)
        w += std::to_string(i);
        return w;
    };
    for (int i = 0; i < 100; ++i) {
        const std::string w = name(i);
        const int32_t t[2] = {i, -i};
        cache.insert(w, t, 2);
        EXPECT_LE(cache.size(), 4u);
        std::vector<int32_t> out;
        ASSERT_TRUE(cache.lookup(w, out));  // the newest word of a set is always held
        EXPECT_EQ(out, (std::vector<int32_t>{i, -i}));
    }
    EXPECT_EQ(cache.size(), 4u);
    std::vector<int32_t> out{7};
    int held = 0;
    for (int i = 0; i < 100; ++i) held += cache.lookup(name(i), out);
    EXPECT_EQ(held, 4);
    EXPECT_EQ(out.size(), 1u + 4 * 2);  // appends, keeping what was there
    // Too long a word, or too many tokens, is not cached; neither is the empty word.
    const std::string long_word(BpeCache::kMaxWordBytes + 1, 'x');
    const int32_t t[BpeCache::kMaxTokens + 1] = {};
    cache.insert(long_word, t, 1);
    cache.insert("many", t, BpeCache::kMaxTokens + 1);
    cache.insert("", t, 1);
    EXPECT_FALSE(cache.lookup(long_word, out));
    EXPECT_FALSE(cache.lookup("many", out));
    EXPECT_FALSE(cache.lookup("", out));
    cache.insert("ok", t, BpeCache::kMaxTokens);
    EXPECT_TRUE(cache.lookup("ok", out));
    cache.clear();
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_FALSE(cache.lookup("ok", out));
}

TEST(ByteLevel, TableIsGpt2s) {
    // GPT-2's map: printable bytes are themselves; the rest take U+0100.. in byte order.
    EXPECT_EQ(byte_level_codepoint('a'), static_cast<uint32_t>('a'));
    EXPECT_EQ(byte_level_codepoint(0x00), 0x100u);
    EXPECT_EQ(byte_level_codepoint(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(byte_level_codepoint('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(byte_level_codepoint(0x7F), 0x121u);
    EXPECT_EQ(byte_level_codepoint(0xA0), 0x142u);
    EXPECT_EQ(byte_level_codepoint(0xAD), 0x143u);
    EXPECT_EQ(byte_level_codepoint(0xFF), 0xFFu);
    std::set<uint32_t> seen;
    for (int b = 0; b < 256; ++b) {
        const uint32_t c = byte_level_codepoint(static_cast<uint8_t>(b));
        EXPECT_TRUE(seen.insert(c).second);
        EXPECT_EQ(byte_level_byte(c), b);
    }
    EXPECT_EQ(byte_level_byte(0x144), -1);
    EXPECT_EQ(byte_level_byte(0x20), -1);
    // The fixture's " " is token 223: the byte-level text of the space byte.
    EXPECT_EQ(fixture_tokenizer().vocab().byte_token(' '), 223);
}

// Independent UTF-8 oracle: decode bits without range rules, then demand the canonical re-encoding.
bool naive_valid(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t c = n == 1 ? b : b & (0x7F >> n);
        for (int k = 1; k < n; ++k) {
            const auto x = static_cast<unsigned char>(s[i + k]);
            if ((x & 0xC0) != 0x80) return false;
            c = c << 6 | (x & 0x3F);
        }
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF) || cp(c) != s.substr(i, n)) return false;
        i += n;
    }
    return true;
}

TEST(Utf8, ValidationMatchesAnIndependentDecoder) {
    for (int a = 0; a < 256; ++a) {
        for (int b = 0; b < 256; ++b) {
            const std::string s{static_cast<char>(a), static_cast<char>(b)};
            ASSERT_EQ(utf8_is_valid(s), naive_valid(s)) << a << " " << b;
        }
    }
    std::mt19937 rng(5);
    const unsigned char interesting[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                         0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
    for (int iter = 0; iter < 200000; ++iter) {
        std::string s;
        for (int k = 1 + rng() % 4; k > 0; --k) s += static_cast<char>(interesting[rng() % std::size(interesting)]);
        ASSERT_EQ(utf8_is_valid(s), naive_valid(s));
    }
    EXPECT_EQ(utf8_scan("\xf0\x9f\x98", 3).kind, Utf8Kind::incomplete);
    EXPECT_EQ(utf8_scan("\xe0\x9f\x80", 3).len, 1u);          // overlong: maximal subpart is the lead byte
    EXPECT_EQ(utf8_scan("\xe4\xbd" "a", 3).len, 2u);           // truncated: both bytes are one subpart
    EXPECT_EQ(utf8_scan("\xf0\x9f\x98\x80", 4).len, 4u);
}

TEST(Utf8, StreamerEmitsWholeCharacters) {
    const Tokenizer& tok = fixture_tokenizer();
    const std::string text = "emoji: 😀🎉👍🏽 👨‍👩‍👧 日本語 café ok";
    const auto ids = tok.encode(text, true);
    Utf8Streamer st;
    std::string got;
    for (int32_t id : ids) {
        const std::string piece = st.push(tok.token_text(id));
        EXPECT_TRUE(utf8_is_valid(piece));
        got += piece;
    }
    got += st.flush();
    EXPECT_EQ(got, text);
    // Byte by byte: nothing is emitted until a character is complete.
    Utf8Streamer bytes;
    EXPECT_EQ(bytes.push("\xf0"), "");
    EXPECT_EQ(bytes.push("\x9f\x98"), "");
    EXPECT_EQ(bytes.pending(), 3u);
    EXPECT_EQ(bytes.push("\x80!"), "😀!");
    // Invalid bytes: U+FFFD per maximal subpart, or kept as they are.
    Utf8Streamer rep, keep(Utf8Streamer::Invalid::keep);
    EXPECT_EQ(rep.push("a\xff\xe4\xbd" "b"), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
    EXPECT_EQ(keep.push("a\xff\xe4\xbd" "b"), "a\xff\xe4\xbd" "b");
    EXPECT_EQ(rep.push("\xe4\xbd"), "");
    EXPECT_EQ(rep.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(keep.push("\xe4\xbd"), "");
    EXPECT_EQ(keep.flush(), "\xe4\xbd");
}

// ---- errors ---------------------------------------------------------------------------------------------

VocabData tiny_vocab() {
    VocabData d;
    for (int b = 0; b < 256; ++b) d.tokens.push_back(cp(byte_level_codepoint(static_cast<uint8_t>(b))));
    d.tokens.push_back("ab");
    d.tokens.push_back("<s>");
    d.types.assign(d.tokens.size(), 1);
    d.types.back() = 3;
    d.merges = {"a b"};
    d.bos = 257;
    return d;
}

TEST(TokenizerErrors, BadVocabulariesNameTheProblem) {
    {
        auto d = tiny_vocab();
        auto t = Tokenizer::from_vocab(std::move(Vocab::from_data(d).value()));
        ASSERT_TRUE(t.ok()) << t.error();
        EXPECT_EQ((*t)->encode("ab<s>ab", true), (std::vector<int32_t>{256, 257, 256}));
        EXPECT_EQ((*t)->bos(), 257);
    }
    auto expect_error = [](VocabData d, const std::string& needle) {
        auto v = Vocab::from_data(d);
        ASSERT_FALSE(v.ok()) << needle;
        EXPECT_NE(v.error().find(needle), std::string::npos) << v.error();
    };
    auto d = tiny_vocab();
    d.merges = {"a c d"};
    expect_error(d, "merges[0]");
    d.merges = {"a zz"};
    expect_error(d, "'zz'");
    d = tiny_vocab();
    d.types.pop_back();
    expect_error(d, "token_type has");
    d = tiny_vocab();
    d.bos = 9999;
    expect_error(d, "bos_token_id");
    d = tiny_vocab();
    d.tokens[' '] = "space";
    expect_error(d, "byte 0x20");
    d = tiny_vocab();
    d.types[3] = 42;
    expect_error(d, "token_type[3]");
    d = tiny_vocab();
    d.pre = "llama3";
    auto t = Tokenizer::from_vocab(std::move(Vocab::from_data(d).value()));
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("llama3"), std::string::npos);
}

TEST(TokenizerErrors, GgufWithoutByteLevelBpeIsRefused) {
    const std::string path = ::testing::TempDir() + "/dsv4_tok_llama.gguf";
    GgufWriter w;
    w.set_str("tokenizer.ggml.model", "llama");
    w.set_arr_str("tokenizer.ggml.tokens", {"a"});
    ASSERT_TRUE(w.write(path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("'llama'"), std::string::npos) << t.error();
    EXPECT_NE(t.error().find(path), std::string::npos) << t.error();
    std::remove(path.c_str());
}

TEST(TokenizerErrors, CheckIdsNamesTheBadId) {
    const Tokenizer& tok = fixture_tokenizer();
    EXPECT_TRUE(tok.check_ids(std::vector<int32_t>{0, 1, 129279}).ok());
    const Status s = tok.check_ids(std::vector<int32_t>{5, 129280});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("129280"), std::string::npos);
    EXPECT_NE(s.error().find("index 1"), std::string::npos);
    EXPECT_FALSE(tok.check_ids(std::vector<int32_t>{-1}).ok());
}

}  // namespace
}  // namespace dsv4
