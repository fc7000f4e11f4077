// The allOf merge, keyword by keyword.
#include "runtime/schema_all_of.h"

#include <algorithm>
#include <set>
#include <vector>

namespace dsv4 {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxMergeDepth = 32;  // nested allOf / $ref chains followed while merging

const std::set<std::string, std::less<>> kIgnored = {"title",   "description", "default", "examples", "$schema",
                                                      "$id",     "$comment",    "$defs",   "definitions", "strict"};

Error err(const std::string& path, const std::string& why) { return make_error(path + ": " + why); }

std::vector<std::string> type_list(const ojson& t) {
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    if (t.is_array())
        for (const ojson& x : t)
            if (x.is_string()) out.push_back(x.get<std::string>());
    return out;
}

bool value_has_type(const ojson& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
}

Result<ojson> resolve(const ojson& s, const ojson& root, const std::string& path, int depth);

// The member as a plain schema: its $ref followed, its own allOf merged.
Result<ojson> member(const ojson& s, const ojson& root, const std::string& path, int depth) {
    if (depth > kMaxMergeDepth) return err(path, "allOf / $ref chains nest deeper than " + std::to_string(kMaxMergeDepth));
    if (s.is_boolean()) {
        if (s.get<bool>()) return ojson::object();
        return err(path, "the schema false accepts no value");
    }
    if (!s.is_object()) return err(path, "a schema must be an object or a boolean");
    if (s.contains("$ref")) {
        if (s.size() > 1)
            for (const auto& [k, v] : s.items()) {
                (void)v;
                if (k != "$ref" && !kIgnored.count(k)) return err(path, "'$ref' beside '" + k + "' is not supported");
            }
        if (!s["$ref"].is_string()) return err(path + "/$ref", "must be a string");
        const std::string target = s["$ref"].get<std::string>();
        if (target.empty() || target[0] != '#') return err(path + "/$ref", "only references into this schema ('#...') are supported");
        const ojson* node = &root;
        if (target.size() > 1) {
            try {
                node = &root.at(ojson::json_pointer(target.substr(1)));
            } catch (const std::exception&) {
                return err(path + "/$ref", "'" + target + "' names nothing in the schema");
            }
        }
        return member(*node, root, target, depth + 1);
    }
    if (s.contains("allOf")) return resolve(s, root, path, depth + 1);
    return s;
}

void merge_bound(ojson& into, const ojson& v, const std::string& k, bool larger) {
    if (!into.contains(k)) {
        into[k] = v;
        return;
    }
    if (!v.is_number() || !into[k].is_number()) return;  // the compiler reports the bad value
    const bool replace = larger ? v.get<double>() > into[k].get<double>() : v.get<double>() < into[k].get<double>();
    if (replace) into[k] = v;
}

ojson all_of_pair(const ojson& a, const ojson& b) {
    if (a == b) return a;
    return ojson{{"allOf", ojson::array({a, b})}};
}

Status merge_into(ojson& m, const ojson& s, const std::string& path) {
    for (const auto& [k, v] : s.items()) {
        if (kIgnored.count(k)) continue;
        if (!m.contains(k)) {
            m[k] = v;
            continue;
        }
        ojson& cur = m[k];
        if (k == "type") {
            const std::vector<std::string> a = type_list(cur), b = type_list(v);
            std::vector<std::string> both;
            for (const std::string& x : a)
                for (const std::string& y : b) {
                    std::string t = x == y ? x : (x == "integer" && y == "number") || (x == "number" && y == "integer") ? "integer" : "";
                    if (!t.empty() && std::find(both.begin(), both.end(), t) == both.end()) both.push_back(t);
                }
            if (both.empty()) return err(path, "the allOf members' types " + cur.dump() + " and " + v.dump() + " have nothing in common");
            cur = both.size() == 1 ? ojson(both[0]) : ojson(both);
        } else if (k == "properties") {
            if (!cur.is_object() || !v.is_object()) return err(path, "'properties' must be an object");
            for (const auto& [name, ps] : v.items()) cur[name] = cur.contains(name) ? all_of_pair(cur[name], ps) : ps;
        } else if (k == "required") {
            if (!cur.is_array() || !v.is_array()) return err(path, "'required' must be an array");
            for (const ojson& r : v)
                if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
        } else if (k == "items") {
            cur = all_of_pair(cur, v);
        } else if (k == "additionalProperties") {
            if (cur.is_boolean() && !cur.get<bool>()) continue;
            if (v.is_boolean()) {
                if (!v.get<bool>()) cur = false;
                continue;
            }
            cur = cur.is_boolean() ? v : all_of_pair(cur, v);
        } else if (k == "minItems" || k == "minLength" || k == "minimum" || k == "exclusiveMinimum") {
            merge_bound(m, v, k, true);
        } else if (k == "maxItems" || k == "maxLength" || k == "maximum" || k == "exclusiveMaximum") {
            merge_bound(m, v, k, false);
        } else if (k == "enum" || k == "const") {
            if (cur != v) {
                const ojson a = k == "enum" ? cur : ojson::array({cur}), b = k == "enum" ? v : ojson::array({v});
                if (!a.is_array() || !b.is_array()) return err(path, "'enum' must be an array");
                ojson both = ojson::array();
                for (const ojson& x : a)
                    if (std::find(b.begin(), b.end(), x) != b.end()) both.push_back(x);
                if (both.empty()) return err(path, "the allOf members' '" + k + "' values have nothing in common");
                cur = k == "enum" ? both : both[0];
            }
        } else if (cur != v) {
            return err(path, "'" + k + "' in more than one allOf member with different values is not supported");
        }
    }
    // enum and const beside each other: const must be one of the values.
    if (m.contains("enum") && m.contains("const")) {
        if (!m["enum"].is_array() || std::find(m["enum"].begin(), m["enum"].end(), m["const"]) == m["enum"].end())
            return err(path, "the allOf members' 'const' is not in their 'enum'");
        m.erase("enum");
    }
    return {};
}

Result<ojson> resolve(const ojson& s, const ojson& root, const std::string& path, int depth) {
    const ojson& list = s["allOf"];
    if (!list.is_array() || list.empty()) return err(path + "/allOf", "must be a non-empty array");
    std::vector<ojson> parts;
    ojson self = s;
    self.erase("allOf");
    DSV4_ASSIGN_OR_RETURN(ojson own, member(self, root, path, depth));
    parts.push_back(std::move(own));
    for (size_t i = 0; i < list.size(); ++i) {
        DSV4_ASSIGN_OR_RETURN(ojson p, member(list[i], root, path + "/allOf/" + std::to_string(i), depth));
        parts.push_back(std::move(p));
    }
    ojson m = ojson::object();
    for (const ojson& p : parts) DSV4_TRY(merge_into(m, p, path));
    // A member closed to extra keys must know every key the merge writes.
    for (const ojson& p : parts) {
        const auto ap = p.find("additionalProperties");
        if (ap == p.end() || !ap->is_boolean() || ap->get<bool>()) continue;
        if (!m.contains("properties")) continue;
        for (const auto& [name, v] : m["properties"].items()) {
            (void)v;
            if (!p.contains("properties") || !p["properties"].is_object() || !p["properties"].contains(name))
                return err(path, "property '" + name + "' of one allOf member is forbidden by another's additionalProperties: false");
        }
    }
    // Enum values of a type the merge excludes go.
    if (m.contains("type") && m.contains("enum") && m["enum"].is_array()) {
        const std::vector<std::string> types = type_list(m["type"]);
        ojson kept = ojson::array();
        for (const ojson& e : m["enum"])
            if (std::any_of(types.begin(), types.end(), [&](const std::string& t) { return value_has_type(e, t); })) kept.push_back(e);
        if (kept.empty()) return err(path, "no 'enum' value of the allOf members has their common type");
        m["enum"] = kept;
    }
    return m;
}

}  // namespace

Result<ojson> merge_all_of(const ojson& s, const ojson& root, const std::string& path) { return resolve(s, root, path, 0); }

}  // namespace dsv4
