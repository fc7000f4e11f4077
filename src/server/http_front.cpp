// The connection front (see http_front.h). The epoll thread is the only one touching a connection that is
// not being served; a connection being served belongs to one worker until it is given back (or closed).
#include "server/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/openai_request.h"
#include "server/openai_response.h"

namespace dsv4::server {

namespace {

using Clock = std::chrono::steady_clock;

// A connection over its limit, or one answered by the front, lingers this long reading (and dropping) what
// the client still sends, so that closing does not reset the connection before the client has read the answer.
constexpr auto kLinger = std::chrono::milliseconds(1000);
// Connections lingering above the connection cap (answered 503); beyond that they are closed at once.
constexpr size_t kMaxOverflowLinger = 256;
constexpr int kTickMs = 100;  // deadline checks

enum class Phase { idle, head, body, linger };

struct Connection {
    int fd = -1;
    std::string buf;
    Phase phase = Phase::idle;
    Clock::time_point deadline;
    HttpHead head;
    bool continue_sent = false;
    bool overflow = false;     // lingering after a 503 for the connection cap
    bool peer_closed = false;  // the client will send nothing more: close after the answer
    size_t reserved = 0;       // body bytes this connection counts against the front's budget
    size_t served = 0;
    std::string remote_ip, local_ip;
    int remote_port = 0, local_port = 0;
};

void endpoint(const sockaddr_storage& ss, std::string& ip, int& port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
        port = ntohs(a->sin6_port);
    }
    ip = buf;
}

const char* reason_phrase(int status) {
    switch (status) {
        case 400:
            return "Bad Request";
        case 408:
            return "Request Timeout";
        case 411:
            return "Length Required";
        case 413:
            return "Payload Too Large";
        case 431:
            return "Request Header Fields Too Large";
        case 503:
            return "Service Unavailable";
        case 505:
            return "HTTP Version Not Supported";
        default:
            return "Error";
    }
}

// A complete HTTP response with a JSON error body (OpenAI's shape unless `error_body` says otherwise),
// closing the connection.
std::string canned_response(const FrontOptions& opt, const std::string& path, int status, const std::string& code,
                            const std::string& message) {
    ApiError e;
    e.status = status;
    e.type = status >= 500 ? "server_error" : "invalid_request_error";
    e.code = code;
    e.message = message;
    const std::string body = opt.error_body ? opt.error_body(path, e) : dump_json(error_json(e));
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n";
    if (status == 503) out += "Retry-After: 1\r\n";
    return out + "\r\n" + body;
}

// The request's bytes, already received, for httplib to parse; writes go to the socket.
class ConnectionStream final : public httplib::Stream {
public:
    ConnectionStream(const Connection& c, size_t request_bytes, int write_timeout_ms)
        : c_(c), size_(request_bytes), write_timeout_ms_(write_timeout_ms) {}

    bool is_readable() const override { return offset_ < size_; }
    // Also false once the client has gone, so a stream stops at its next chunk.
    bool is_writable() const override {
        pollfd p{c_.fd, POLLOUT, 0};
        if (poll(&p, 1, write_timeout_ms_) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
        char byte;
        const ssize_t n = recv(c_.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }
    ssize_t read(char* ptr, size_t size) override {
        const size_t n = std::min(size, size_ - offset_);
        std::memcpy(ptr, c_.buf.data() + offset_, n);
        offset_ += n;
        return static_cast<ssize_t>(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
        size_t done = 0;
        while (done < size) {
            const ssize_t n = send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL);
            if (n > 0) {
                done += static_cast<size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pollfd p{c_.fd, POLLOUT, 0};
                if (poll(&p, 1, write_timeout_ms_) > 0 && !(p.revents & POLLERR)) continue;
            }
            return -1;
        }
        return static_cast<ssize_t>(size);
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.remote_ip;
        port = c_.remote_port;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.local_ip;
        port = c_.local_port;
    }
    socket_t socket() const override { return c_.fd; }

private:
    const Connection& c_;
    size_t size_;
    size_t offset_ = 0;
    int write_timeout_ms_;
};

}  // namespace

struct HttpFront::Impl {
    Impl(FrontOptions o, Serve s) : opt(std::move(o)), serve(std::move(s)) {}

