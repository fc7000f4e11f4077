// The byte grammar for constrained decoding: JSON schemas compiled into it accept exactly the values they
// should (hand-written accept / reject strings), unsupported schemas fail naming the keyword, and token masks
// over hand-made vocabularies allow exactly the tokens whose bytes the grammar accepts.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"
#include "runtime/sampler.h"
#include "runtime/token_mask.h"
#include "util/grammar_fixtures.h"

using namespace dsv4;
using test::schema_grammar;
using ojson = nlohmann::ordered_json;

namespace {

bool accepts(const Grammar& g, std::string_view text) {
    GrammarRunner r(g);
    return r.matches(text);
}

std::string schema_error(const char* text) {
    auto g = compile_json_schema(ojson::parse(text));
    return g.ok() ? std::string("(compiled)") : g.error();
}

TEST(Grammar, JsonObjectMode) {
    const Grammar g = json_object_grammar();
    for (const char* ok : {"{}", "{\"a\":1}", "{ \"a\" : [1, 2.5e3, -0, true, null, \"x\"] }",
                           "{\"k\":{\"n\":{}},\"s\":\"\\u00e9\\n\\\"\"}", "{\"\xc3\xa9\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}",
                           "{\"a\":[],\"b\":[[]]}"})
        EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {"", "[]", "1", "\"s\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":01}",
                            "{\"a\":1.}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\x01\"}",
                            "{\"a\":\"\xc3\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xc0\xaf\"}", " {}", "{} ",
                            "{\"a\":1}}", "{     \"a\":1}"})
        EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Grammar, ObjectPropertiesInOrderWithRequired) {
    const Grammar g = schema_grammar(R"({"type": "object", "properties": {"name": {"type": "string"},
        "age": {"type": "integer"}, "nick": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"], "additionalProperties": false})");
    for (const char* ok : {R"({"name":"a","tags":[]})", R"({"name":"a","age":3,"tags":["x","y"]})",
                           R"({"name":"a","age":-12,"nick":"n","tags":["x"]})", R"({"name": "a", "tags": [ "x" ]})"})
        EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {R"({})", R"({"name":"a"})", R"({"tags":[],"name":"a"})", R"({"name":"a","tags":[1]})",
                            R"({"name":"a","age":1.5,"tags":[]})", R"({"name":"a","tags":[],"extra":1})",
                            R"({"name":"a","name":"b","tags":[]})", R"({"nam":"a","tags":[]})",
                            R"({"name":"a","age":1234567890123456,"tags":[]})"})
        EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Grammar, EnumConstAnyOfAndTypeLists) {
    const Grammar g = schema_grammar(R"({"type": "object", "properties": {
        "color": {"enum": ["red", "green", 3, null]}, "v": {"const": {"x": [1, "é"]}},
        "n": {"type": ["number", "null"]}, "u": {"anyOf": [{"type": "boolean"}, {"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false},
        {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": false}]}},
        "required": ["color", "v", "n", "u"]})");
    for (const char* ok : {R"({"color":"red","v":{"x":[1,"é"]},"n":null,"u":true})",
                           R"({"color":3,"v":{"x":[1,"é"]},"n":2.5,"u":{"a":1}})",
                           R"({"color":null,"v":{"x":[1,"é"]},"n":-1e+10,"u":{"b":"z"}})"})
        EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {R"({"color":"blue","v":{"x":[1,"é"]},"n":null,"u":true})",
                            R"({"color":"red","v":{"x":[1]},"n":null,"u":true})",
                            R"({"color":"red","v":{"x":[1,"é"]},"n":"1","u":true})",
                            R"({"color":"red","v":{"x":[1,"é"]},"n":null,"u":{"a":"1"}})",
                            R"({"color":"red","v":{"x":[1,"é"]},"n":null,"u":{"a":1,"b":"z"}})"})
        EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Grammar, StringFormats) {
    const Grammar g = schema_grammar(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "uuid"}},
        "required": ["d", "t", "u"], "additionalProperties": false})");
    EXPECT_TRUE(accepts(g, R"({"d":"2024-02-28","t":"1999-12-01T23:59:59Z","u":"123e4567-e89b-12d3-a456-426614174000"})"));
    for (const char* bad : {R"({"d":"2024-13-01","t":"1999-12-01T23:59:59Z","u":"123e4567-e89b-12d3-a456-426614174000"})",
                            R"({"d":"2024-02-30","t":"1999-12-01T23:59:59Z","u":"123e4567-e89b-12d3-a456-426614174000"})",
                            R"({"d":"2024-02-01","t":"1999-12-01T24:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000"})",
                            R"({"d":"2024-02-01","t":"1999-12-01 10:00:00Z","u":"123e4567-e89b-12d3-a456-426614174000"})",
                            R"({"d":"2024-02-01","t":"1999-12-01T10:00:00Z","u":"123e4567e89b12d3a456426614174000"})"})
        EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Grammar, NullableTypeListsKeepTheirKeywords) {
    const Grammar g = schema_grammar(R"({"type": ["object", "null"], "properties": {"a": {"type": ["array", "null"],
        "items": {"type": "integer"}, "maxItems": 1}}, "required": ["a"], "additionalProperties": false})");
    EXPECT_TRUE(accepts(g, "null"));
    EXPECT_TRUE(accepts(g, R"({"a":null})"));
    EXPECT_TRUE(accepts(g, R"({"a":[1]})"));
    EXPECT_FALSE(accepts(g, R"({"a":[1,2]})"));
    EXPECT_FALSE(accepts(g, R"({})"));
}

