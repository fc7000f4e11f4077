// Budget-aware masks: the distance from a grammar state to a complete value (runtime/grammar_distance.h) is
// the exact shortest completion in bytes over a vocabulary of single bytes, and over a vocabulary with longer
// tokens an upper bound on the shortest in tokens that some token always lowers by one; under a tight budget the
// mask holds exactly the tokens after which the value and the end token still fit, under an ample one it is the
// mask without a budget, bit for bit; random generations under any budget at or above the minimum end in time.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"
#include "util/grammar_fixtures.h"
#include "runtime/tool_grammar.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

using namespace dsv4;
using test::byte_vocab;
using test::schema_grammar;
using ojson = nlohmann::ordered_json;

namespace {

constexpr int32_t kEos = 0;  // the empty entry: a special token outside the byte grammar

// Token 0 the end token, 1-256 every single byte, then `extra`.
Grammar tool_grammar() {
    auto g = compile_tool_calls({{"book", ojson::parse(R"({"type": "object", "properties": {
        "room": {"type": "string", "pattern": "^R\\d{3}$"}, "nights": {"type": "integer", "minimum": 1, "maximum": 14},
        "guest": {"type": "string"}}, "required": ["room", "nights"]})")}});
    EXPECT_TRUE(g.ok()) << g.error();
    return g.ok() ? std::move(*g) : Grammar{};
}

std::vector<Grammar> grammars() {
    std::vector<Grammar> out;
    out.push_back(schema_grammar(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["name", "n"], "additionalProperties": false})"));
    out.push_back(schema_grammar(R"({"type": "object", "properties": {"opt": {"type": "boolean"}, "tags": {"type": "array",
        "items": {"enum": ["x", "yz"]}, "minItems": 2}, "s": {"type": "string", "minLength": 3}}, "required": ["tags", "s"]})"));
    out.push_back(schema_grammar(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}$"})"));
    out.push_back(json_object_grammar());
    out.push_back(schema_grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "number", "minimum": -5, "maximum": 5}, "next": {"anyOf": [{"$ref": "#/$defs/node"},
        {"type": "null"}]}}, "required": ["v", "next"], "additionalProperties": false}}})"));
    out.push_back(schema_grammar(R"({"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 1})"));
    out.push_back(tool_grammar());
    return out;
}

// The fewest tokens of `vocab` (end token aside) from `s` to an accepting state, by breadth-first search.
int32_t shortest(const Grammar& g, const GrammarState& s, const std::vector<std::string>& vocab, int32_t max_depth) {
    GrammarRunner run(g);
    std::vector<GrammarState> layer = {s};
    std::unordered_set<std::string> seen;
    std::string key;
    for (int32_t depth = 0; depth <= max_depth && !layer.empty(); ++depth) {
        std::vector<GrammarState> next;
        for (const GrammarState& st : layer) {
            if (run.accepting(st)) return depth;
            for (size_t t = 1; t < vocab.size(); ++t) {
                GrammarState n = st;
                if (!run.advance(n, vocab[t])) continue;
                n.key(key);
                if (seen.insert(key).second) next.push_back(std::move(n));
            }
        }
        layer = std::move(next);
    }
    return -1;
}

// A random byte path through the grammar: the states it visits (the start included).
std::vector<GrammarState> walk(const Grammar& g, uint64_t seed, int n) {
    GrammarRunner run(g);
    std::mt19937_64 rng(seed);
    std::vector<GrammarState> out = {run.initial()};
    for (int i = 0; i < n; ++i) {
        std::vector<GrammarState> nexts;
        for (int b = 0; b < 256; ++b) {
            GrammarState s;
            run.advance(out.back(), static_cast<uint8_t>(b), s);
            if (!s.dead()) nexts.push_back(std::move(s));
        }
        if (nexts.empty()) break;
        out.push_back(nexts[rng() % nexts.size()]);
    }
    return out;
}

