#include "server/http_guard.h"

#include <fmt/format.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "server/openai_api.h"

namespace skim::server {

std::string error_json(const std::string& message, const std::string& type, const std::string& param) {
  return error_body(message, type, param).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

using Clock = std::chrono::steady_clock;

// A request is cut to make room only once it has been reading this long: a client on a normal
// link sends its request well within it.
constexpr auto kMinAgeToEvict = std::chrono::seconds(1);
// httplib parses form bodies (curl -d's default type) itself, and refuses those over 8 KB.
constexpr size_t kFormBodyLimit = 8192;
constexpr size_t kMaxHeaders = 100;

struct Refusal {
  int status = 0;  // 0: close without an answer (the client left, or sent nothing)
  std::string message;
};

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    default: return "Error";
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of a Content-Length header, or nullopt when it is not a plain decimal number.
std::optional<uint64_t> parse_length(std::string_view v) {
  v = trim(v);
  if (v.empty() || v.size() > 18) return std::nullopt;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + uint64_t(c - '0');
  }
  return n;
}

// The framing headers of a request head, checked one by one.
struct HeadFacts {
  std::optional<uint64_t> length;
  bool chunked = false, form = false;
  std::string encoding;
};

std::optional<Refusal> read_header(std::string_view line, HeadFacts& f) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Refusal{400, "malformed header line (no ':')"};
  const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
  if (iequals(name, "Content-Length")) {
    const auto n = parse_length(value);
    if (!n) return Refusal{400, fmt::format("Content-Length '{}' is not a byte count", value.substr(0, 40))};
    if (f.length && *f.length != *n) return Refusal{400, "two different Content-Length headers"};
    f.length = n;
  } else if (iequals(name, "Transfer-Encoding")) {
    if (!iequals(value, "chunked")) return Refusal{501, fmt::format("Transfer-Encoding '{}' is not supported (chunked is)", value.substr(0, 40))};
    f.chunked = true;
  } else if (iequals(name, "Content-Encoding")) {
    f.encoding = std::string(value.substr(0, 40));
  } else if (iequals(name, "Content-Type")) {
    f.form = value.substr(0, 33) == "application/x-www-form-urlencoded";
  }
  return std::nullopt;
}

// A complete head (up to its blank line): the request line's target and the framing headers.
std::optional<Refusal> check_head(std::string_view head, const GuardLimits& lim) {
  const size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return Refusal{400, "malformed request line"};
  const size_t target = sp2 - sp1 - 1;
  if (target > lim.max_uri)
    return Refusal{414, fmt::format("the request target has {} bytes; the limit is {}", target, lim.max_uri)};
  HeadFacts f;
  size_t count = 0;
  for (size_t at = eol + 2; at < head.size();) {
    const size_t end = std::min(head.find("\r\n", at), head.size());
    if (end > at) {
      if (++count > kMaxHeaders) return Refusal{431, fmt::format("more than {} header lines", kMaxHeaders)};
      if (auto r = read_header(head.substr(at, end - at), f)) return r;
    }
    at = end + 2;
  }
  if (f.chunked && f.length) return Refusal{400, "both Content-Length and Transfer-Encoding: chunked"};
  if (!f.encoding.empty() && !iequals(f.encoding, "identity"))
    return Refusal{415, fmt::format("compressed bodies (Content-Encoding: {}) are not accepted; send the JSON uncompressed",
                                    f.encoding)};
  if (f.length && *f.length > lim.max_body)
    return Refusal{413, fmt::format("the body has {} bytes; this server accepts at most {} (skim serve --max-body)",
                                    *f.length, lim.max_body)};
  if (f.form && (f.chunked || (f.length && *f.length > kFormBodyLimit)))
    return Refusal{415, "a body sent as application/x-www-form-urlencoded (curl -d's default) is limited to 8 KB; "
                        "send JSON: -H 'Content-Type: application/json' --data-binary @file"};
  return std::nullopt;
}

