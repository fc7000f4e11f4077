// DSML tool-call block -> grammar nodes.
#include "runtime/tool_grammar.h"

#include <algorithm>

#include "runtime/json_schema.h"
#include "tokenizer/chat_format.h"

namespace dsv4 {
namespace {

using ojson = nlohmann::ordered_json;

int32_t literal(Grammar& g, std::string text) {
    GrammarNode n;
    n.kind = GrammarNodeKind::literal;
    n.text = std::move(text);
    return g.add(std::move(n));
}

int32_t seq(Grammar& g, std::vector<int32_t> children) {
    GrammarNode n;
    n.kind = GrammarNodeKind::sequence;
    n.children = std::move(children);
    return g.add(std::move(n));
}

int32_t alt(Grammar& g, std::vector<int32_t> children) {
    GrammarNode n;
    n.kind = GrammarNodeKind::any_of;
    n.children = std::move(children);
    return g.add(std::move(n));
}

bool plain_string(const ojson& s) {
    if (!s.is_object() || !s.contains("type") || s["type"] != "string") return false;
    for (const auto& [k, v] : s.items()) {
        (void)v;
        if (k != "type" && k != "description" && k != "title" && k != "default" && k != "examples") return false;
    }
    return true;
}

// The invoke of one tool: its opening line, its parameters, "</｜DSML｜invoke>\n".
Result<int32_t> invoke(Grammar& g, const ToolGrammarSpec& tool) {
    const std::string open = std::string(chat::kInvokeStart) + " name=\"" + tool.name + "\">\n";
    const int32_t close = literal(g, std::string(chat::kInvokeEnd) + ">\n");
    const ojson& p = tool.parameters;
    if (p.is_null() || (p.is_object() && p.empty())) return seq(g, {literal(g, open), close});
    if (!p.is_object()) return make_error("response schema: #: the parameters must be an object schema");
    if (p.contains("type") && p["type"] != "object") return make_error("response schema: #/type: the parameters must be of type 'object'");
    for (const auto& [k, v] : p.items()) {
        (void)v;
        if (k != "type" && k != "properties" && k != "required" && k != "additionalProperties" && k != "$defs" &&
            k != "definitions" && k != "title" && k != "description" && k != "$schema" && k != "strict")
            return make_error("response schema: #: '" + k + "' is not supported in tool parameters");
    }
    // Compile the whole schema once so that the properties' $refs resolve against it.
    JsonGrammarOptions opt;
    opt.no_lt_in_strings = true;
    opt.max_whitespace = g.max_whitespace;
    DSV4_ASSIGN_OR_RETURN(int32_t object_node, add_json_schema(g, p, p, opt));
    (void)object_node;  // compiled for its checks; the values are compiled again below, one per parameter
    const ojson props = p.contains("properties") ? p["properties"] : ojson::object();
    std::vector<std::string> required;
    if (p.contains("required"))
        for (const ojson& r : p["required"]) required.push_back(r.get<std::string>());
    // rest[i]: the parameters from i on, then the close.
    int32_t rest = close;
    std::vector<std::pair<std::string, const ojson*>> items;
    for (const auto& [key, value] : props.items()) items.push_back({key, &value});
    for (size_t i = items.size(); i-- > 0;) {
        const std::string& key = items[i].first;
        const ojson& schema = *items[i].second;
        const bool is_string = plain_string(schema);
        int32_t value;
        if (is_string) {
            GrammarNode raw;
            raw.kind = GrammarNodeKind::raw_text;
            value = g.add(std::move(raw));
        } else {
            DSV4_ASSIGN_OR_RETURN(value, add_json_schema(g, schema, p, opt));
        }
        std::string head = "<";
        head.append(chat::kDsml).append("parameter name=\"").append(key).append("\" string=\"");
        head.append(is_string ? "true" : "false").append("\">");
        std::string tail = "<";
        tail.append(chat::kParameterEnd).append(">\n");
        const int32_t param = seq(g, {literal(g, head), value, literal(g, tail), rest});
        const bool req = std::find(required.begin(), required.end(), key) != required.end();
        rest = req ? param : alt(g, {param, rest});
    }
    return seq(g, {literal(g, open), rest});
}

}  // namespace

Result<Grammar> compile_tool_calls(const std::vector<ToolGrammarSpec>& tools, int32_t max_whitespace) {
    Grammar g;
    g.max_whitespace = max_whitespace;
    if (tools.empty()) return make_error("no tools to call");
    const int32_t end = literal(g, std::string(chat::kToolCallsEnd));
    // calls: an invoke of any tool, then the end or more calls.
    GrammarNode calls_node;
    calls_node.kind = GrammarNodeKind::any_of;
    const int32_t calls = g.add(calls_node);
    const int32_t after = alt(g, {end, calls});
    std::vector<int32_t> kids;
    for (const ToolGrammarSpec& t : tools) {
        auto inv = invoke(g, t);
        if (!inv.ok()) return make_error("tool '" + t.name + "': " + inv.error());
        kids.push_back(seq(g, {*inv, after}));
    }
    g.nodes[static_cast<size_t>(calls)].children = std::move(kids);
    g.root = seq(g, {literal(g, std::string(chat::kToolCallsStart) + ">\n"), calls});
    DSV4_TRY(finalize_grammar(g));
    return g;
}

}  // namespace dsv4