TEST(GrammarDistance, RepresentativeStates) {
    auto tg = std::make_shared<TokenGrammar>(grammars()[0], std::make_shared<TokenTrie>(byte_vocab()));
    const GrammarDistance& d = tg->distance();
    ASSERT_TRUE(d.available());
    GrammarRunner run(tg->grammar());
    auto at = [&](std::string_view text) {
        GrammarState s = run.initial();
        EXPECT_TRUE(run.advance(s, text)) << text;
        return d.state(s);
    };
    EXPECT_EQ(at(""), 17);                          // {"name":"","n":0}
    EXPECT_EQ(at("{\"na"), 13);                     // me":"","n":0}
    EXPECT_EQ(at("{\"name\" :  \"ab"), 8);          // ","n":0}: whitespace is never needed
    EXPECT_EQ(at("{\"name\":\"\\"), 9);             // an escape: one more byte, then the quote
    EXPECT_EQ(at("{\"name\":\"\\u00"), 10);         // two hex digits
    EXPECT_EQ(at("{\"name\":\"\xe2\x82"), 9);       // a continuation byte, then the quote
    EXPECT_EQ(at("{\"name\":\"x\",\"n\":-"), 2);    // a digit, '}'
    EXPECT_EQ(at("{\"name\":\"x\",\"n\":12"), 1);
    EXPECT_EQ(at("{\"name\":\"x\",\"n\":12}"), 0);

    // Longer tokens shorten the bound: keys and markup are spelled in the fewest tokens.
    auto tok = std::make_shared<TokenGrammar>(grammars()[0], std::make_shared<TokenTrie>(byte_vocab({"\"name\":", ",\"n\":", "\"\""})));
    GrammarRunner r2(tok->grammar());
    GrammarState s = r2.initial();
    EXPECT_EQ(tok->distance().state(s), 7);  // { "name": " " ,"n": 0 } (a string's quotes are bytes of its own)
    EXPECT_EQ(tok->distance().spell(",\"n\":0}"), 3);

    // min_items, minLength, a pattern, the tool-call markup.
    auto gs = grammars();
    auto whole = [&](size_t i) {
        auto t = std::make_shared<TokenGrammar>(gs[i], std::make_shared<TokenTrie>(byte_vocab()));
        return t->distance().state(GrammarRunner(t->grammar()).initial());
    };
    EXPECT_EQ(whole(1), static_cast<int32_t>(std::string(R"({"tags":["x","x"],"s":"aaa"})").size()));
    EXPECT_EQ(whole(2), static_cast<int32_t>(std::string(R"("AB-12")").size()));
    EXPECT_EQ(whole(3), 2);  // {}
    EXPECT_EQ(whole(4), static_cast<int32_t>(std::string(R"({"v":0,"next":null})").size()));
    EXPECT_EQ(whole(5), static_cast<int32_t>(std::string(R"(["2000-01-01"])").size()));
}

// Over single bytes the distance is the shortest completion; with longer tokens it bounds the shortest from
// above and some token always brings it one closer (what keeps a budgeted generation finishing).
TEST(GrammarDistance, ExactOverBytesConsistentOverTokens) {
    const std::vector<std::string> bytes = byte_vocab();
    const std::vector<std::string> tokens = byte_vocab({"{\"", "\":", "\",\"", "\"}", "name", "\"name\":", ",\"n\":",
                                                        "12", "null", "<\xef\xbd\x9c" "DSML\xef\xbd\x9c", "parameter",
                                                        "invoke", "\">\n", "</", "tags\":[\"", "\"]", "\"R", "true"});
    const std::vector<Grammar> gs = grammars();
    for (size_t i = 0; i < gs.size(); ++i) {
        auto by_byte = std::make_shared<TokenGrammar>(gs[i], std::make_shared<TokenTrie>(bytes));
        auto by_token = std::make_shared<TokenGrammar>(gs[i], std::make_shared<TokenTrie>(tokens));
        GrammarRunner run(gs[i]);
        for (uint64_t seed = 0; seed < 3; ++seed) {
            const std::vector<GrammarState> path = walk(gs[i], 100 * i + seed, 16);
            for (size_t k = 0; k < path.size(); k += (i == 6 ? 5 : 1)) {
                const GrammarState& s = path[k];
                const int32_t d = by_byte->distance().state(s);
                ASSERT_LT(d, GrammarDistance::kUnreachable) << "grammar " << i << " step " << k;
                EXPECT_EQ(d, shortest(gs[i], s, bytes, d + 1)) << "grammar " << i << " step " << k;
                const int32_t dt = by_token->distance().state(s);
                EXPECT_LE(dt, d);
                const int32_t fewest = shortest(gs[i], s, tokens, dt);
                EXPECT_TRUE(fewest >= 0 && fewest <= dt) << "grammar " << i << " step " << k;
                EXPECT_EQ(dt == 0, run.accepting(s)) << "grammar " << i << " step " << k;
                if (dt == 0) continue;
                int32_t best = GrammarDistance::kUnreachable;
                for (size_t t = 1; t < tokens.size(); ++t) {
                    GrammarState n = s;
                    if (run.advance(n, tokens[t])) best = std::min(best, by_token->distance().state(n));
                }
                EXPECT_LE(best, dt - 1) << "grammar " << i << " step " << k;
            }
        }
    }
}

