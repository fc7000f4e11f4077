// Strings with maxLength, and bounded repeats of one byte set in patterns and formats ([a-z]{1,20}): the mask at
// each position comes from the cached mask of the same state without the upper bound, less the tokens writing
// more items than are left (runtime/token_mask.h); a byte-set repeat whose follower may begin with one of its
// bytes is walked as it is. The mask must equal the one a full walk of the vocabulary gives from the real state,
// with and without a token budget, for every state a generation reaches (escapes, multi-byte characters, tokens
// that close the string or leave the repeat and go on), and the positions of a long string or repeat must share
// one cached mask.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"
#include "util/grammar_fixtures.h"
#include "tokenizer/tokenizer.h"

using namespace dsv4;
using test::byte_vocab;
using test::schema_grammar;
using ojson = nlohmann::ordered_json;

namespace {

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

// Breadth-first over the states reachable with up to `max_depth` tokens of `vocab` (single bytes plus
// `extra`), each state once, every one checked; returns how many were.
int check_reachable_states(const char* schema_text, const std::vector<std::string>& extra, int max_depth,
                           const std::vector<int32_t>& limits) {
    const std::vector<std::string> vocab = byte_vocab(extra);
    auto tg = std::make_shared<TokenGrammar>(schema_grammar(schema_text), std::make_shared<TokenTrie>(vocab));
    GrammarRunner run(tg->grammar());
    std::deque<std::pair<GrammarState, int>> queue = {{run.initial(), 0}};
    std::unordered_set<std::string> seen;
    std::string key;
    int checked = 0;
    while (!queue.empty() && checked < 3000) {
        auto [s, depth] = std::move(queue.front());
        queue.pop_front();
        s.key(key);
        if (!seen.insert(key).second) continue;
        expect_masks_equal(*tg, s, limits, "state " + std::to_string(checked));
        if (testing::Test::HasFatalFailure()) return checked;
        ++checked;
        if (depth == max_depth) continue;
        const TokenMask m = *tg->byte_mask(s);
        for (size_t t = 1; t < vocab.size(); ++t) {
            if (!mask_test(m, static_cast<int32_t>(t))) continue;
            GrammarState n = s;
            if (run.advance(n, vocab[t])) queue.emplace_back(std::move(n), depth + 1);
        }
    }
    return checked;
}

// Single bytes and tokens that cross the string's parts: escapes (whole and cut), two-byte characters (whole
// and cut), text that closes the string and goes on.
TEST(BoundedStrings, MasksEqualFullWalksOnEveryReachableState) {
    const int checked = check_reachable_states(kSchema,
                                               {"ab",
                                                "abcd",
                                                "abcdefgh",
                                                "\\n",
                                                "\\u0041",
                                                "\\u00",
                                                "\\",
                                                "\xC3\xA9",
                                                "\xC3",
                                                "\xA9x",
                                                "\xC3\xA9\xC3\xA9\xC3\xA9",
                                                "\"}",
                                                "x\",",
                                                "\",",
                                                "\", \"",
                                                "a\"",
                                                "\"name\": \"",
                                                "\"tags\": [\"",
                                                "\"]}",
                                                "xy\"]",
                                                "\"id\": \"q"},
                                               14, {0, 1, 2, 4, 9});
    std::printf("%d states checked\n", checked);
    EXPECT_GT(checked, 400);
}

// Patterns: repeats of one byte set followed by other bytes (the view holds), by bytes of the same set (the
// repeat may end early, so the state is walked as it is), nested in bounded groups, and the email format.
TEST(BoundedStrings, PatternRepeatsEqualFullWalksOnEveryReachableState) {
    const std::vector<std::string> extra = {"ab",   "abc", "abcdef", "ab-", "-12", "1234", "12345\"", "x\"",
                                            "ab.c", "a@b", "@",      "b.c", "\"}", "a1",   "AB"};
    const int disjoint = check_reachable_states(
        R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[a-z]{1,5}-[0-9]{2,4}$"}},
            "required": ["code"], "additionalProperties": false})",
        extra, 12, {0, 1, 3, 6});
    const int overlapping =
        check_reachable_states(R"({"type": "string", "pattern": "^[a-z]{1,3}[a-c]{0,2}x$"})", extra, 12, {0, 1, 3});
    const int grouped = check_reachable_states(R"({"type": "string", "pattern": "^([a-c]{2,4}[.-]){0,3}[0-9]{1,4}$"})",
                                               extra, 10, {0, 2, 5});
    const int email = check_reachable_states(R"({"type": "string", "format": "email"})", extra, 9, {0, 2, 5, 9});
    std::printf("states checked: %d disjoint, %d overlapping, %d grouped, %d email\n", disjoint, overlapping, grouped,
                email);
    EXPECT_GT(disjoint, 25);
    EXPECT_GT(overlapping, 10);
    EXPECT_GT(grouped, 15);
    EXPECT_GT(email, 120);
}

