// The server's checks that run before any handler, without sockets: the request-head reader of the
// connection front (where the head ends, Content-Length against the limit, malformed and chunked heads) and
// the browser-safety checks (loopback addresses, Host names, JSON media types, Origin).
#include <gtest/gtest.h>

#include <string>

#include "server/http_guard.h"
#include "server/http_head.h"

using namespace dsv4::server;

namespace {

HeadLimits limits(size_t head = 1024, size_t body = 1000) {
    HeadLimits l;
    l.max_head_bytes = head;
    l.max_body_bytes = body;
    return l;
}

std::string post(const std::string& length_line) {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + length_line + "\r\n";
}

}  // namespace

TEST(HttpHead, CompleteAndIncomplete) {
    EXPECT_EQ(parse_http_head("GET /health HTTP/1.1\r\nHost: x\r\n", limits()).state, HeadState::incomplete);
    EXPECT_EQ(parse_http_head("", limits()).state, HeadState::incomplete);
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const HttpHead h = parse_http_head(get + "GET /next", limits());
    ASSERT_EQ(h.state, HeadState::complete);
    EXPECT_EQ(h.head_bytes, get.size());
    EXPECT_EQ(h.body_bytes, 0u);
    const HttpHead p = parse_http_head(post("content-length:  12 \r\nExpect: 100-continue\r\n"), limits());
    ASSERT_EQ(p.state, HeadState::complete);
    EXPECT_EQ(p.body_bytes, 12u);
    EXPECT_TRUE(p.expect_continue);
    const std::string head = post("content-length:  12 \r\nExpect: 100-continue\r\n");
    EXPECT_EQ(head.substr(p.expect_offset, p.expect_bytes), "Expect: 100-continue\r\n");
    EXPECT_EQ(parse_http_head("GET / HTTP/1.0\r\n\r\n", limits()).state, HeadState::complete);
}

// The front's own errors pick their body shape by the path (Anthropic's under /v1/messages), so a refused
// head still names it once the request line is in.
TEST(HttpHead, PathOfTheRequestLine) {
    EXPECT_EQ(parse_http_head("POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\n\r\n", limits()).path,
              "/v1/messages");
    const HttpHead big = parse_http_head("POST /v1/messages HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", limits());
    EXPECT_EQ(big.state, HeadState::refused);
    EXPECT_EQ(big.path, "/v1/messages");
    EXPECT_EQ(parse_http_head("POST /v1/mess", limits()).path, "");
    EXPECT_EQ(parse_http_head("GET /health HTTP/1.1\r\nHost", limits()).path, "/health");
    EXPECT_EQ(parse_http_head("GARBAGE\r\n\r\n", limits()).path, "");
}

TEST(HttpHead, ContentLengthCheckedBeforeTheBody) {
    const HttpHead big = parse_http_head(post("Content-Length: 1001\r\n"), limits());
    EXPECT_EQ(big.state, HeadState::refused);
    EXPECT_EQ(big.status, 413);
    EXPECT_EQ(big.code, "request_too_large");
    EXPECT_EQ(parse_http_head(post("Content-Length: 1000\r\n"), limits()).state, HeadState::complete);
    EXPECT_EQ(parse_http_head(post("Content-Length: 99999999999999999999999\r\n"), limits()).status, 413);
    for (const char* bad : {"-5", "12abc", "", "0x10", "1 2", "+3"}) {
        const HttpHead h = parse_http_head(post(std::string("Content-Length: ") + bad + "\r\n"), limits());
        EXPECT_EQ(h.state, HeadState::refused) << bad;
        EXPECT_EQ(h.status, 400) << bad;
        EXPECT_EQ(h.code, "invalid_content_length") << bad;
    }
    EXPECT_EQ(parse_http_head(post("Content-Length: 5\r\nContent-Length: 6\r\n"), limits()).status, 400);
    EXPECT_EQ(parse_http_head(post("Content-Length: 5\r\nContent-Length: 5\r\n"), limits()).state, HeadState::complete);
    EXPECT_EQ(parse_http_head(post("Transfer-Encoding: chunked\r\n"), limits()).status, 411);
}

