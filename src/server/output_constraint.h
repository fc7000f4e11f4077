// Which grammar a chat request's answer is held to (constrained decoding), decided from its request fields:
//   - tool_choice required / a named function: a DSML tool-call block of those tools, their parameter
//     schemas as the argument grammar (in thinking mode after the reasoning's "</think>");
//   - response_format json_object / json_schema: the JSON value (after "</think>" in thinking mode), or, when
//     tools may be called (tool_choice auto), that value or a tool-call block;
//   - otherwise, tools marked `strict: true` under auto: free text until a tool-call block opens, then the
//     block's grammar.
// The grammar is compiled here (cheap) so a schema outside the supported subset is a 400 naming the field and
// the keyword; the server binds it to the vocabulary through its GrammarCache under `key`.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/grammar.h"
#include "tokenizer/chat_format.h"

namespace dsv4::server {

struct OutputGrammar {
    std::shared_ptr<const Grammar> grammar;  // null: the answer is not constrained
    std::string key;                         // the same key always means the same grammar
    std::string trigger;                     // see GrammarConstraint (runtime/token_mask.h)
    bool trigger_required = true;
    std::string prefix;
};

// A schema the grammar cannot take: the message (naming the keyword) and the request field it is in.
struct OutputGrammarError {
    std::string message;
    std::string param;
};

// response_format: as given (null: none; type text is none too); tools: the request's OpenAI-shaped tools as
// rendered (null or an array); forced: tool_choice required or named (tool_name: the named function, or
// empty); forced_prefix: the tool-call opening the prompt already ends with (chat mode, forced calls).
std::optional<OutputGrammarError> output_grammar(const nlohmann::ordered_json& response_format,
                                                 const nlohmann::ordered_json& tools, bool forced,
                                                 const std::string& tool_name, chat::ThinkingMode mode,
                                                 const std::string& forced_prefix, OutputGrammar& out);

}  // namespace dsv4::server