// The real vocabulary: random generations (tokens drawn uniformly from the mask, so long tokens fill the strings
// quickly and the last characters of each bound are reached), every step against the full walk.
TEST(BoundedStrings, RealVocabularyGenerationsMatchFullWalks) {
    auto file = GgufFile::open(DSV4_SHARED_DIR "/fixtures/tokenizer/deepseek_v3/vocab.gguf");
    if (!file.ok()) GTEST_SKIP() << file.error();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.error();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const char* kPatterns = R"({"type": "object", "properties": {
        "contact": {"type": "string", "format": "email"},
        "code": {"type": "string", "pattern": "^[A-Za-z]{2,12}[a-f0-9]{0,6}-\\d{1,8}$"}},
        "required": ["contact", "code"], "additionalProperties": false})";
    int steps = 0, values = 0;
    // The patterns' walks are the slow ones (most words fit a label): fewer generations, one budget.
    for (const char* text : {kSchema, kPatterns}) {
        const bool patterns = text == kPatterns;
        auto tg = std::make_shared<TokenGrammar>(schema_grammar(text), trie);
        GrammarRunner run(tg->grammar());
        std::mt19937 rng(7);
        for (int gen = 0; gen < (patterns ? 3 : 6); ++gen) {
            GrammarState s = run.initial();
            for (int step = 0; step < 40 && !run.finished(s); ++step, ++steps) {
                expect_masks_equal(*tg, s, patterns ? std::vector<int32_t>{5} : std::vector<int32_t>{3, 12},
                                   "generation " + std::to_string(gen) + " step " + std::to_string(step));
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
    }
    std::printf("%d steps checked, %d values complete\n", steps, values);
    EXPECT_GT(steps, 90);
}

// From `start` (the opening quote and one item), 39 more items of a 40-item bound one at a time: every position's
// mask comes from the cache without a walk, a 10-item token is allowed while 10 items still fit, `leave` (3 items,
// then the bytes that end the string or repeat) while 3 fit, `close` (the byte after the last item) always; at
// the bound only `close` is.
void expect_positions_share_one_mask(const char* schema_text, const char* start, const char* leave, char close) {
    const std::vector<std::string> vocab = byte_vocab({"abcdefghij", leave});
    auto tg = std::make_shared<TokenGrammar>(schema_grammar(schema_text), std::make_shared<TokenTrie>(vocab));
    GrammarRunner run(tg->grammar());
    GrammarState s = run.initial();
    ASSERT_TRUE(run.advance(s, start));
    (void)tg->byte_mask(s);
    const auto misses = tg->cache_stats().misses;
    const int32_t ten = static_cast<int32_t>(vocab.size()) - 2, three = ten + 1;
    for (int i = 1; i < 40; ++i) {
        const TokenMask m = *tg->byte_mask(s);
        EXPECT_EQ(mask_test(m, ten), i <= 30) << "after " << i << " items";
        EXPECT_EQ(mask_test(m, three), i <= 37) << "after " << i << " items";
        EXPECT_TRUE(mask_test(m, close + 1));
        ASSERT_TRUE(run.advance(s, "a"));
    }
    EXPECT_EQ(tg->cache_stats().misses, misses);
    TokenMask full;
    tg->compute_mask(s, full);  // 40 items: only the closing byte
    EXPECT_EQ(*tg->byte_mask(s), full);
    EXPECT_FALSE(mask_test(full, 'a' + 1));
    EXPECT_TRUE(mask_test(full, close + 1));
}

// The positions of a long string share the mask of its unbounded form: no walk after the first character.
TEST(BoundedStrings, PositionsOfALongStringShareOneCachedMask) {
    expect_positions_share_one_mask(R"({"type": "string", "maxLength": 40})", "\"a", "abc\"", '"');
}

// The same for a pattern's repeat of one byte set followed by another byte ([a-z]{1,40}-[0-9]).
TEST(BoundedStrings, PositionsOfALongByteRepeatShareOneCachedMask) {
    expect_positions_share_one_mask(R"({"type": "string", "pattern": "^[a-z]{1,40}-[0-9]$"})", "\"a", "abc-1", '-');
}

}  // namespace
