// JSON schema -> grammar nodes. References become node ids: a `$ref` compiles its target once, into a
// placeholder alternative that the target's node fills, so recursive schemas are finite graphs.
#include "runtime/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "core/check.h"
#include "runtime/number_grammar.h"
#include "runtime/schema_all_of.h"
#include "runtime/string_grammar.h"

namespace dsv4 {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;  // nested subschemas (the compiler recurses; a request body is untrusted)

const std::set<std::string, std::less<>> kAnnotations = {"title",   "description", "default", "examples",
                                                          "$schema", "$id",         "$comment", "$defs",
                                                          "definitions", "strict"};
const std::set<std::string, std::less<>> kKeywords = {
    "type",     "properties", "required",  "additionalProperties", "enum",    "const",
    "anyOf",    "oneOf",      "allOf",     "$ref",                 "items",   "minItems",
    "maxItems", "format",     "pattern",   "minLength",            "maxLength", "minimum",
    "maximum",  "exclusiveMinimum", "exclusiveMaximum"};

// A simple address every common checker accepts: up to three dot-atom pieces of letters and digits joined by
// one of . _ + - (local part <= 62 characters), '@', a label (one inner hyphen at most), up to two more labels,
// and a last label of 2-10 letters; labels <= 41 characters, the whole <= 160.
constexpr const char* kEmailPattern =
    "^[A-Za-z0-9]{1,20}([._+-][A-Za-z0-9]{1,20}){0,2}@[A-Za-z0-9]{1,20}(-[A-Za-z0-9]{1,20})?"
    "(\\.[A-Za-z0-9]{1,20}){0,2}\\.[A-Za-z]{2,10}$";

std::string escape_pointer(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

class Compiler {
public:
    Compiler(Grammar& g, const ojson& root, const JsonGrammarOptions& opt)
        : g_(g), root_(root), opt_(opt), strings_(g, opt.no_lt_in_strings) {}

    Result<int32_t> compile(const ojson& s, const std::string& path) {
        if (++depth_ > kMaxSchemaDepth) return err(path, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
        auto r = compile_at(s, path);
        --depth_;
        return r;
    }

    Result<int32_t> compile_at(const ojson& s, const std::string& path) {
        if (s.is_boolean()) {
            if (s.get<bool>()) return any();
            return err(path, "the schema false accepts no value");
        }
        if (!s.is_object()) return err(path, "a schema must be an object or a boolean");
        for (const auto& [k, v] : s.items()) {
            (void)v;
            if (!kKeywords.count(k) && !kAnnotations.count(k))
                return err(path, "'" + k + "' is not supported in constrained output");
        }
        if (const auto it = s.find("$ref"); it != s.end()) {
            if (s.size() > 1)
                for (const auto& [k, v] : s.items()) {
                    (void)v;
                    if (k != "$ref" && kKeywords.count(k)) return err(path, "'$ref' beside '" + k + "' is not supported");
                }
            return ref(*it, path + "/$ref");
        }
        if (const auto it = s.find("const"); it != s.end()) return literal(it->dump());
        if (const auto it = s.find("enum"); it != s.end()) {
            if (!it->is_array() || it->empty()) return err(path + "/enum", "must be a non-empty array");
            GrammarNode n;
            n.kind = GrammarNodeKind::any_of;
            std::set<std::string> seen;
            for (const ojson& v : *it) {
                std::string text = v.dump();
                if (seen.insert(text).second) n.children.push_back(literal(text));
            }
            return g_.add(std::move(n));
        }
        if (s.contains("allOf")) {
            auto merged = merge_all_of(s, root_, path);
            if (!merged.ok()) return make_error("response schema: " + merged.error());
            return compile(*merged, path);
        }
        for (const char* which : {"anyOf", "oneOf"}) {
            const auto it = s.find(which);
            if (it == s.end()) continue;
            // oneOf as anyOf: the value matches at least one branch; that it matches only one is not checked
            // (it holds when the branches exclude each other, as branches of different types or consts do).
            if (!it->is_array() || it->empty()) return err(path + "/" + which, "must be a non-empty array");
            for (const auto& [k, v] : s.items()) {
                (void)v;
                if (k != which && kKeywords.count(k))
                    return err(path, std::string("'") + which + "' beside '" + k + "' is not supported");
            }
            GrammarNode n;
            n.kind = GrammarNodeKind::any_of;
            for (size_t i = 0; i < it->size(); ++i) {
                DSV4_ASSIGN_OR_RETURN(int32_t child, compile((*it)[i], path + "/" + which + "/" + std::to_string(i)));
                n.children.push_back(child);
            }
            return g_.add(std::move(n));
        }
        const auto t = s.find("type");
        if (t == s.end()) {
            if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
                return typed(s, "object", path);
            if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return typed(s, "array", path);
            if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
                return typed(s, "string", path);
            for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
                if (s.contains(k)) return typed(s, "number", path);
            return any();
        }
        if (t->is_string()) return typed(s, t->get<std::string>(), path);
        if (!t->is_array() || t->empty()) return err(path + "/type", "must be a type name or a non-empty array of them");
        GrammarNode n;
        n.kind = GrammarNodeKind::any_of;
        for (const ojson& name : *t) {
            if (!name.is_string()) return err(path + "/type", "must be a type name or a non-empty array of them");
            // Keywords of the other listed types do not apply to this one ("type": ["object", "null"]).
            DSV4_ASSIGN_OR_RETURN(int32_t child, typed(s, name.get<std::string>(), path, false));
            n.children.push_back(child);
        }
        return g_.add(std::move(n));
    }

    int32_t any() {
        if (any_ >= 0) return any_;
        GrammarNode alt;
        alt.kind = GrammarNodeKind::any_of;
        any_ = g_.add(alt);
        GrammarNode obj;
        obj.kind = GrammarNodeKind::object;
        obj.items = string_node();
        obj.any_value = any_;
        GrammarNode arr;
        arr.kind = GrammarNodeKind::array;
        arr.items = any_;
        std::vector<int32_t> kids = {string_node(), number_node(GrammarNodeKind::number), g_.add(std::move(obj)),
                                     g_.add(std::move(arr)), literal("true"), literal("false"), literal("null")};
        g_.nodes[static_cast<size_t>(any_)].children = std::move(kids);
        return any_;
    }

    int32_t any_object() {
        GrammarNode obj;
        obj.kind = GrammarNodeKind::object;
        obj.items = string_node();
        obj.any_value = any();
        return g_.add(std::move(obj));
    }

private:
    Error err(const std::string& path, const std::string& why) const {
        return make_error("response schema: " + path + ": " + why);
    }

    int32_t literal(std::string text) {
        GrammarNode n;
        n.kind = GrammarNodeKind::literal;
        n.text = std::move(text);
        return g_.add(std::move(n));
    }
    int32_t string_node() {
        if (string_ < 0) {
            GrammarNode n;
            n.kind = GrammarNodeKind::string;
            n.no_lt = opt_.no_lt_in_strings;
            string_ = g_.add(std::move(n));
        }
        return string_;
    }
    int32_t number_node(GrammarNodeKind kind) {
        GrammarNode n;
        n.kind = kind;
        return g_.add(std::move(n));
    }

    int32_t bytes(std::string_view chars) {
        GrammarNode n;
        n.kind = GrammarNodeKind::byte_set;
        for (char ch : chars) {
            const auto b = static_cast<uint8_t>(ch);
            n.bytes[b >> 6] |= uint64_t{1} << (b & 63);
        }
        return g_.add(std::move(n));
    }
    int32_t seq(std::vector<int32_t> kids) {
        GrammarNode n;
        n.kind = GrammarNodeKind::sequence;
        n.children = std::move(kids);
        return g_.add(std::move(n));
    }
    int32_t alt(std::vector<int32_t> kids) {
        GrammarNode n;
        n.kind = GrammarNodeKind::any_of;
        n.children = std::move(kids);
        return g_.add(std::move(n));
    }

    // String formats, as a subset of what each allows, so every value is valid for any checker: dates use days
    // 01-28 (valid in every month), times are UTC ("Z") with whole seconds 00-59.
    Result<int32_t> format(const ojson& f, const std::string& path) {
        if (!f.is_string()) return err(path, "must be a string");
        const std::string name = f.get<std::string>();
        const char* digits = "0123456789";
        auto d = [&] { return bytes(digits); };
        auto date = [&] {
            const int32_t month = alt({seq({literal("0"), bytes("123456789")}), seq({literal("1"), bytes("012")})});
            const int32_t day = alt({seq({literal("0"), bytes("123456789")}), seq({literal("1"), d()}),
                                     seq({literal("2"), bytes("012345678")})});
            return seq({d(), d(), d(), d(), literal("-"), month, literal("-"), day});
        };
        auto time = [&] {
            const int32_t hour = alt({seq({bytes("01"), d()}), seq({literal("2"), bytes("0123")})});
            const int32_t sixty = seq({bytes("012345"), d()});
            return seq({hour, literal(":"), sixty, literal(":"), sixty, literal("Z")});
        };
        int32_t body;
        if (name == "date") {
            body = date();
        } else if (name == "time") {
            body = time();
        } else if (name == "date-time") {
            body = seq({date(), literal("T"), time()});
        } else if (name == "uuid") {
            std::vector<int32_t> kids;
            for (int group : {8, 4, 4, 4, 12}) {
                if (!kids.empty()) kids.push_back(literal("-"));
                for (int i = 0; i < group; ++i) kids.push_back(bytes("0123456789abcdef"));
            }
            body = seq(std::move(kids));
        } else if (name == "email") {
            auto r = strings_.pattern_string(kEmailPattern);
            DSV4_CHECK_MSG(r.ok(), "%s", r.error().c_str());
            return *r;
        } else {
            return err(path, "format '" + name + "' is not supported (date, time, date-time, uuid and email are)");
        }
        return seq({literal("\""), body, literal("\"")});
    }

    // A string with format, pattern or length bounds (one kind of constraint at a time).
    Result<int32_t> string_of(const ojson& s, const std::string& path) {
        const auto f = s.find("format"), pat = s.find("pattern");
        const bool sized = s.contains("minLength") || s.contains("maxLength");
        if ((f != s.end()) + (pat != s.end()) + sized > 1)
            return err(path, "only one of 'format', 'pattern' and 'minLength' / 'maxLength' is supported on a string");
        if (f != s.end()) return format(*f, path + "/format");
        if (pat != s.end()) {
            if (!pat->is_string()) return err(path + "/pattern", "must be a string");
            auto r = strings_.pattern_string(pat->get<std::string>());
            if (!r.ok()) return err(path + "/pattern", r.error());
            return *r;
        }
        if (!sized) return string_node();
        int32_t len[2] = {0, -1};
        const char* keys[2] = {"minLength", "maxLength"};
        for (int i = 0; i < 2; ++i) {
            const auto it = s.find(keys[i]);
            if (it == s.end()) continue;
            if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000)
                return err(path + "/" + keys[i], "must be an integer from 0 to 1000000");
            len[i] = static_cast<int32_t>(it->get<int64_t>());
        }
        if (len[1] >= 0 && len[0] > len[1]) return err(path, "minLength is above maxLength");
        if (len[0] == 0 && len[1] < 0) return string_node();
        return strings_.sized_string(len[0], len[1]);
    }

    Result<int32_t> number_of(const ojson& s, bool integer, const std::string& path) {
        NumberBounds b;
        bool bounded = false;
        for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
            const auto it = s.find(k);
            if (it == s.end()) continue;
            if (!it->is_number() || !std::isfinite(it->get<double>()))
                return err(path + "/" + k, "must be a number");
            const double v = it->get<double>();
            const std::string_view key = k;
            bounded = true;
            if (key.find("inimum") != std::string_view::npos) {
                const bool ex = key == "exclusiveMinimum";
                if (v > b.lo || (v == b.lo && ex)) b.lo = v, b.lo_exclusive = ex;
            } else {
                const bool ex = key == "exclusiveMaximum";
                if (v < b.hi || (v == b.hi && ex)) b.hi = v, b.hi_exclusive = ex;
            }
        }
        if (!bounded) return number_node(integer ? GrammarNodeKind::integer : GrammarNodeKind::number);
        auto r = integer ? add_bounded_integer(g_, b) : add_bounded_number(g_, b);
        if (!r.ok()) return err(path, r.error());
        return *r;
    }

    Result<int32_t> ref(const ojson& r, const std::string& path) {
        if (!r.is_string()) return err(path, "must be a string");
        const std::string target = r.get<std::string>();
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        if (target.empty() || target[0] != '#') return err(path, "only references into this schema ('#...') are supported, not '" + target + "'");
        const ojson* node = &root_;
        if (target.size() > 1) {
            if (target[1] != '/') return err(path, "cannot resolve '" + target + "'");
            try {
                node = &root_.at(ojson::json_pointer(target.substr(1)));
            } catch (const std::exception&) {
                return err(path, "'" + target + "' names nothing in the schema");
            }
        }
        GrammarNode placeholder;
        placeholder.kind = GrammarNodeKind::any_of;
        const int32_t id = g_.add(std::move(placeholder));
        refs_[target] = id;
        DSV4_ASSIGN_OR_RETURN(int32_t body, compile(*node, target));
        g_.nodes[static_cast<size_t>(id)].children = {body};
        return id;
    }

    Result<int32_t> typed(const ojson& s, const std::string& type, const std::string& path, bool strict_keywords = true) {
        auto only = [&](std::initializer_list<const char*> allowed) -> Status {
            if (!strict_keywords) return {};
            for (const auto& [k, v] : s.items()) {
                (void)v;
                if (!kKeywords.count(k) || k == "type") continue;
                bool ok = false;
                for (const char* a : allowed) ok = ok || k == a;
                if (!ok) return err(path, "'" + k + "' does not apply to type '" + type + "'");
            }
            return {};
        };
        if (type == "string") {
            DSV4_TRY(only({"format", "pattern", "minLength", "maxLength"}));
            return string_of(s, path);
        }
        if (type == "number" || type == "integer") {
            DSV4_TRY(only({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}));
            return number_of(s, type == "integer", path);
        }
        if (type == "boolean") {
            DSV4_TRY(only({}));
            GrammarNode n;
            n.kind = GrammarNodeKind::any_of;
            n.children = {literal("true"), literal("false")};
            return g_.add(std::move(n));
        }
        if (type == "null") {
            DSV4_TRY(only({}));
            return literal("null");
        }
        if (type == "array") {
            DSV4_TRY(only({"items", "minItems", "maxItems"}));
            GrammarNode n;
            n.kind = GrammarNodeKind::array;
            if (const auto it = s.find("items"); it != s.end()) {
                if (it->is_array()) return err(path + "/items", "a list of item schemas (tuple) is not supported");
                DSV4_ASSIGN_OR_RETURN(n.items, compile(*it, path + "/items"));
            } else {
                n.items = any();
            }
            for (const char* k : {"minItems", "maxItems"}) {
                const auto it = s.find(k);
                if (it == s.end()) continue;
                if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000)
                    return err(path + "/" + k, "must be an integer from 0 to 1000000");
                (std::string_view(k) == "minItems" ? n.min_items : n.max_items) = static_cast<int32_t>(it->get<int64_t>());
            }
            if (n.max_items >= 0 && n.min_items > n.max_items) return err(path, "minItems is above maxItems");
            return g_.add(std::move(n));
        }
        if (type == "object") {
            DSV4_TRY(only({"properties", "required", "additionalProperties"}));
            return object(s, path);
        }
        return err(path + "/type", "unknown type '" + type + "'");
    }

