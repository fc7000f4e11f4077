// Fixtures of the grammar tests: a JSON schema compiled into a constrained-decoding grammar, and a vocabulary of
// every single byte.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"

namespace dsv4::test {

// A schema that does not compile fails the test and gives an empty grammar.
inline Grammar schema_grammar(const char* text) {
    auto g = compile_json_schema(nlohmann::ordered_json::parse(text));
    EXPECT_TRUE(g.ok()) << g.error();
    return g.ok() ? std::move(*g) : Grammar{};
}

// Token b + 1 is byte b (token 0 is empty), then `extra`.
inline std::vector<std::string> byte_vocab(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> v = {""};
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
}

}  // namespace dsv4::test
