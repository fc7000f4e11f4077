// Browser-safety checks (see http_guard.h).
#include "server/http_guard.h"

#include <algorithm>
#include <cctype>

namespace dsv4::server {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

bool listed(const std::vector<std::string>& list, const std::string& value) {
    return std::any_of(list.begin(), list.end(), [&](const std::string& e) { return e == "*" || lower(e) == value; });
}

// 127.0.0.0/8 written as four decimal octets.
bool is_ipv4_loopback(std::string_view s) {
    int parts = 0;
    size_t i = 0;
    int first = -1;
    while (i <= s.size()) {
        size_t j = i;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        if (j == i || j - i > 3) return false;
        const int v = std::stoi(std::string(s.substr(i, j - i)));
        if (v > 255) return false;
        if (first < 0) first = v;
        ++parts;
        if (j == s.size()) break;
        if (s[j] != '.') return false;
        i = j + 1;
    }
    return parts == 4 && first == 127;
}

}  // namespace

bool is_loopback_address(std::string_view host) {
    const std::string h = lower(host);
    return h == "localhost" || h == "::1" || h == "[::1]" || is_ipv4_loopback(h);
}

std::string host_name(std::string_view host_header) {
    std::string_view h = host_header;
    while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
    while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
    if (!h.empty() && h.front() == '[') {
        const size_t close = h.find(']');
        if (close == std::string_view::npos) return lower(h);
        return lower(h.substr(1, close - 1));
    }
    const size_t colon = h.find(':');
    if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos) h = h.substr(0, colon);
    if (!h.empty() && h.back() == '.') h.remove_suffix(1);  // "localhost." names the same host
    return lower(h);
}

bool host_allowed(const BrowserPolicy& policy, std::string_view host_header) {
    if (host_header.empty()) return true;
    const std::string name = host_name(host_header);
    if (listed(policy.host_allow, name)) return true;
    if (!policy.loopback_hosts_only) return policy.host_allow.empty();
    return is_loopback_address(name);
}

bool is_json_media_type(std::string_view content_type) {
    std::string_view t = content_type.substr(0, content_type.find(';'));
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return lower(t) == "application/json";
}

OriginCheck check_origin(const BrowserPolicy& policy, std::string_view origin, std::string_view host_header) {
    if (origin.empty()) return OriginCheck::none;
    std::string o = lower(origin);
    while (!o.empty() && o.back() == '/') o.pop_back();
    if (listed(policy.cors_origins, o)) return OriginCheck::allowed;
    const std::string host = lower(host_header);
    if (!host.empty() && (o == "http://" + host || o == "https://" + host)) return OriginCheck::same_origin;
    return OriginCheck::refused;
}

}  // namespace dsv4::server