    FrontOptions opt;
    Serve serve;
    int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
    std::atomic<bool> stopping{false};
    std::atomic<size_t> n_open{0};

    // epoll thread only
    std::unordered_map<int, std::unique_ptr<Connection>> conns;
    size_t n_overflow = 0;
    // Bodies being received, by their Content-Length: bounded so that many connections announcing large
    // bodies cannot make the server buffer more than this at once (the rest get 503).
    size_t reserved_bytes = 0;
    size_t reserve_limit = 0;

    void release(Connection& c) {
        reserved_bytes -= c.reserved;
        c.reserved = 0;
    }

    // handed to workers / given back by them
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<Connection>> ready;      // complete requests waiting for a worker
    std::vector<std::unique_ptr<Connection>> returned;  // kept-alive connections back from workers
    bool workers_exit = false;

    void wake() {
        const uint64_t one = 1;
        (void)!::write(wake_fd, &one, sizeof(one));
    }
    void close_connection(int fd);
    void watch(Connection& c);
    void accept_all();
    void on_readable(Connection& c);
    void advance(Connection& c);
    void answer_and_linger(Connection& c, int status, const std::string& code, const std::string& message);
    void dispatch(int fd);
    void take_returned();
    void check_deadlines();
    void worker();
};

void HttpFront::Impl::close_connection(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second->overflow) --n_overflow;
    release(*it->second);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns.erase(it);
    --n_open;
}

void HttpFront::Impl::watch(Connection& c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c.fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev);
}

void HttpFront::Impl::accept_all() {
    for (;;) {
        sockaddr_storage peer{};
        socklen_t len = sizeof(peer);
        const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return;  // EAGAIN, or out of descriptors (EMFILE): the rest wait in the backlog
        }
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        endpoint(peer, c->remote_ip, c->remote_port);
        sockaddr_storage local{};
        len = sizeof(local);
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
            endpoint(local, c->local_ip, c->local_port);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        const bool over = n_open.load() >= opt.max_connections;
        if (over && n_overflow >= kMaxOverflowLinger) {
            ::close(fd);
            continue;
        }
        ++n_open;
        Connection& ref = *c;
        conns.emplace(fd, std::move(c));
        watch(ref);
        if (over) {
            ref.overflow = true;
            ++n_overflow;
            answer_and_linger(
                ref, 503, "too_many_connections",
                "the server has too many open connections (" + std::to_string(opt.max_connections) + "); retry later");
            continue;
        }
        ref.phase = Phase::idle;
        ref.deadline = Clock::now() + std::chrono::milliseconds(opt.header_timeout_ms);
    }
}