    Result<int32_t> object(const ojson& s, const std::string& path) {
        const auto props = s.find("properties");
        const auto req = s.find("required");
        const auto extra = s.find("additionalProperties");
        if (props != s.end() && !props->is_object()) return err(path + "/properties", "must be an object");
        if (extra != s.end() && !extra->is_boolean() && !extra->is_object())
            return err(path + "/additionalProperties", "must be a boolean or a schema");
        std::set<std::string> required;
        if (req != s.end()) {
            if (!req->is_array()) return err(path + "/required", "must be an array of property names");
            for (const ojson& r : *req) {
                if (!r.is_string()) return err(path + "/required", "must be an array of property names");
                if (props == s.end() || !props->contains(r.get<std::string>()))
                    return err(path + "/required", "names '" + r.get<std::string>() + "', which is not in 'properties'");
                required.insert(r.get<std::string>());
            }
        }
        GrammarNode n;
        n.kind = GrammarNodeKind::object;
        if (props == s.end() || props->empty()) {
            if (extra != s.end() && extra->is_boolean() && !extra->get<bool>()) return g_.add(std::move(n));  // {}
            n.items = string_node();
            if (extra != s.end() && extra->is_object()) {
                DSV4_ASSIGN_OR_RETURN(n.any_value, compile(*extra, path + "/additionalProperties"));
            } else {
                n.any_value = any();
            }
            return g_.add(std::move(n));
        }
        for (const auto& [key, value] : props->items()) {
            GrammarProperty p;
            p.key = ojson(key).dump();
            p.required = required.count(key) > 0;
            DSV4_ASSIGN_OR_RETURN(p.value, compile(value, path + "/properties/" + escape_pointer(key)));
            n.properties.push_back(std::move(p));
        }
        return g_.add(std::move(n));
    }

