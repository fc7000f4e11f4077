// The schema keywords beyond structure: pattern, minLength / maxLength, number bounds, oneOf, allOf, format
// email. For each, hand-written values the grammar must accept and must refuse (byte by byte through the
// Grammar API), errors for what stays unsupported, and random walks through the grammar whose values an
// independent validator (tests/util/schema_check.h) must accept.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"
#include "util/schema_check.h"

using namespace dsv4;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

Grammar schema(const std::string& text) {
    auto g = compile_json_schema(ojson::parse(text));
    EXPECT_TRUE(g.ok()) << g.error() << "\n" << text;
    return g.ok() ? std::move(*g) : Grammar{};
}

std::string schema_error(const std::string& text) {
    auto g = compile_json_schema(ojson::parse(text));
    return g.ok() ? std::string("(compiled)") : g.error();
}

void expect_values(const std::string& s, std::initializer_list<const char*> ok, std::initializer_list<const char*> bad) {
    const Grammar g = schema(s);
    for (const char* v : ok) EXPECT_TRUE(GrammarRunner(g).matches(v)) << s << " should accept " << v;
    for (const char* v : bad) EXPECT_FALSE(GrammarRunner(g).matches(v)) << s << " should refuse " << v;
}

std::string str_schema(const std::string& pattern) { return json{{"type", "string"}, {"pattern", pattern}}.dump(); }

