// The chat page served at GET /: one static HTML file (src/server/chat_page.html, embedded into the binary
// at build time by cmake/embed_file.cmake) that talks to the server's own streaming chat completions.
#pragma once

#include <httplib.h>

namespace dsv4::server {

void send_chat_page(httplib::Response& res);

}  // namespace dsv4::server