TEST(Grammar, RecursiveRefsAndArrayBounds) {
    const Grammar g = schema_grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
        "maxItems": 2}}, "required": ["v", "kids"], "additionalProperties": false}}})");
    EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[]})"));
    EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"));
    EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":2,"kids":[]},{"v":2,"kids":[]}]})"));
    EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"v":2}]})"));

    const Grammar r = schema_grammar(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["next"], "additionalProperties": false})");
    EXPECT_TRUE(accepts(r, R"({"next":{"next":{"next":null}}})"));
    EXPECT_FALSE(accepts(r, R"({"next":{}})"));

    const Grammar a = schema_grammar(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
    EXPECT_FALSE(accepts(a, "[1]"));
    EXPECT_TRUE(accepts(a, "[1,2]"));
    EXPECT_TRUE(accepts(a, "[1,2,3]"));
    EXPECT_FALSE(accepts(a, "[1,2,3,4]"));
    EXPECT_TRUE(accepts(a, "[1, 2]"));
}

TEST(Grammar, RootScalarsEndAnywhereTheyMay) {
    const Grammar n = schema_grammar(R"({"type": "number"})");
    EXPECT_TRUE(accepts(n, "12"));
    EXPECT_TRUE(accepts(n, "-0.5E-3"));
    EXPECT_FALSE(accepts(n, "-"));
    EXPECT_FALSE(accepts(n, "1e"));
    EXPECT_TRUE(accepts(n, "999999999999999.5e99"));
    EXPECT_FALSE(accepts(n, "1e100"));  // beyond a double for some mantissas: exponents stop at 2 digits
    const Grammar s = schema_grammar(R"({"type": "string"})");
    EXPECT_TRUE(accepts(s, "\"\""));
    EXPECT_FALSE(accepts(s, "\"a"));
}