// A head that is not complete yet but already too long.
std::optional<Refusal> check_partial_head(std::string_view seen, const GuardLimits& lim) {
  const bool line_done = seen.find("\r\n") != std::string_view::npos;
  if (!line_done && seen.size() > lim.max_uri + 64)
    return Refusal{414, fmt::format("the request line exceeds {} bytes; the target limit is {}", seen.size(), lim.max_uri)};
  if (seen.size() > lim.max_head)
    return Refusal{431, fmt::format("the request head exceeds {} bytes (request line and headers)", lim.max_head)};
  return std::nullopt;
}

// Waits for the request head by peeking (httplib then reads it for real) and checks it.
std::optional<Refusal> gate(int fd, const GuardLimits& lim, Clock::time_point deadline) {
  std::string buf(lim.max_head + 1, '\0');
  ssize_t last = 0;
  int nap_ms = 1;
  while (true) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return Refusal{};  // closed before a whole head
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Refusal{};
    if (n > 0) {
      const std::string_view seen(buf.data(), size_t(n));
      if (const size_t end = seen.find("\r\n\r\n"); end != std::string_view::npos)
        return check_head(seen.substr(0, end + 2), lim);
      if (auto r = check_partial_head(seen, lim)) return r;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Refusal{408, fmt::format("the request head did not arrive within {} ms", lim.request_timeout.count())};
    if (n <= 0) {  // nothing yet: sleep until bytes arrive
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, int(std::min<long long>(left, 200)));
      continue;
    }
    // Part of a head: peeking cannot wait for *more* bytes, so nap, longer while none come.
    nap_ms = n > last ? 1 : std::min(nap_ms * 2, 50);
    last = n;
    std::this_thread::sleep_for(std::chrono::milliseconds(nap_ms));
  }
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(size_t(n));
  }
}

// Answers with `r` (when it has a status) and closes. The client may still be sending: its
// bytes are read and dropped for a moment, since closing a socket with unread bytes resets the
// connection and the client could lose the answer.
void reply_and_close(int fd, const Refusal& r) {
  if (r.status != 0) {
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const std::string body = error_json(r.message, "invalid_request_error");
    send_all(fd, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                             "Connection: close\r\n\r\n{}",
                             r.status, reason(r.status), body.size(), body));
    shutdown(fd, SHUT_WR);
    char sink[16384];
    const auto until = Clock::now() + std::chrono::milliseconds(250);
    size_t dropped = 0;
    while (Clock::now() < until && dropped < (size_t(4) << 20)) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n <= 0) break;
      dropped += size_t(n);
    }
  }
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

}  // namespace

// Every live connection, for making room. Each entry holds a duplicate of the connection's
// socket, closed only here, so that a cut never reaches a socket number that was closed and
// handed by the system to another connection.
struct GuardedHttpServer::Registry {
  struct Conn {
    int fd;
    Clock::time_point since;
    bool reading = true;
    bool cut = false;
  };
  std::mutex mu;
  std::list<Conn> conns;
  std::atomic<uint64_t> cut{0}, refused{0};

  std::list<Conn>::iterator add(int sock) {
    std::lock_guard<std::mutex> lk(mu);
    conns.push_back(Conn{dup(sock), Clock::now()});
    return std::prev(conns.end());
  }
  void remove(std::list<Conn>::iterator c) {
    std::lock_guard<std::mutex> lk(mu);
    if (c->fd >= 0) close(c->fd);
    conns.erase(c);
  }
  void received(std::list<Conn>::iterator c) {
    std::lock_guard<std::mutex> lk(mu);
    c->reading = false;
  }
  // The connection reading its request longest, when it has been reading for a while: its
  // reads fail at once and its worker moves on.
  void cut_oldest_reader() {
    std::lock_guard<std::mutex> lk(mu);
    Conn* oldest = nullptr;
    for (Conn& c : conns)
      if (c.reading && !c.cut && (!oldest || c.since < oldest->since)) oldest = &c;
    if (!oldest || Clock::now() - oldest->since < kMinAgeToEvict) return;
    if (oldest->fd >= 0) shutdown(oldest->fd, SHUT_RDWR);
    oldest->cut = true;
    cut += 1;
  }
};

namespace {

// httplib's view of one connection: reads fail once the request's deadline has passed (and
// say so), writes wait at most the I/O timeout for a client that does not read.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}

