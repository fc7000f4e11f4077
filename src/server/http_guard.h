// Browser safety for a server on the user's machine: a web page the user visits can send requests to it
// (a "simple" cross-site POST needs no preflight) and, through DNS rebinding, read the answers. The checks:
// POST bodies must be JSON (text/plain and form bodies are what a page can send without asking), the Host
// header must name this machine when it listens on a loopback address (or be on --host-allow), and a request
// that carries a foreign Origin is refused unless --cors-origin lists it. Pure functions, tested directly.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

struct BrowserPolicy {
    bool loopback_hosts_only = false;       // bound to a loopback address: Host must name the loopback
    std::vector<std::string> host_allow;    // more accepted Host names (lower case, no port); "*": any
    std::vector<std::string> cors_origins;  // origins granted CORS, e.g. "http://localhost:3000"; "*": any
};

// Whether a listen address is a loopback one (127.0.0.0/8, ::1, localhost).
bool is_loopback_address(std::string_view host);

// The Host header without its port, lower case ("[::1]:8080" -> "::1").
std::string host_name(std::string_view host_header);

// Whether the Host header is acceptable; an absent header (HTTP/1.0 clients) is, browsers always send one.
bool host_allowed(const BrowserPolicy& policy, std::string_view host_header);

// Whether a Content-Type names JSON: application/json, with parameters (charset) or not, any case.
bool is_json_media_type(std::string_view content_type);

enum class OriginCheck {
    none,         // no Origin header: not a browser's cross-origin request
    same_origin,  // the page was served by this server (scheme://Host)
    allowed,      // listed by --cors-origin: answer with CORS headers
    refused,
};
OriginCheck check_origin(const BrowserPolicy& policy, std::string_view origin, std::string_view host_header);

}  // namespace dsv4::server