std::vector<int32_t> allowed(std::span<const uint64_t> mask, size_t n) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < static_cast<int32_t>(n); ++i)
        if (mask_test(mask, i)) out.push_back(i);
    return out;
}

// A tight budget allows exactly the tokens after which a whole value and the end token fit; an ample one
// changes nothing.
TEST(TokenMaskBudget, TightAllowsOnlyFinishingAmpleChangesNothing) {
    const std::vector<std::string> vocab = byte_vocab({"\",\"n\":", "\"}", "abc", "\",\"n\":1}", "12", "\"x"});
    auto tg = std::make_shared<TokenGrammar>(grammars()[0], std::make_shared<TokenTrie>(vocab));
    GrammarRunner run(tg->grammar());
    const std::string prefix = "{\"name\":\"ab";
    GrammarMatcher m(GrammarConstraint{tg}, {kEos});
    GrammarMatcher plain(GrammarConstraint{tg}, {kEos});
    for (char c : prefix) {
        ASSERT_TRUE(m.accept(1 + static_cast<uint8_t>(c), std::string(1, c)).ok());
        ASSERT_TRUE(plain.accept(1 + static_cast<uint8_t>(c), std::string(1, c)).ok());
    }
    GrammarState here = run.initial();
    ASSERT_TRUE(run.advance(here, prefix));
    const int32_t d = tg->distance().state(here);
    EXPECT_EQ(d, 8);  // " ,"n": 0 }: the bound spells the key on its own, not with the string's quote
    const std::vector<int32_t> unlimited = allowed(plain.mask(), vocab.size());
    for (int64_t left = 1; left <= d + 3; ++left) {
        // By hand: the byte-accepted tokens whose state after is at most left - 2 away (one draw for EOS).
        std::vector<int32_t> expect;
        for (int32_t t = 1; t < static_cast<int32_t>(vocab.size()); ++t) {
            GrammarState s = here;
            if (run.advance(s, vocab[static_cast<size_t>(t)]) && tg->distance().state(s) <= left - 2) expect.push_back(t);
        }
        if (expect.empty()) expect = unlimited;  // below the minimum: the mask without the budget
        EXPECT_EQ(allowed(m.mask(left), vocab.size()), expect) << "left " << left;
    }
    // With d + 1 draws left only progress fits: the quote and the closing tokens, not another letter.
    const std::vector<int32_t> tight = allowed(m.mask(d + 1), vocab.size());
    auto has = [&](const std::vector<int32_t>& v, int32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); };
    EXPECT_TRUE(has(tight, 1 + '"'));
    EXPECT_TRUE(has(tight, 257) && has(tight, 260));
    EXPECT_FALSE(has(tight, 1 + 'x') || has(tight, 259) || has(tight, 262));
    EXPECT_TRUE(has(unlimited, 1 + 'x'));

    // Ample budgets: every mask along random generations is the unbudgeted one, bit for bit.
    const std::vector<Grammar> gs = grammars();
    for (size_t i = 0; i < gs.size(); ++i) {
        auto g = std::make_shared<TokenGrammar>(gs[i], std::make_shared<TokenTrie>(vocab));
        for (uint64_t seed = 0; seed < 4; ++seed) {
            GrammarMatcher a(GrammarConstraint{g}, {kEos}), b(GrammarConstraint{g}, {kEos});
            std::mt19937_64 rng(seed);
            for (int step = 0; step < 40; ++step) {
                const std::vector<int32_t> ma = allowed(a.mask(100000), vocab.size());
                ASSERT_EQ(ma, allowed(b.mask(), vocab.size())) << "grammar " << i << " step " << step;
                const int32_t t = ma[rng() % ma.size()];
                if (t == kEos) break;
                ASSERT_TRUE(a.accept(t, vocab[static_cast<size_t>(t)]).ok());
                ASSERT_TRUE(b.accept(t, vocab[static_cast<size_t>(t)]).ok());
            }
        }
    }
}