  bool is_readable() const override {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) {
      timed_out_ = true;
      return false;
    }
    return wait(POLLIN, int(std::min<long long>(left, kIoTimeoutMs)));
  }
  bool is_writable() const override { return wait(POLLOUT, kIoTimeoutMs); }
  ssize_t read(char* ptr, size_t size) override {
    if (!is_readable()) return -1;
    ssize_t n;
    do n = recv(fd_, ptr, size, 0);
    while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  socket_t socket() const override { return fd_; }

  void request_received() { deadline_ = Clock::time_point::max(); }
  bool timed_out() const { return timed_out_; }

 private:
  static constexpr int kIoTimeoutMs = 5000;
  bool wait(short events, int timeout_ms) const {
    pollfd p{fd_, events, 0};
    int r;
    do r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    return r > 0 && !(p.revents & (POLLERR | POLLNVAL));
  }
  void address(bool local, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    const int r = local ? getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len)
                        : getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    if (r != 0) return;
    char host[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
      port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
      port = ntohs(in->sin6_port);
    }
    ip = host;
  }

  int fd_;
  Clock::time_point deadline_;
  mutable bool timed_out_ = false;
};

thread_local GuardedHttpServer::Registry* tl_registry = nullptr;
thread_local std::list<GuardedHttpServer::Registry::Conn>::iterator tl_conn;
thread_local DeadlineStream* tl_stream = nullptr;

}  // namespace

// Workers serving connections, a bounded queue in front of them, served newest first. httplib
// hands each accepted connection to enqueue() on its listening thread.
class GuardedHttpServer::Pool : public httplib::TaskQueue {
 public:
  Pool(int threads, std::shared_ptr<Registry> registry) : registry_(std::move(registry)) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    const bool starved = idle_ < jobs_.size();
    lk.unlock();
    cv_.notify_one();
    if (starved) registry_->cut_oldest_reader();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        ++idle_;
        cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping, and nothing left to serve
        // Newest first: a connection that just arrived (a probe, a fresh request) is served
        // before older ones still queued behind slow clients, which their deadline ends anyway.
        fn = std::move(jobs_.back());
        jobs_.pop_back();
      }
      fn();
    }
  }

  std::shared_ptr<Registry> registry_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t idle_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

GuardedHttpServer::GuardedHttpServer(const GuardLimits& limits)
    : limits_(limits), registry_(std::make_shared<Registry>()) {
  new_task_queue = [l = limits_, r = registry_] { return new Pool(l.threads, r); };
  set_payload_max_length(limits_.max_body);  // chunked bodies (the gate checks Content-Length)
}

GuardedHttpServer::~GuardedHttpServer() = default;

void GuardedHttpServer::request_received() {
  if (tl_registry) tl_registry->received(tl_conn);
  if (tl_stream) tl_stream->request_received();
}

bool GuardedHttpServer::request_timed_out() { return tl_stream && tl_stream->timed_out(); }

bool GuardedHttpServer::client_gone() {
  if (!tl_stream) return false;
  const int fd = tl_stream->socket();
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c = 0;
  return (p.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

uint64_t GuardedHttpServer::connections_cut() const { return registry_->cut.load(); }
uint64_t GuardedHttpServer::connections_refused() const { return registry_->refused.load(); }

// Replaces httplib's own: the gate first, then one request over a DeadlineStream, then close.
bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  auto conn = registry_->add(sock);
  const auto deadline = conn->since + limits_.request_timeout;
  if (std::optional<Refusal> r = gate(sock, limits_, deadline)) {
    if (r->status != 0) registry_->refused += 1;
    registry_->remove(conn);
    reply_and_close(sock, *r);
    return false;
  }
  bool ok = false;
  {
    DeadlineStream stream(sock, deadline);
    tl_registry = registry_.get();
    tl_conn = conn;
    tl_stream = &stream;
    bool closed = false;
    ok = process_request(stream, /*close_connection=*/true, closed, nullptr);
    tl_registry = nullptr;
    tl_stream = nullptr;
  }
  registry_->remove(conn);
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ok;
}

}  // namespace skim::server
