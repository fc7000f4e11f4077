// The grammar of a DeepSeek-V4 tool-call block (DSML markup, tokenizer/chat_format.h), for forced and strict
// tool calls: "\n\n<｜DSML｜tool_calls>\n", one or more invokes of the given tools, "</｜DSML｜tool_calls>".
// Each invoke writes its tool's parameters in the schema's property order, every required one, each
// optional one or not: a parameter whose schema is a plain string as `string="true"` raw text (no '<'),
// any other as `string="false"` with a JSON value of its schema (strings without a raw '<'), so the
// arguments the chat parser builds are a JSON object that validates against the tool's schema.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runtime/grammar.h"

namespace dsv4 {

struct ToolGrammarSpec {
    std::string name;
    nlohmann::ordered_json parameters;  // the tool's JSON schema (an object schema; null: no parameters)
};

// Errors name the tool: "tool 'get_weather': response schema: #/properties/x: ...".
Result<Grammar> compile_tool_calls(const std::vector<ToolGrammarSpec>& tools, int32_t max_whitespace = 4);

}  // namespace dsv4