    Grammar& g_;
    const ojson& root_;
    JsonGrammarOptions opt_;
    StringGrammarBuilder strings_;
    std::map<std::string, int32_t> refs_;
    int32_t any_ = -1, string_ = -1;
    int depth_ = 0;
};

// Productive nodes: those that can finish reading a finite value.
std::vector<bool> productive(const Grammar& g) {
    std::vector<bool> p(g.nodes.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < g.nodes.size(); ++i) {
            if (p[i]) continue;
            const GrammarNode& n = g.nodes[i];
            bool ok = false;
            switch (n.kind) {
                case GrammarNodeKind::any_of:
                    for (int32_t c : n.children) ok = ok || p[static_cast<size_t>(c)];
                    break;
                case GrammarNodeKind::sequence:
                    ok = true;
                    for (int32_t c : n.children) ok = ok && p[static_cast<size_t>(c)];
                    break;
                case GrammarNodeKind::object:
                    ok = true;
                    for (const GrammarProperty& pr : n.properties)
                        if (pr.required) ok = ok && p[static_cast<size_t>(pr.value)];
                    break;
                case GrammarNodeKind::array:
                case GrammarNodeKind::repeat:
                    ok = n.min_items == 0 || p[static_cast<size_t>(n.items)];
                    break;
                default: ok = true;
            }
            if (ok) changed = p[i] = true;
        }
    }
    return p;
}

}  // namespace

