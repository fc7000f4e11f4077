// A JSON schema compiled into a constrained-decoding grammar, for the grammar tests: a schema that does not
// compile fails the test and gives an empty grammar.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"

namespace dsv4::test {

inline Grammar schema_grammar(const char* text) {
    auto g = compile_json_schema(nlohmann::ordered_json::parse(text));
    EXPECT_TRUE(g.ok()) << g.error();
    return g.ok() ? std::move(*g) : Grammar{};
}

}  // namespace dsv4::test