TEST(GrammarKeywords, PatternLiteralsClassesQuantifiers) {
    expect_values(str_schema("^[A-Z][a-z]{2,4}$"), {R"("Abc")", R"("Abcde")"}, {R"("abc")", R"("Ab")", R"("Abcdef")", R"("ABC")"});
    expect_values(str_schema("^\\d{3}-\\d{4}$"), {R"("555-1234")"}, {R"("5551234")", R"("55-1234")", R"("555-12345")"});
    expect_values(str_schema("^(cat|dog)s?$"), {R"("cat")", R"("dogs")"}, {R"("cow")", R"("catss")", R"("")"});
    expect_values(str_schema("^[^0-9]+$"), {R"("ab")", "\"\xc3\xa9\"", R"("\"")"}, {R"("a1")", R"("")"});
    expect_values(str_schema("^a.c$"), {R"("abc")", "\"a\xe2\x82\xac" "c\""}, {R"("a\nc")", R"("ac")"});
    expect_values(str_schema("^\\w+@\\w+$"), {R"("a_1@b")"}, {R"("a-1@b")", R"("@b")"});
    expect_values(str_schema("^x{2}y{1,}z{0,1}$"), {R"("xxy")", R"("xxyyyz")"}, {R"("xy")", R"("xxz")", R"("xxyzz")"});
    expect_values(str_schema("^(?:ab)+$"), {R"("ab")", R"("abab")"}, {R"("aba")", R"("")"});
    expect_values(str_schema("^[a-c-]$"), {R"("-")", R"("b")"}, {R"("d")"});
    expect_values(str_schema("^\\s$"), {R"(" ")", R"("\t")", R"("\n")", "\"\xc2\xa0\""}, {R"("a")"});
    expect_values(str_schema("^\\S$"), {R"("a")"}, {R"(" ")", R"("\n")", "\"\xe3\x80\x80\""});
    // Unicode ranges across encoded lengths: U+00E9 (2 bytes) to U+20AC (3 bytes).
    expect_values(str_schema("^[\\u00e9-\\u20ac]$"), {"\"\xc3\xa9\"", "\"\xe2\x82\xac\"", "\"\xdf\xbf\""},
                  {"\"\xc3\xa8\"", "\"\xe2\x82\xad\"", R"("e")"});
}

TEST(GrammarKeywords, PatternIsSearchedAndEscapedInJson) {
    // No anchors: anywhere in the string.
    expect_values(str_schema("ab"), {R"("ab")", R"("xaby")", R"("x\nab")"}, {R"("a b")", R"("")"});
    expect_values(str_schema("^ab"), {R"("abc")"}, {R"("cab")"});
    expect_values(str_schema("ab$"), {R"("cab")"}, {R"("abc")"});
    expect_values(str_schema("^a$|^b$"), {R"("a")", R"("b")"}, {R"("ab")"});
    // The regex sees decoded text: a quote, a backslash and a newline are written as JSON escapes.
    expect_values(str_schema("^\"\\\\\\n$"), {R"("\"\\\n")"}, {"\"\\\"\\\\\n\"", R"("\"\\n")"});
    expect_values(str_schema("^[<]$"), {R"("<")"}, {R"("\u003c")"});
    expect_values(str_schema("^$"), {R"("")"}, {R"(" ")"});
    expect_values(str_schema(""), {R"("")", R"("anything")"}, {R"(1)"});
    // Inside DSML markup a '<' is written escaped.
    JsonGrammarOptions opt;
    opt.no_lt_in_strings = true;
    auto g = compile_json_schema(ojson::parse(str_schema("^<$")), opt);
    ASSERT_TRUE(g.ok()) << g.error();
    EXPECT_TRUE(GrammarRunner(*g).matches(R"("\u003c")"));
    EXPECT_FALSE(GrammarRunner(*g).matches(R"("<")"));
}

TEST(GrammarKeywords, PatternErrorsNameTheConstruct) {
    const std::pair<const char*, const char*> cases[] = {
        {"(a)\\1", "a backreference at offset 4"},       {"a(?=b)", "a lookaround or named group '(?' at offset 2"},
        {"\\bword", "the word boundary \\b"},             {"a*?", "a lazy quantifier"},
        {"a^b", "'^' after the start"},                  {"a$b", "'$' before the end"},
        {"(a*)*", "a quantifier over an expression that can match the empty string"},
        {"[abc", "an unclosed '['"},                     {"(ab", "an unclosed '('"},
        {"a{2,1}", "m > n"},                             {"a{1001}", "above 1000"},
        {"\\p{L}", "the escape \\p"},                    {"[z-a]", "a range out of order"},
        {"*a", "a quantifier '*' with nothing before it"},
    };
    for (const auto& [pattern, what] : cases) {
        const std::string e = schema_error(json{{"type", "object"}, {"properties", {{"p", {{"type", "string"}, {"pattern", pattern}}}}}}.dump());
        EXPECT_NE(e.find("#/properties/p/pattern: "), std::string::npos) << pattern << ": " << e;
        EXPECT_NE(e.find(what), std::string::npos) << pattern << ": " << e;
    }
    EXPECT_NE(schema_error(R"({"type": "string", "pattern": "a", "maxLength": 3})").find("only one of"), std::string::npos);
}

TEST(GrammarKeywords, LengthsCountCodePoints) {
    expect_values(R"({"type": "string", "minLength": 2, "maxLength": 3})",
                  {R"("ab")", R"("abc")", "\"\xc3\xa9\xe2\x82\xac\"", "\"a\xf0\x9f\x98\x80\"", R"("\n\"")"},
                  {R"("a")", R"("abcd")", "\"\xc3\xa9\"", R"("")"});
    expect_values(R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"});
    expect_values(R"({"type": "string", "minLength": 1})", {R"("a")", R"("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")"}, {R"("")"});
    EXPECT_NE(schema_error(R"({"type": "string", "minLength": 3, "maxLength": 2})").find("minLength is above maxLength"), std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "string", "minLength": -1})").find("must be an integer"), std::string::npos);
}

TEST(GrammarKeywords, IntegerBoundsAreExact) {
    expect_values(R"({"type": "integer", "minimum": -12, "maximum": 305})",
                  {"-12", "-1", "0", "9", "10", "99", "100", "299", "305"}, {"-13", "306", "310", "1000", "-0", "007", "3050"});
    expect_values(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {"1", "9"}, {"0", "10", "-1"});
    expect_values(R"({"type": "integer", "minimum": 1.5})", {"2", "123456789012345"}, {"1", "0", "-5", "1234567890123456"});
    expect_values(R"({"type": "integer", "maximum": -3})", {"-3", "-100"}, {"-2", "0", "3"});
    // Every integer in a range, and nothing next to it.
    const Grammar g = schema(R"({"type": "integer", "minimum": -1234, "maximum": 5678})");
    for (int v = -1300; v <= 5800; ++v) EXPECT_EQ(GrammarRunner(g).matches(std::to_string(v)), v >= -1234 && v <= 5678) << v;
    EXPECT_NE(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("holds no integer"), std::string::npos);
}

TEST(GrammarKeywords, NumberBounds) {
    expect_values(R"({"type": "number", "minimum": -1, "maximum": 2})",
                  {"-1", "-0.5", "0", "0.25", "1.999", "2", "-0.001"}, {"-1.5", "2.5", "3", "-2", "2.0e0", "1.50"});
    expect_values(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})", {"0.5", "0.001"}, {"0", "1", "-0.5", "1.5"});
    expect_values(R"({"type": "number", "minimum": 0.5})", {"1", "1.5", "1000000"}, {"0.75", "0"});  // rounded inward to 1
    EXPECT_NE(schema_error(R"({"type": "number", "minimum": 0.1, "maximum": 0.9})").find("narrower than the integer steps"), std::string::npos);
    EXPECT_NE(schema_error(R"({"type": "number", "minimum": "0"})").find("must be a number"), std::string::npos);
}

