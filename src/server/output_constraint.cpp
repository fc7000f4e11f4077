// Request fields -> the answer's grammar.
#include "server/output_constraint.h"

#include "runtime/json_schema.h"
#include "runtime/tool_grammar.h"

namespace dsv4::server {
namespace {

using ojson = nlohmann::ordered_json;

const ojson* field(const ojson& o, const char* key) {
    if (!o.is_object()) return nullptr;
    auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
}

struct Tool {
    ToolGrammarSpec spec;
    bool strict = false;
    size_t index = 0;
};

std::vector<Tool> read_tools(const ojson& tools) {
    std::vector<Tool> out;
    if (!tools.is_array()) return out;
    for (size_t i = 0; i < tools.size(); ++i) {
        const ojson* fn = field(tools[i], "function");
        if (!fn) continue;
        Tool t;
        t.index = i;
        if (const ojson* n = field(*fn, "name"); n && n->is_string()) t.spec.name = n->get<std::string>();
        if (const ojson* p = field(*fn, "parameters")) t.spec.parameters = *p;
        if (const ojson* s = field(*fn, "strict"); s && s->is_boolean()) t.strict = s->get<bool>();
        out.push_back(std::move(t));
    }
    return out;
}

std::string param_of(const Tool& t) { return "tools[" + std::to_string(t.index) + "].function.parameters"; }

// The block grammar of `tools`; a tool whose schema the grammar cannot take is an error when `must` says so
// for it, and is left out of the block otherwise. Null when no tool is left.
std::optional<OutputGrammarError> block_of(const std::vector<Tool>& tools, bool all_must, std::optional<Grammar>& out,
                                           std::string& key) {
    std::vector<ToolGrammarSpec> specs;
    for (const Tool& t : tools) {
        auto g = compile_tool_calls({t.spec});
        if (!g.ok()) {
            if (all_must || t.strict) return OutputGrammarError{"cannot constrain the call: " + g.error(), param_of(t)};
            continue;
        }
        specs.push_back(t.spec);
        key += t.spec.name + '\x1f' + t.spec.parameters.dump() + '\x1e';
    }
    if (specs.empty()) return std::nullopt;
    auto g = compile_tool_calls(specs);
    if (!g.ok()) return OutputGrammarError{"cannot constrain the call: " + g.error(), "tools"};
    out = std::move(*g);
    return std::nullopt;
}

}  // namespace

std::optional<OutputGrammarError> output_grammar(const ojson& response_format, const ojson& tools, bool forced,
                                                 const std::string& tool_name, chat::ThinkingMode mode,
                                                 const std::string& forced_prefix, OutputGrammar& out) {
    out = OutputGrammar{};
    const bool thinking = mode == chat::ThinkingMode::thinking;
    std::vector<Tool> all = read_tools(tools);
    if (forced) {
        std::vector<Tool> chosen;
        for (const Tool& t : all)
            if (tool_name.empty() || t.spec.name == tool_name) chosen.push_back(t);
        std::optional<Grammar> g;
        std::string key = "tools\x1d";
        if (auto e = block_of(chosen, true, g, key)) return e;
        if (!g) return std::nullopt;
        out.grammar = std::make_shared<const Grammar>(std::move(*g));
        out.key = std::move(key);
        if (thinking) {
            out.trigger = std::string(chat::kThinkEnd);
        } else {
            out.prefix = forced_prefix;
        }
        return std::nullopt;
    }

    std::optional<Grammar> json;
    const ojson* type = field(response_format, "type");
    std::string key;
    if (type && type->is_string() && *type == "json_object") {
        json = json_object_grammar();
        key = "json_object";
    } else if (type && type->is_string() && *type == "json_schema") {
        const ojson* js = field(response_format, "json_schema");
        const ojson* schema = js ? field(*js, "schema") : nullptr;
        if (!schema) {
            json = json_object_grammar();
            key = "json_object";
        } else {
            auto g = compile_json_schema(*schema);
            if (!g.ok()) return OutputGrammarError{g.error(), "response_format.json_schema.schema"};
            json = std::move(*g);
            key = "json_schema\x1d" + schema->dump();
        }
    }
    if (json) {
        Grammar g = std::move(*json);
        if (!all.empty()) {
            // The tools may still be called: the answer is the value or a tool-call block.
            std::optional<Grammar> block;
            std::string block_key;
            if (auto e = block_of(all, false, block, block_key)) return e;
            if (block) {
                GrammarNode either;
                either.kind = GrammarNodeKind::any_of;
                either.children = {g.root, append_grammar(g, *block)};
                g.root = g.add(std::move(either));
                key += "\x1dtools\x1d" + block_key;
            }
        }
        out.grammar = std::make_shared<const Grammar>(std::move(g));
        out.key = std::move(key);
        if (thinking) out.trigger = std::string(chat::kThinkEnd);
        return std::nullopt;
    }

    bool any_strict = false;
    for (const Tool& t : all) any_strict = any_strict || t.strict;
    if (!any_strict) return std::nullopt;
    std::optional<Grammar> block;
    std::string block_key = "tools\x1d";
    if (auto e = block_of(all, false, block, block_key)) return e;
    if (!block) return std::nullopt;
    out.grammar = std::make_shared<const Grammar>(std::move(*block));
    out.key = std::move(block_key);
    out.trigger = std::string(chat::kToolCallsStart);
    out.trigger_required = false;
    out.prefix = out.trigger;
    return std::nullopt;
}

}  // namespace dsv4::server
