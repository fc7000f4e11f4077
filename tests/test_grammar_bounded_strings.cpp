// Strings with maxLength: the mask at each position of such a string comes from the cached mask of the string
// without the upper bound, less the tokens writing more characters than are left (runtime/token_mask.h). It must
// equal the mask a full walk of the vocabulary gives from the real state, with and without a token budget, for
// every state a generation reaches (escapes, multi-byte characters, tokens that close the string and go on), and
// the positions of a long string must share one cached mask.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"
#include "tokenizer/tokenizer.h"

using namespace dsv4;
using ojson = nlohmann::ordered_json;

namespace {

Grammar schema(const char* text) {
    auto g = compile_json_schema(ojson::parse(text));
    EXPECT_TRUE(g.ok()) << g.error();
    return g.ok() ? std::move(*g) : Grammar{};
}

constexpr const char* kSchema = R"({"type": "object", "properties": {
    "id": {"type": "string", "maxLength": 3},
    "name": {"type": "string", "minLength": 2, "maxLength": 6},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
    "required": ["id", "name", "tags"], "additionalProperties": false})";

// Every check of one state: the cached masks (with the bounded-string view) against full walks.
void expect_masks_equal(const TokenGrammar& tg, const GrammarState& s, const std::vector<int32_t>& limits,
                        const std::string& where) {
    TokenMask walked;
    tg.compute_mask(s, walked);
    ASSERT_EQ(*tg.byte_mask(s), walked) << where;
    for (int32_t limit : limits) {
        TokenMask fast, full;
        tg.budget_mask(s, limit, fast);
        tg.compute_mask(s, limit, full);
        ASSERT_EQ(fast, full) << where << ", budget " << limit;
    }
}

// Single bytes and tokens that cross the string's parts: escapes (whole and cut), two-byte characters (whole
// and cut), text that closes the string and goes on.
TEST(BoundedStrings, MasksEqualFullWalksOnEveryReachableState) {
    std::vector<std::string> vocab = {""};
    for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"ab", "abcd", "abcdefgh", "\\n", "\\u0041", "\\u00", "\\", "\xC3\xA9", "\xC3", "\xA9x",
                          "\xC3\xA9\xC3\xA9\xC3\xA9", "\"}", "x\",", "\",", "\", \"", "a\"", "\"name\": \"",
                          "\"tags\": [\"", "\"]}", "xy\"]", "\"id\": \"q"})
        vocab.push_back(t);
    auto tg = std::make_shared<TokenGrammar>(schema(kSchema), std::make_shared<TokenTrie>(vocab));
    GrammarRunner run(tg->grammar());
    // Breadth-first over the states reachable with up to 14 tokens, each state once.
    std::deque<std::pair<GrammarState, int>> queue = {{run.initial(), 0}};
    std::unordered_set<std::string> seen;
    std::string key;
    int checked = 0;
    while (!queue.empty() && checked < 3000) {
        auto [s, depth] = std::move(queue.front());
        queue.pop_front();
        s.key(key);
        if (!seen.insert(key).second) continue;
        expect_masks_equal(*tg, s, {0, 1, 2, 4, 9}, "state " + std::to_string(checked));
        if (testing::Test::HasFatalFailure()) return;
        ++checked;
        if (depth == 14) continue;
        const TokenMask m = *tg->byte_mask(s);
        for (size_t t = 1; t < vocab.size(); ++t) {
            if (!mask_test(m, static_cast<int32_t>(t))) continue;
            GrammarState n = s;
            if (run.advance(n, vocab[t])) queue.emplace_back(std::move(n), depth + 1);
        }
    }
    std::printf("%d states checked\n", checked);
    EXPECT_GT(checked, 400);
}

// The real vocabulary: random generations (tokens drawn uniformly from the mask, so long tokens fill the strings
// quickly and the last characters of each bound are reached), every step against the full walk.
TEST(BoundedStrings, RealVocabularyGenerationsMatchFullWalks) {
    auto file = GgufFile::open(DSV4_SHARED_DIR "/fixtures/tokenizer/deepseek_v3/vocab.gguf");
    if (!file.ok()) GTEST_SKIP() << file.error();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.error();
    auto trie = TokenTrie::from_tokenizer(**tok);
    auto tg = std::make_shared<TokenGrammar>(schema(kSchema), trie);
    GrammarRunner run(tg->grammar());
    std::mt19937 rng(7);
    int steps = 0, values = 0;
    for (int gen = 0; gen < 6; ++gen) {
        GrammarState s = run.initial();
        for (int step = 0; step < 40 && !run.finished(s); ++step, ++steps) {
            expect_masks_equal(*tg, s, {3, 12}, "generation " + std::to_string(gen) + " step " + std::to_string(step));
            if (testing::Test::HasFatalFailure()) return;
            const TokenMask m = *tg->byte_mask(s);
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < trie->n_vocab; ++id)
                if (mask_test(m, static_cast<int32_t>(id))) allowed.push_back(static_cast<int32_t>(id));
            ASSERT_FALSE(allowed.empty());
            const int32_t t = allowed[rng() % allowed.size()];
            ASSERT_TRUE(run.advance(s, (*tok)->token_text(t)));
        }
        values += run.accepting(s);
    }
    std::printf("%d steps checked, %d values complete\n", steps, values);
    EXPECT_GT(steps, 60);
}

// The positions of a long string share the mask of its unbounded form: no walk after the first character.
TEST(BoundedStrings, PositionsOfALongStringShareOneCachedMask) {
    std::vector<std::string> vocab = {""};
    for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
    vocab.push_back("abcdefghij");
    auto tg = std::make_shared<TokenGrammar>(schema(R"({"type": "string", "maxLength": 40})"),
                                             std::make_shared<TokenTrie>(vocab));
    GrammarRunner run(tg->grammar());
    GrammarState s = run.initial();
    ASSERT_TRUE(run.advance(s, "\"a"));
    (void)tg->byte_mask(s);
    const auto misses = tg->cache_stats().misses;
    const int32_t ten = static_cast<int32_t>(vocab.size()) - 1;
    for (int i = 1; i < 40; ++i) {
        const TokenMask m = *tg->byte_mask(s);
        EXPECT_EQ(mask_test(m, ten), i <= 30) << "after " << i << " characters";  // 10 more must still fit
        EXPECT_TRUE(mask_test(m, '"' + 1));
        ASSERT_TRUE(run.advance(s, "a"));
    }
    EXPECT_EQ(tg->cache_stats().misses, misses);
    TokenMask full;
    tg->compute_mask(s, full);  // 40 characters: only the closing quote
    EXPECT_EQ(*tg->byte_mask(s), full);
    EXPECT_FALSE(mask_test(full, 'a' + 1));
    EXPECT_TRUE(mask_test(full, '"' + 1));
}

}  // namespace
