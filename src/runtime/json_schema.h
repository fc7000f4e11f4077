// JSON schemas into byte grammars (runtime/grammar.h), for constrained decoding.
//
// The subset is what OpenAI's structured outputs accept: `type` (object, array, string, number, integer,
// boolean, null, or a list of them), `properties`, `required`, `additionalProperties` (false, true or a
// schema), `enum`, `const`, `anyOf`, `oneOf`, `allOf`, `$ref` into `$defs` / `definitions` or "#" (nested and
// recursive), `items`, `minItems`, `maxItems`; strings: `pattern` (the regex subset of runtime/string_grammar.h,
// matched against the decoded string and searched, as JSON Schema says), `minLength` / `maxLength` (code
// points), `format` date / time / date-time / uuid / email (one of these three kinds per string); numbers:
// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (runtime/number_grammar.h: exact for integers,
// for numbers exact when the bounds are integers and rounded inward to integers otherwise). Annotations
// (`title`, `description`, `default`, `examples`, `$schema`, `$id`, `$comment`) are ignored. Anything else
// (`multipleOf`, `not`, `prefixItems`, `patternProperties`, other formats, regex constructs outside the
// subset, ...) is an error naming the keyword and where it is, never silently ignored, so output that the
// grammar accepts validates against the schema, with one exception: `oneOf` is compiled as `anyOf`, so a
// value matching two of its branches is not excluded (it cannot happen when the branches exclude each other,
// as branches of different types, consts or required keys do). `allOf` is merged into one schema where that is
// exact (runtime/schema_all_of.h), else an error.
//
// The generated value: object properties in the schema's order, every required one present; an object
// schema with `properties` writes only those (also when extra keys would be allowed: a value without them
// still validates); integers of at most 15 digits, numbers of at most 15 + 15 digits and a 2-digit exponent
// (always a finite double; no exponent when bounded); formats as a subset every checker accepts (days 01-28,
// UTC times with whole seconds, lowercase uuids, simple short addresses); at most Grammar::max_whitespace
// whitespace bytes between structural bytes, none around the value.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/grammar.h"

namespace dsv4 {

struct JsonGrammarOptions {
    int32_t max_whitespace = 4;
    bool no_lt_in_strings = false;  // strings take no raw '<' (values inside DSML markup)
};

// Compiles `schema` (a JSON schema object or `true`). Errors read "response schema: <path>: <reason>" with
// <path> a JSON pointer into the schema ("#/properties/tags/items").
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& opt = {});

// Any JSON object (OpenAI's `json_object` mode).
Grammar json_object_grammar(const JsonGrammarOptions& opt = {});

// Schema compilation pieces shared with the tool-call grammar (runtime/tool_grammar.cpp): compile `schema`
// into nodes of `g` and return its node id; `$ref`s resolve against `root`, the document `schema` is part of.
Result<int32_t> add_json_schema(Grammar& g, const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root,
                                const JsonGrammarOptions& opt);

// Checks the finished grammar: rejects cycles of references that read nothing and drops alternatives and
// optional properties that cannot produce a finite value; an error when the root cannot.
Status finalize_grammar(Grammar& g);

}  // namespace dsv4
