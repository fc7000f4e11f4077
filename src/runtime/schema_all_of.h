// `allOf` as one schema: the members (and the keywords beside them) merged where the merge is exact, for the
// schema compiler (runtime/json_schema.cpp). `$ref` members are resolved first, nested `allOf` merged first.
//   type: the intersection (integer within number); properties: the union, a property in several members
//   becomes the allOf of its schemas; required: the union; items and additionalProperties schemas: allOf;
//   min* / exclusiveMinimum: the largest, max* / exclusiveMaximum: the smallest; enum / const: the intersection.
// A member with `additionalProperties: false` must list every property the merge has (else the members would
// contradict each other, which the merge cannot express); any other keyword in several members must be equal
// in all of them. Anything else is an error naming the keyword.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4 {

// `s` holds "allOf"; `root` is the document its `$ref`s point into. Errors read "<path>: <reason>".
Result<nlohmann::ordered_json> merge_all_of(const nlohmann::ordered_json& s, const nlohmann::ordered_json& root,
                                            const std::string& path);

}  // namespace dsv4
