// A JSON-schema validator for the subset the constrained-decoding grammar compiles, written apart from the
// grammar (no code shared with runtime/json_schema.cpp), so tests can check what the grammar lets through.
// `pattern` is checked with PCRE2 in UTF mode (searched, as JSON Schema says); lengths count code points.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::test {

// True when `v` validates against `s`; `$ref`s resolve against `root`. `why` names the first failure.
bool schema_validate(const nlohmann::json& v, const nlohmann::json& s, const nlohmann::json& root, std::string& why);

}  // namespace dsv4::test