void HttpFront::Impl::answer_and_linger(Connection& c, int status, const std::string& code,
                                        const std::string& message) {
    const std::string r = canned_response(opt, c.head.path, status, code, message);
    // Small enough for the socket buffer of a fresh or drained connection; a client that cannot take it loses it.
    (void)!send(c.fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(c.fd, SHUT_WR);
    c.phase = Phase::linger;
    c.buf.clear();
    release(c);
    c.deadline = Clock::now() + kLinger;
}

void HttpFront::Impl::on_readable(Connection& c) {
    char chunk[16384];
    // Read what is there, but no more than the request can need, so one connection cannot pin much memory.
    const size_t cap = opt.head.max_head_bytes + opt.head.max_body_bytes + sizeof(chunk);
    for (;;) {
        const ssize_t n = recv(c.fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            if (c.phase == Phase::linger) continue;
            c.buf.append(chunk, static_cast<size_t>(n));
            if (c.buf.size() >= cap) break;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n == 0 && c.phase != Phase::linger && !c.buf.empty()) {
            // The client closed its sending side after a request: serve what is complete, then close.
            c.peer_closed = true;
            const int fd = c.fd;
            advance(c);
            if (conns.count(fd) && conns[fd]->phase != Phase::linger) close_connection(fd);
            return;
        }
        // Closed by the client (or reset): whatever was half received is dropped.
        close_connection(c.fd);
        return;
    }
    if (c.phase != Phase::linger) advance(c);
}

void HttpFront::Impl::advance(Connection& c) {
    if (c.phase == Phase::idle || c.phase == Phase::head) {
        // Blank lines between keep-alive requests are allowed (RFC 9112 2.2).
        size_t skip = 0;
        while (skip + 1 < c.buf.size() && c.buf[skip] == '\r' && c.buf[skip + 1] == '\n') skip += 2;
        if (skip) c.buf.erase(0, skip);
        if (c.buf.empty()) return;
        if (c.phase == Phase::idle) {
            c.phase = Phase::head;
            c.deadline = Clock::now() + std::chrono::milliseconds(opt.header_timeout_ms);
        }
        c.head = parse_http_head(c.buf, opt.head);
        if (c.head.state == HeadState::incomplete) return;
        if (c.head.state == HeadState::refused) {
            return answer_and_linger(c, c.head.status, c.head.code, c.head.message);
        }
        if (c.head.body_bytes > 0 && reserved_bytes + c.head.body_bytes > reserve_limit) {
            return answer_and_linger(c, 503, "server_busy",
                                     "the server is receiving too many request bodies at once; retry later");
        }
        c.reserved = c.head.body_bytes;
        reserved_bytes += c.reserved;
        c.phase = Phase::body;
        c.continue_sent = false;
        c.deadline = Clock::now() + std::chrono::milliseconds(opt.body_timeout_ms);
    }
    if (c.phase != Phase::body) return;
    if (c.buf.size() >= c.head.head_bytes + c.head.body_bytes) return dispatch(c.fd);
    if (c.head.expect_continue && !c.continue_sent) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!send(c.fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        c.continue_sent = true;
        // Answered here: without the header httplib does not send a second 100 Continue.
        c.buf.erase(c.head.expect_offset, c.head.expect_bytes);
        c.head.head_bytes -= c.head.expect_bytes;
        c.head.expect_continue = false;
    }
}

void HttpFront::Impl::dispatch(int fd) {
    auto it = conns.find(fd);
    std::unique_ptr<Connection> c = std::move(it->second);
    conns.erase(it);
    release(*c);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    {
        std::lock_guard<std::mutex> lk(mu);
        ready.push_back(std::move(c));
    }
    cv.notify_one();
}

void HttpFront::Impl::take_returned() {
    std::vector<std::unique_ptr<Connection>> back;
    {
        std::lock_guard<std::mutex> lk(mu);
        back.swap(returned);
    }
    for (auto& c : back) {
        const int fd = c->fd;
        if (stopping.load()) {
            ::close(fd);
            --n_open;
            continue;
        }
        Connection& ref = *c;
        conns.emplace(fd, std::move(c));
        watch(ref);
        ref.phase = Phase::idle;
        ref.deadline = Clock::now() + std::chrono::milliseconds(opt.keep_alive_timeout_ms);
        advance(ref);  // a pipelined request may already be complete
    }
}

void HttpFront::Impl::check_deadlines() {
    const auto now = Clock::now();
    std::vector<int> expired;
    for (auto& [fd, c] : conns)
        if (c->deadline <= now) expired.push_back(fd);
    for (int fd : expired) {
        Connection& c = *conns[fd];
        if (c.phase == Phase::head || c.phase == Phase::body) {
            answer_and_linger(
                c, 408, "request_timeout",
                c.phase == Phase::head
                    ? "the request head did not arrive within " + std::to_string(opt.header_timeout_ms) + " ms"
                    : "the request body did not arrive within " + std::to_string(opt.body_timeout_ms) + " ms");
        } else {
            close_connection(fd);  // idle, or done lingering
        }
    }
}

void HttpFront::Impl::worker() {
    for (;;) {
        std::unique_ptr<Connection> c;
        {
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] { return workers_exit || !ready.empty(); });
            if (ready.empty()) return;
            c = std::move(ready.front());
            ready.pop_front();
        }
        const size_t request_bytes = c->head.head_bytes + c->head.body_bytes;
        ++c->served;
        const bool last = stopping.load() || c->peer_closed || c->served >= opt.keep_alive_max_requests;
        bool closed = false;
        bool ok;
        {
            Exchange ex;
            ex.fd = c->fd;
            ex.received = Clock::now();
            ExchangeScope scope(&ex);
            ConnectionStream stream(*c, request_bytes, opt.write_timeout_ms);
            ok = serve(stream, last, closed);
        }
        c->buf.erase(0, request_bytes);
        c->head = HttpHead{};
        std::lock_guard<std::mutex> lk(mu);
        if (!ok || closed || last || stopping.load()) {
            ::close(c->fd);
            --n_open;
        } else {
            returned.push_back(std::move(c));
        }
        wake();
    }
}