TEST(Grammar, UnsupportedSchemasNameTheKeyword) {
    EXPECT_NE(schema_error(R"({"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}})")
                  .find("#/properties/d/format: format 'hostname' is not supported"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "integer", "multipleOf": 3})").find("'multipleOf'"), std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "integer", "format": "int32"})").find("'format' does not apply to type 'integer'"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "date"})").find("unknown type 'date'"), std::string::npos);
    EXPECT_NE(schema_error(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
    EXPECT_NE(schema_error(R"({"$ref": "https://example.com/s.json"})").find("only references into this schema"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "object", "required": ["x"]})").find("'x', which is not in 'properties'"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "object", "properties": {"self": {"$ref": "#"}}, "required": ["self"]})")
                  .find("no finite value"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})")
                  .find("cycle"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("minItems is above maxItems"),
              std::string::npos);
    EXPECT_NE(schema_error(R"(false)").find("accepts no value"), std::string::npos);
    std::string deep = "{\"type\": \"string\"}";
    for (int i = 0; i < 5000; ++i) deep = "{\"type\": \"array\", \"items\": " + deep + "}";
    EXPECT_NE(schema_error(deep.c_str()).find("nests deeper than 64 levels"), std::string::npos);
}

// A hand-made vocabulary: the mask holds exactly the tokens whose bytes the grammar accepts from a state.
TEST(TokenMask, HandMadeVocabulary) {
    const std::vector<std::string> vocab = {"{", "}", "{\"", "\"", "a", "\":", " ", "1", "12", "1,", "x\"", "",
                                            "\"a\"", "\"a\":1}", "ab", "\xc3", "\xa9"};
    auto trie = std::make_shared<TokenTrie>(vocab);
    auto tg = std::make_shared<TokenGrammar>(schema_grammar(R"({"type": "object", "properties": {"a": {"type": "integer"},
        "b": {"type": "string"}}, "required": ["a"], "additionalProperties": false})"), trie);
    const int32_t kEos = 11;  // the empty entry: a special token outside the byte grammar
    GrammarMatcher m(GrammarConstraint{tg}, {kEos});
    auto allowed = [&] {
        std::vector<std::string> out;
        auto mask = m.mask();
        for (int32_t i = 0; i < static_cast<int32_t>(vocab.size()); ++i)
            if (mask_test(mask, i)) out.push_back(i == kEos ? "<eos>" : vocab[static_cast<size_t>(i)]);
        return out;
    };
    EXPECT_EQ(allowed(), (std::vector<std::string>{"{", "{\""}));
    ASSERT_TRUE(m.accept(0, "{").ok());
    EXPECT_EQ(allowed(), (std::vector<std::string>{"\"", " ", "\"a\"", "\"a\":1}"}));
    EXPECT_FALSE(m.accept(1, "}").ok());  // "a" is required
    ASSERT_TRUE(m.accept(3, "\"").ok());
    EXPECT_EQ(allowed(), (std::vector<std::string>{"a"}));
    ASSERT_TRUE(m.accept(4, "a").ok());
    ASSERT_TRUE(m.accept(5, "\":").ok());
    EXPECT_EQ(allowed(), (std::vector<std::string>{" ", "1", "12", "1,"}));
    ASSERT_TRUE(m.accept(8, "12").ok());
    EXPECT_EQ(allowed(), (std::vector<std::string>{"}", " ", "1", "12", "1,"}));  // "1," goes on with key "b"
    ASSERT_TRUE(m.accept(1, "}").ok());
    EXPECT_TRUE(m.finished());
    EXPECT_EQ(allowed(), (std::vector<std::string>{"<eos>"}));
    EXPECT_TRUE(m.accept(kEos, "").ok());
}

TEST(TokenMask, Utf8SplitAcrossTokens) {
    const std::vector<std::string> vocab = {"\"", "\xc3", "\xa9", "\xa9\"", "e"};
    auto tg = std::make_shared<TokenGrammar>(schema_grammar(R"({"type": "string"})"), std::make_shared<TokenTrie>(vocab));
    GrammarMatcher m(GrammarConstraint{tg}, {});
    ASSERT_TRUE(m.accept(0, "\"").ok());
    auto mask = m.mask();
    EXPECT_TRUE(mask_test(mask, 0) && mask_test(mask, 1) && mask_test(mask, 4));
    EXPECT_FALSE(mask_test(mask, 2) || mask_test(mask, 3));  // a lone continuation byte
    ASSERT_TRUE(m.accept(1, "\xc3").ok());
    mask = m.mask();
    EXPECT_FALSE(mask_test(mask, 0) || mask_test(mask, 1) || mask_test(mask, 4));
    EXPECT_TRUE(mask_test(mask, 2) && mask_test(mask, 3));
}

// A trigger: free text (no end token) until "</think>", then the value; a token that completes the trigger
// with bytes the value cannot start with is refused, one whose bytes start the value is taken.
TEST(TokenMask, TriggeredConstraint) {
    const std::vector<std::string> vocab = {"", "hmm", "</", "think", ">", ">{", ">\n", "{", "}", "\""};
    auto tg = std::make_shared<TokenGrammar>(json_object_grammar(), std::make_shared<TokenTrie>(vocab));
    GrammarMatcher m(GrammarConstraint{tg, "</think>", true, ""}, {0});
    EXPECT_FALSE(m.active());
    auto mask = m.mask();
    EXPECT_FALSE(mask_test(mask, 0));  // no end before the value
    for (int32_t i = 1; i < 10; ++i) EXPECT_TRUE(mask_test(mask, i)) << i;
    EXPECT_FALSE(m.accept(0, "").ok());
    ASSERT_TRUE(m.accept(1, "hmm").ok());
    ASSERT_TRUE(m.accept(2, "</").ok());
    ASSERT_TRUE(m.accept(3, "think").ok());
    EXPECT_FALSE(m.accept(6, ">\n").ok());  // the value cannot start with a newline
    m.ban(6);
    EXPECT_FALSE(mask_test(m.mask(), 6));
    ASSERT_TRUE(m.accept(5, ">{").ok());
    EXPECT_TRUE(m.active());
    mask = m.mask();
    EXPECT_TRUE(mask_test(mask, 8) && mask_test(mask, 9));
    EXPECT_FALSE(mask_test(mask, 7) || mask_test(mask, 0) || mask_test(mask, 1));
    ASSERT_TRUE(m.accept(8, "}").ok());
    EXPECT_TRUE(m.finished());
    mask = m.mask();
    EXPECT_TRUE(mask_test(mask, 0));
    for (int32_t i = 1; i < 10; ++i) EXPECT_FALSE(mask_test(mask, i)) << i;

    // Not required (a tool-call block under auto): the text may end before the trigger.
    GrammarMatcher opt(GrammarConstraint{tg, "</think>", false, ""}, {0});
    EXPECT_TRUE(mask_test(opt.mask(), 0));
    EXPECT_TRUE(opt.accept(0, "").ok());
}

// The sampler under a mask: only allowed tokens are drawn (greedy takes the best allowed one), tokens past the
// mask's end are banned, and the reported logprob is the model's own (the unmasked distribution).
TEST(TokenMask, SamplerDrawsOnlyAllowedTokens) {
    std::vector<float> logits(200);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 101) / 10.0f;
    TokenMask mask(2, 0);  // covers tokens 0-127; 128-199 are past it
    for (int32_t t : {3, 17, 64, 100}) mask_set(mask, t);
    SamplingParams greedy;
    greedy.temperature = 0;
    Sampler g(greedy);
    auto r = g.sample(logits, {}, mask);
    ASSERT_TRUE(r.ok()) << r.error();
    int32_t best = 3;
    for (int32_t t : {17, 64, 100})
        if (logits[static_cast<size_t>(t)] > logits[static_cast<size_t>(best)]) best = t;
    EXPECT_EQ(r->token, best);
    auto plain = Sampler(greedy).sample(logits, {});
    ASSERT_TRUE(plain.ok());
    double lse = 0;
    for (float x : logits) lse += std::exp(static_cast<double>(x));
    EXPECT_NEAR(r->logprob, logits[static_cast<size_t>(best)] - std::log(lse), 1e-4);

    SamplingParams sp;
    sp.seed = 9;
    Sampler s(sp);
    std::map<int32_t, int> seen;
    for (int i = 0; i < 400; ++i) {
        auto d = s.sample(logits, {}, mask);
        ASSERT_TRUE(d.ok()) << d.error();
        ++seen[d->token];
    }
    for (const auto& [t, n] : seen) EXPECT_TRUE(t == 3 || t == 17 || t == 64 || t == 100) << t << " drawn " << n << " times";
    EXPECT_EQ(seen.size(), 4u);  // every allowed token has a fair chance

    TokenMask none(4, 0);
    auto e = Sampler(sp).sample(logits, {}, none);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("grammar allows"), std::string::npos);
}

}  // namespace
