// GET / (see chat_page.h): the embedded page's bytes, generated into chat_page_data.cpp at build time.
#include "server/chat_page.h"

#include <cstddef>

namespace dsv4::server {

extern const char kChatPageHtml[];
extern const size_t kChatPageHtml_size;

void send_chat_page(httplib::Response& res) {
    res.status = 200;
    // The page runs only its own inline script and talks only to this server.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(kChatPageHtml, kChatPageHtml_size, "text/html; charset=utf-8");
}

}  // namespace dsv4::server
