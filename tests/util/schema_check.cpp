// The validator, keyword by keyword.
#include "util/schema_check.h"

#include <regex>

#if DSV4_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace dsv4::test {
namespace {

using json = nlohmann::json;

bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
}

bool pattern_matches(const std::string& pattern, const std::string& text) {
#if DSV4_HAVE_PCRE2
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF, &code,
                                   &offset, nullptr);
    if (!re) return false;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, nullptr);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
#else
    (void)pattern;
    (void)text;
    return false;
#endif
}

size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

bool format_ok(const std::string& f, const std::string& x) {
    static const std::regex date(R"(^(\d{4})-(\d\d)-(\d\d))");
    static const std::regex time(R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]\d\d:\d\d)$)");
    static const std::regex uuid(R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
    // RFC 5321's dot-atom on both sides of one '@', a dot inside the domain, labels not starting or ending in '-'.
    static const std::regex email(
        R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$)");
    auto date_ok = [](const std::string& d) {
        std::smatch m;
        if (!std::regex_search(d, m, date)) return false;
        const int y = std::stoi(m[1]), mo = std::stoi(m[2]), day = std::stoi(m[3]);
        const int days[] = {31, (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        return mo >= 1 && mo <= 12 && day >= 1 && day <= days[mo - 1];
    };
    if (f == "date") return x.size() == 10 && date_ok(x);
    if (f == "time") return std::regex_match(x, time);
    if (f == "date-time") return x.size() > 11 && date_ok(x) && (x[10] == 'T' || x[10] == 't') && std::regex_match(x.substr(11), time);
    if (f == "uuid") return std::regex_match(x, uuid);
    if (f == "email") return x.size() <= 254 && std::regex_match(x, email);
    return false;
}

}  // namespace

bool schema_validate(const json& v, const json& s, const json& root, std::string& why) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string r = s["$ref"];
        return schema_validate(v, r == "#" ? root : root.at(json::json_pointer(r.substr(1))), root, why);
    }
    if (s.contains("const") && v != s["const"]) return why = "const", false;
    if (s.contains("enum")) {
        bool found = false;
        for (const json& e : s["enum"]) found = found || e == v;
        if (!found) return why = "enum", false;
    }
    if (s.contains("anyOf")) {
        bool any = false;
        for (const json& a : s["anyOf"]) any = any || schema_validate(v, a, root, why);
        if (!any) return why = "anyOf", false;
    }
    if (s.contains("oneOf")) {
        int n = 0;
        for (const json& a : s["oneOf"]) n += schema_validate(v, a, root, why) ? 1 : 0;
        if (n != 1) return why = "oneOf matched " + std::to_string(n) + " branches for " + v.dump(), false;
    }
    if (s.contains("allOf"))
        for (const json& a : s["allOf"])
            if (!schema_validate(v, a, root, why)) return why = "allOf: " + why, false;
    if (s.contains("type")) {
        bool ok = false;
        if (s["type"].is_array()) {
            for (const json& t : s["type"]) ok = ok || has_type(v, t);
        } else {
            ok = has_type(v, s["type"]);
        }
        if (!ok) return why = "type " + s["type"].dump() + " for " + v.dump(), false;
    }
    if (v.is_string()) {
        const std::string x = v.get<std::string>();
        if (s.contains("format") && !format_ok(s["format"], x)) return why = "format " + s["format"].dump() + " for " + x, false;
        if (s.contains("pattern") && !pattern_matches(s["pattern"], x)) return why = "pattern " + s["pattern"].dump() + " for " + v.dump(), false;
        if (s.contains("minLength") && code_points(x) < s["minLength"].get<size_t>()) return why = "minLength for " + v.dump(), false;
        if (s.contains("maxLength") && code_points(x) > s["maxLength"].get<size_t>()) return why = "maxLength for " + v.dump(), false;
    }
    if (v.is_number()) {
        // Integers compare exactly, other numbers as doubles.
        auto cmp = [&](const json& bound) {  // -1, 0, 1: v below, at, above the bound
            if (v.is_number_integer() && bound.is_number_integer()) {
                const int64_t a = v.get<int64_t>(), b = bound.get<int64_t>();
                return a < b ? -1 : a > b ? 1 : 0;
            }
            const double a = v.get<double>(), b = bound.get<double>();
            return a < b ? -1 : a > b ? 1 : 0;
        };
        if (s.contains("minimum") && cmp(s["minimum"]) < 0) return why = "minimum for " + v.dump(), false;
        if (s.contains("maximum") && cmp(s["maximum"]) > 0) return why = "maximum for " + v.dump(), false;
        if (s.contains("exclusiveMinimum") && cmp(s["exclusiveMinimum"]) <= 0) return why = "exclusiveMinimum for " + v.dump(), false;
        if (s.contains("exclusiveMaximum") && cmp(s["exclusiveMaximum"]) >= 0) return why = "exclusiveMaximum for " + v.dump(), false;
    }
    if (v.is_object()) {
        const json props = s.value("properties", json::object());
        for (const json& r : s.value("required", json::array()))
            if (!v.contains(r.get<std::string>())) return why = "required " + r.dump(), false;
        for (const auto& [k, x] : v.items()) {
            if (props.contains(k)) {
                if (!schema_validate(x, props[k], root, why)) return false;
            } else if (s.contains("additionalProperties")) {
                const json& ap = s["additionalProperties"];
                if (ap.is_boolean() && !ap.get<bool>()) return why = "additional property " + k, false;
                if (ap.is_object() && !schema_validate(x, ap, root, why)) return false;
            }
        }
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return why = "minItems", false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return why = "maxItems", false;
        if (s.contains("items"))
            for (const json& x : v)
                if (!schema_validate(x, s["items"], root, why)) return false;
    }
    return true;
}

}  // namespace dsv4::test