TEST(GrammarKeywords, OneOfAllOfEmail) {
    expect_values(R"({"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})", {"5", R"("ab")"}, {R"("abc")", "true"});
    expect_values(R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}},
        "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}, "id": {"maximum": 9}}, "required": ["name"]}]})",
                  {R"({"id":3,"name":"x"})"}, {R"({"id":3})", R"({"id":10,"name":"x"})", R"({"id":0,"name":"x"})", R"({"name":"x"})"});
    expect_values(R"({"allOf": [{"type": ["integer", "string"]}, {"type": ["number", "null"]}]})", {"3"}, {"3.5", "null", R"("s")"});
    EXPECT_NE(schema_error(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})").find("have nothing in common"), std::string::npos);
    EXPECT_NE(schema_error(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}}]})")
                  .find("property 'b' of one allOf member is forbidden"),
              std::string::npos);
    EXPECT_NE(schema_error(R"({"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]})").find("'pattern' in more than one allOf member"),
              std::string::npos);
    expect_values(R"({"type": "string", "format": "email"})", {R"("a.b+c@ex-ample.co.uk")", R"("x@y.io")"},
                  {R"("a..b@x.io")", R"("a@x")", R"("@x.io")", R"("a@-x.io")", R"("a@x.i")", R"("a b@x.io")"});
}

// ---- random walks --------------------------------------------------------------------------------------------

// A random value of the grammar: byte by byte among the bytes that keep the state alive, closing bytes
// weighted up so values end; stops at an accepting state with probability 1/4 (always when nothing can follow).
bool random_walk(const Grammar& g, std::mt19937_64& rng, std::string& out) {
    GrammarRunner run(g);
    GrammarState s = run.initial(), next;
    out.clear();
    std::vector<std::pair<uint8_t, GrammarState>> live;
    for (int step = 0; step < 1000; ++step) {
        if (run.accepting(s) && (run.finished(s) || rng() % 4 == 0)) return true;
        live.clear();
        double total = 0;
        std::vector<double> w;
        for (int c = 0; c < 256; ++c) {
            run.advance(s, static_cast<uint8_t>(c), next);
            if (next.dead()) continue;
            const double weight = (c == '"' || c == ']' || c == '}') ? 40.0 : c >= 0x80 ? 0.2 : 1.0;
            live.push_back({static_cast<uint8_t>(c), next});
            w.push_back(weight);
            total += weight;
        }
        if (live.empty()) return false;  // a dead end: the grammar promised none
        double u = std::uniform_real_distribution<double>(0, total)(rng);
        size_t k = 0;
        while (k + 1 < w.size() && u >= w[k]) u -= w[k++];
        out += static_cast<char>(live[k].first);
        s = std::move(live[k].second);
    }
    return false;
}

const char* kWalkSchemas[] = {
    R"({"type": "string", "pattern": "^[A-Z][a-z]{1,6}( [A-Z][a-z]+)?$"})",
    R"({"type": "string", "pattern": "^(ab|c)+\\d$"})",
    R"({"type": "string", "pattern": "[a-z][0-9]"})",
    R"({"type": "string", "pattern": "^[^a-z\"]{2,5}$"})",
    R"({"type": "string", "pattern": "^\\w+\\.\\w{2,3}$"})",
    R"({"type": "string", "minLength": 3, "maxLength": 6})",
    R"({"type": "integer", "minimum": -250, "maximum": 1999})",
    R"({"type": "integer", "exclusiveMinimum": 7})",
    R"({"type": "number", "minimum": -3, "exclusiveMaximum": 4})",
    R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})",
    R"({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "string", "format": "email"}, {"type": "null"}]})",
    R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}, "required": ["x"]}},
        "allOf": [{"$ref": "#/$defs/p"}, {"type": "object", "properties": {"x": {"maximum": 50}, "tag": {"type": "string",
        "pattern": "^#[0-9a-f]{6}$"}}, "required": ["tag"]}]})",
    R"({"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1, "maxItems": 3})",
};

TEST(GrammarKeywords, RandomWalksValidate) {
    std::mt19937_64 rng(2026);
    for (const char* text : kWalkSchemas) {
        const Grammar g = schema(text);
        const json s = json::parse(text);
        int ended = 0;
        for (int k = 0; k < 40; ++k) {
            std::string v;
            if (!random_walk(g, rng, v)) continue;
            ++ended;
            const json parsed = json::parse(v, nullptr, false);
            ASSERT_FALSE(parsed.is_discarded()) << text << ": not JSON: " << v;
            std::string why;
            EXPECT_TRUE(test::schema_validate(parsed, s, s, why)) << text << ": " << why << ": " << v;
        }
        EXPECT_GE(ended, 25) << text;  // the weights make most values end within the step bound
    }
}

}  // namespace