HttpFront::HttpFront(FrontOptions options, Serve serve)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(serve))) {
    impl_->reserve_limit = std::max(impl_->opt.max_buffered_bytes, impl_->opt.head.max_body_bytes);
}

HttpFront::~HttpFront() {
    Impl& s = *impl_;
    for (auto& [fd, c] : s.conns) ::close(fd);
    if (s.listen_fd >= 0) ::close(s.listen_fd);
    if (s.epoll_fd >= 0) ::close(s.epoll_fd);
    if (s.wake_fd >= 0) ::close(s.wake_fd);
}

Result<int> HttpFront::bind() {
    Impl& s = *impl_;
    const std::string where = s.opt.host + ":" + std::to_string(s.opt.port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(s.opt.port);
    if (int rc = getaddrinfo(s.opt.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
        return make_error("cannot listen on " + where + ": " + gai_strerror(rc));
    }
    std::string why = "no usable address";
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        // SO_REUSEADDR allows a quick restart (TIME_WAIT); no SO_REUSEPORT, so a port clash is an error.
        int yes = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
            s.listen_fd = fd;
            break;
        }
        why = std::strerror(errno);
        ::close(fd);
    }
    freeaddrinfo(res);
    if (s.listen_fd < 0) return make_error("cannot listen on " + where + " (" + why + ")");
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
    std::string ip;
    int bound_port = 0;
    endpoint(ss, ip, bound_port);

    s.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s.epoll_fd < 0 || s.wake_fd < 0) return make_error(std::string("cannot create epoll: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = s.listen_fd;
    epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
    ev.data.fd = s.wake_fd;
    epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &ev);
    return bound_port;
}

Status HttpFront::run() {
    Impl& s = *impl_;
    if (s.listen_fd < 0) return make_error("HttpFront::run called before bind");
    std::vector<std::thread> workers;
    for (int i = 0; i < std::max(1, s.opt.workers); ++i) workers.emplace_back([&s] { s.worker(); });

    std::vector<epoll_event> events(256);
    auto next_tick = Clock::now();
    while (!s.stopping.load()) {
        const int n = epoll_wait(s.epoll_fd, events.data(), static_cast<int>(events.size()), kTickMs);
        for (int i = 0; i < n; ++i) {
            const int fd = events[i].data.fd;
            if (fd == s.listen_fd) {
                s.accept_all();
            } else if (fd == s.wake_fd) {
                uint64_t v;
                (void)!::read(s.wake_fd, &v, sizeof(v));
                s.take_returned();
            } else if (auto it = s.conns.find(fd); it != s.conns.end()) {
                s.on_readable(*it->second);
            }
        }
        if (Clock::now() >= next_tick) {
            s.check_deadlines();
            next_tick = Clock::now() + std::chrono::milliseconds(kTickMs);
        }
    }

    // Stop: no new connections, idle ones closed; requests being served finish (each answers "close").
    epoll_ctl(s.epoll_fd, EPOLL_CTL_DEL, s.listen_fd, nullptr);
    ::close(s.listen_fd);
    s.listen_fd = -1;
    std::vector<int> fds;
    for (auto& [fd, c] : s.conns) fds.push_back(fd);
    for (int fd : fds) s.close_connection(fd);
    {
        std::lock_guard<std::mutex> lk(s.mu);
        s.workers_exit = true;
    }
    s.cv.notify_all();
    for (auto& t : workers) t.join();
    s.take_returned();  // closes them: stopping is set
    return {};
}

void HttpFront::stop() {
    impl_->stopping = true;
    if (impl_->wake_fd >= 0) impl_->wake();
}

size_t HttpFront::open_connections() const {
    return impl_->n_open.load();
}

size_t raise_open_file_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlimit want = rl;
        want.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
    }
    return rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(rl.rlim_cur);
}

}  // namespace dsv4::server