TEST(HttpHead, MalformedAndOversizedHeads) {
    EXPECT_EQ(parse_http_head("GARBAGE\r\n\r\n", limits()).status, 400);
    EXPECT_EQ(parse_http_head("GET / HTTP/2.0\r\n\r\n", limits()).status, 505);
    EXPECT_EQ(parse_http_head("GET / HTTP/1.1\r\nno colon here\r\n\r\n", limits()).status, 400);
    const std::string huge = "GET / HTTP/1.1\r\nX-Pad: " + std::string(2000, 'a');
    EXPECT_EQ(parse_http_head(huge, limits()).status, 431);  // still arriving, already too long
    EXPECT_EQ(parse_http_head(huge + "\r\n\r\n", limits()).status, 431);
}

TEST(HttpGuard, LoopbackAddressesAndHostNames) {
    for (const char* a : {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]"})
        EXPECT_TRUE(is_loopback_address(a)) << a;
    for (const char* a : {"0.0.0.0", "192.168.1.2", "127.0.0", "127.0.0.256", "example.com", "::", "1.127.0.0.1"})
        EXPECT_FALSE(is_loopback_address(a)) << a;
    EXPECT_EQ(host_name("LocalHost:8080"), "localhost");
    EXPECT_EQ(host_name("[::1]:8080"), "::1");
    EXPECT_EQ(host_name("127.0.0.1"), "127.0.0.1");
    EXPECT_EQ(host_name("localhost."), "localhost");
}

TEST(HttpGuard, HostHeader) {
    BrowserPolicy loop;
    loop.loopback_hosts_only = true;
    for (const char* h : {"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost", ""})
        EXPECT_TRUE(host_allowed(loop, h)) << h;
    // DNS rebinding: the attacker's name resolves to 127.0.0.1, but the Host header still carries it.
    for (const char* h : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example"})
        EXPECT_FALSE(host_allowed(loop, h)) << h;
    loop.host_allow = {"MyBox.lan"};
    EXPECT_TRUE(host_allowed(loop, "mybox.lan:8080"));
    EXPECT_FALSE(host_allowed(loop, "other.lan"));
    // Listening beyond the loopback: any Host, unless --host-allow names some.
    BrowserPolicy open;
    EXPECT_TRUE(host_allowed(open, "anything.example"));
    open.host_allow = {"server.lan"};
    EXPECT_TRUE(host_allowed(open, "server.lan:80"));
    EXPECT_FALSE(host_allowed(open, "anything.example"));
    open.host_allow = {"*"};
    EXPECT_TRUE(host_allowed(open, "anything.example"));
}

TEST(HttpGuard, JsonMediaType) {
    for (const char* t :
         {"application/json", "Application/JSON", "application/json; charset=utf-8", " application/json "})
        EXPECT_TRUE(is_json_media_type(t)) << t;
    for (const char* t : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
                          "application/jsonx", "text/plain; application/json"})
        EXPECT_FALSE(is_json_media_type(t)) << t;
}

TEST(HttpGuard, Origin) {
    BrowserPolicy p;
    EXPECT_EQ(check_origin(p, "", "127.0.0.1:8080"), OriginCheck::none);
    EXPECT_EQ(check_origin(p, "http://127.0.0.1:8080", "127.0.0.1:8080"), OriginCheck::same_origin);
    EXPECT_EQ(check_origin(p, "http://evil.example", "127.0.0.1:8080"), OriginCheck::refused);
    EXPECT_EQ(check_origin(p, "null", "127.0.0.1:8080"), OriginCheck::refused);
    EXPECT_EQ(check_origin(p, "http://127.0.0.1:9999", "127.0.0.1:8080"), OriginCheck::refused);
    p.cors_origins = {"http://localhost:3000"};
    EXPECT_EQ(check_origin(p, "http://localhost:3000", "127.0.0.1:8080"), OriginCheck::allowed);
    EXPECT_EQ(check_origin(p, "http://localhost:3001", "127.0.0.1:8080"), OriginCheck::refused);
    p.cors_origins = {"*"};
    EXPECT_EQ(check_origin(p, "http://anywhere.example", "127.0.0.1:8080"), OriginCheck::allowed);
}
