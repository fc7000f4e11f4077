// Request-head checks for the connection front (see http_head.h). Only what must be known before the body
// arrives is read here; httplib parses the full request again once it is complete.
#include "server/http_head.h"

#include <cctype>

namespace dsv4::server {

namespace {

HttpHead refuse(int status, std::string code, std::string message) {
    HttpHead h;
    h.state = HeadState::refused;
    h.status = status;
    h.code = std::move(code);
    h.message = std::move(message);
    return h;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool same_name(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower((unsigned char)a[i]) != std::tolower((unsigned char)b[i])) return false;
    return true;
}

// The target of a request line ("POST /v1/messages?beta=true HTTP/1.1" -> "/v1/messages"); "" until the
// line is complete. The front's own errors pick their body shape by it (see FrontOptions::error_body).
std::string request_path(std::string_view received) {
    const size_t line_end = received.find("\r\n");
    if (line_end == std::string_view::npos) return {};
    const std::string_view line = received.substr(0, line_end);
    const size_t start = line.find(' ');
    if (start == std::string_view::npos) return {};
    const size_t end = line.find_first_of(" ?", start + 1);
    return std::string(
        line.substr(start + 1, end == std::string_view::npos ? std::string_view::npos : end - start - 1));
}

HttpHead parse_head(std::string_view received, const HeadLimits& limits);

}  // namespace

HttpHead parse_http_head(std::string_view received, const HeadLimits& limits) {
    HttpHead h = parse_head(received, limits);
    h.path = request_path(received);
    return h;
}

namespace {

HttpHead parse_head(std::string_view received, const HeadLimits& limits) {
    const size_t end = received.find("\r\n\r\n");
    if (end == std::string_view::npos) {
        if (received.size() > limits.max_head_bytes) {
            return refuse(431, "headers_too_large",
                          "the request line and headers are larger than the server's limit of " +
                              std::to_string(limits.max_head_bytes) + " bytes");
        }
        return HttpHead{};
    }
    HttpHead h;
    h.head_bytes = end + 4;
    if (h.head_bytes > limits.max_head_bytes) {
        return refuse(431, "headers_too_large",
                      "the request line and headers are larger than the server's limit of " +
                          std::to_string(limits.max_head_bytes) + " bytes");
    }
    std::string_view head = received.substr(0, end);
    const size_t line_end = head.find("\r\n");
    const std::string_view request_line = head.substr(0, line_end);
    const size_t last_space = request_line.rfind(' ');
    if (request_line.find(' ') == std::string_view::npos || last_space == std::string_view::npos) {
        return refuse(400, "bad_request", "malformed request line");
    }
    const std::string_view version = request_line.substr(last_space + 1);
    if (version != "HTTP/1.1" && version != "HTTP/1.0") {
        return refuse(505, "http_version_not_supported", "only HTTP/1.0 and HTTP/1.1 are served");
    }
    bool have_length = false;
    for (size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2; pos < head.size();) {
        size_t next = head.find("\r\n", pos);
        if (next == std::string_view::npos) next = head.size();
        const std::string_view line = head.substr(pos, next - pos);
        pos = next + 2;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) return refuse(400, "bad_request", "malformed header line");
        const std::string_view name = line.substr(0, colon);
        const std::string_view value = trim(line.substr(colon + 1));
        if (same_name(name, "Content-Length")) {
            if (value.empty() || value.size() > 19) {
                return refuse(
                    value.size() > 19 && value.find_first_not_of("0123456789") == std::string_view::npos ? 413 : 400,
                    value.size() > 19 ? "request_too_large" : "invalid_content_length",
                    "invalid Content-Length '" + std::string(value.substr(0, 32)) + "'");
            }
            uint64_t n = 0;
            for (char c : value) {
                if (c < '0' || c > '9') {
                    return refuse(400, "invalid_content_length",
                                  "invalid Content-Length '" + std::string(value.substr(0, 32)) +
                                      "': expected a non-negative decimal number");
                }
                n = n * 10 + uint64_t(c - '0');
            }
            if (have_length && n != h.body_bytes) {
                return refuse(400, "invalid_content_length", "conflicting Content-Length headers");
            }
            have_length = true;
            h.body_bytes = static_cast<size_t>(n);
        } else if (same_name(name, "Transfer-Encoding")) {
            return refuse(411, "length_required",
                          "chunked request bodies are not accepted: send the body with a Content-Length");
        } else if (same_name(name, "Expect")) {
            h.expect_continue = same_name(value, "100-continue");
            h.expect_offset = static_cast<size_t>(line.data() - received.data());
            h.expect_bytes = line.size() + 2;
        }
    }
    if (h.body_bytes > limits.max_body_bytes) {
        return refuse(413, "request_too_large",
                      "the request body (" + std::to_string(h.body_bytes) +
                          " bytes) is larger than the server's limit of " + std::to_string(limits.max_body_bytes) +
                          " bytes");
    }
    h.state = HeadState::complete;
    return h;
}

}  // namespace

}  // namespace dsv4::server
