// The per-thread current exchange (see exchange.h).
#include "server/exchange.h"

#include <sys/socket.h>

#include <cerrno>

namespace dsv4::server {

namespace {
thread_local Exchange* t_exchange = nullptr;
}

bool Exchange::client_gone() const {
    if (fd < 0) return false;
    char byte;
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

Exchange* current_exchange() {
    return t_exchange;
}

ExchangeScope::ExchangeScope(Exchange* e) : previous_(t_exchange) {
    t_exchange = e;
}

ExchangeScope::~ExchangeScope() {
    t_exchange = previous_;
}

}  // namespace dsv4::server