// Random generations (uniform over the mask: random weights) under every budget from the minimum up end with
// the end token within the budget, with a value the grammar accepts; so do those behind a required trigger.
TEST(TokenMaskBudget, RandomGenerationsFinishWithinTheBudget) {
    const std::vector<std::string> vocab = byte_vocab({"{\"", "\":", "\",\"", "\"}", "abc", "12", "null", "\"name\":",
                                                       "</", "think", ">", "hmm", "<\xef\xbd\x9c" "DSML\xef\xbd\x9c", "\">\n"});
    const std::vector<Grammar> gs = grammars();
    for (size_t i = 0; i < gs.size(); ++i) {
        auto tg = std::make_shared<TokenGrammar>(gs[i], std::make_shared<TokenTrie>(vocab));
        for (const bool triggered : {false, true}) {
            const GrammarConstraint c = triggered ? GrammarConstraint{tg, "</think>", true, ""} : GrammarConstraint{tg};
            const int64_t need = constraint_min_tokens(c, true);
            GrammarRunner run(tg->grammar());
            EXPECT_EQ(need, tg->distance().state(run.initial()) + 1 + (triggered ? tg->distance().spell("</think>") : 0));
            for (uint64_t seed = 0; seed < 40; ++seed) {
                const int64_t budget = need + static_cast<int64_t>(seed % 8);
                GrammarMatcher m(c, {kEos});
                std::mt19937_64 rng(seed);
                std::string text;
                bool ended = false;
                for (int64_t used = 0; used < budget && !ended; ++used) {
                    const std::vector<int32_t> ids = allowed(m.mask(budget - used), vocab.size());
                    ASSERT_FALSE(ids.empty());
                    int32_t t = ids[rng() % ids.size()];
                    for (int tries = 0; !m.accept(t, vocab[static_cast<size_t>(t)]).ok(); ++tries) {
                        ASSERT_LT(tries, 16);  // a trigger completed too late: banned and drawn again
                        m.ban(t);
                        const std::vector<int32_t> left = allowed(m.mask(budget - used), vocab.size());
                        ASSERT_FALSE(left.empty());
                        t = left[rng() % left.size()];
                    }
                    if (t == kEos) ended = true;
                    else text += vocab[static_cast<size_t>(t)];
                }
                ASSERT_TRUE(ended) << "grammar " << i << " budget " << budget << ": " << text;
                std::string value = text;
                if (triggered) {
                    const size_t at = text.find("</think>");
                    ASSERT_NE(at, std::string::npos) << text;
                    value = text.substr(at + 8);
                }
                EXPECT_TRUE(GrammarRunner(tg->grammar()).matches(value)) << "grammar " << i << ": " << text;
            }
        }
    }
}

// A vocabulary that lacks a single byte gives no bound: budgets change nothing and no minimum is claimed.
TEST(TokenMaskBudget, NoBoundWithoutEverySingleByte) {
    std::vector<std::string> vocab = byte_vocab({"ab"});
    vocab[1 + 0xFF].clear();
    auto tg = std::make_shared<TokenGrammar>(grammars()[0], std::make_shared<TokenTrie>(vocab));
    EXPECT_FALSE(tg->distance().available());
    EXPECT_EQ(constraint_min_tokens(GrammarConstraint{tg}, true), 0);
    GrammarMatcher a(GrammarConstraint{tg}, {kEos}), b(GrammarConstraint{tg}, {kEos});
    EXPECT_EQ(allowed(a.mask(2), vocab.size()), allowed(b.mask(), vocab.size()));
}

// The real vocabulary has every byte as a token, and the forced tool call of the slow test fits its budget.
TEST(TokenMaskBudget, DeepSeekVocabularyGivesABound) {
    auto file = GgufFile::open(DSV4_SHARED_DIR "/fixtures/tokenizer/deepseek_v3/vocab.gguf");
    if (!file.ok()) GTEST_SKIP() << file.error();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.error();
    auto trie = TokenTrie::from_tokenizer(**tok);
    auto tg = std::make_shared<TokenGrammar>(tool_grammar(), trie);
    ASSERT_TRUE(tg->distance().available());
    // The opening the server's prompt ends with for a forced call (server/openai_request.cpp).
    const std::string prefix = std::string(chat::kToolCallsStart) + ">\n" + std::string(chat::kInvokeStart) + " name=\"";
    const int64_t need = constraint_min_tokens(GrammarConstraint{tg, "", true, prefix}, true);
    std::printf("forced call of 'book': at least %lld tokens\n", static_cast<long long>(need));
    EXPECT_GT(need, 10);
    EXPECT_LT(need, 96);
}

}  // namespace