Status finalize_grammar(Grammar& g) {
    const std::vector<bool> p = productive(g);
    if (!p[static_cast<size_t>(g.root)]) return make_error("response schema: #: the schema accepts no finite value");
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        GrammarNode& n = g.nodes[i];
        if (n.kind == GrammarNodeKind::any_of)
            std::erase_if(n.children, [&](int32_t c) { return !p[static_cast<size_t>(c)]; });
        if (n.kind == GrammarNodeKind::object)
            std::erase_if(n.properties, [&](const GrammarProperty& pr) { return !p[static_cast<size_t>(pr.value)]; });
        if ((n.kind == GrammarNodeKind::array || n.kind == GrammarNodeKind::repeat) && !p[static_cast<size_t>(n.items)])
            n.max_items = 0;
    }
    // Alternatives (and a sequence's first child) are resolved without reading a byte: a cycle through them
    // would never end.
    std::vector<int> mark(g.nodes.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    for (size_t start = 0; start < g.nodes.size(); ++start) {
        if (mark[start]) continue;
        path.push_back({static_cast<int32_t>(start), 0});
        mark[start] = 1;
        while (!path.empty()) {
            auto& [id, next] = path.back();
            const GrammarNode& n = g.nodes[static_cast<size_t>(id)];
            size_t n_edges = n.kind == GrammarNodeKind::any_of ? n.children.size()
                             : (n.kind == GrammarNodeKind::sequence && !n.children.empty()) ? 1 : 0;
            if (next == n_edges) {
                mark[static_cast<size_t>(id)] = 2;
                path.pop_back();
                continue;
            }
            const int32_t c = n.children[next++];
            if (mark[static_cast<size_t>(c)] == 1)
                return make_error("response schema: a reference cycle reads nothing (a schema that is its own alternative)");
            if (mark[static_cast<size_t>(c)] == 0) {
                mark[static_cast<size_t>(c)] = 1;
                path.push_back({c, 0});
            }
        }
    }
    return {};
}

Result<int32_t> add_json_schema(Grammar& g, const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root,
                                const JsonGrammarOptions& opt) {
    Compiler c(g, root, opt);
    return c.compile(schema, "#");
}

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& opt) {
    Grammar g;
    g.max_whitespace = opt.max_whitespace;
    DSV4_ASSIGN_OR_RETURN(g.root, add_json_schema(g, schema, schema, opt));
    DSV4_TRY(finalize_grammar(g));
    return g;
}

Grammar json_object_grammar(const JsonGrammarOptions& opt) {
    Grammar g;
    g.max_whitespace = opt.max_whitespace;
    Compiler c(g, nlohmann::ordered_json::object(), opt);
    g.root = c.any_object();
    return g;
}

}  // namespace dsv4
