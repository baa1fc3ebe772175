#include "vibepit/runtime/health.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <system_error>

#include <asio/post.hpp>

#include "vibepit/http/head.hpp"

namespace vibepit::runtime {
namespace {

using steady = std::chrono::steady_clock;
constexpr std::size_t kMaxHead = 2048;
constexpr int kClientMs = 500;  // a client has this long to send its head and take the answer

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now().time_since_epoch())
      .count();
}

// The socket address of an endpoint, and its length.
socklen_t to_sockaddr(const config::Endpoint& ep, sockaddr_storage& ss) {
  ss = {};
  const std::string text = ep.addr.to_string();
  if (ep.addr.v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(ep.port);
    ::inet_pton(AF_INET6, text.c_str(), &a->sin6_addr);
    return sizeof(sockaddr_in6);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  a->sin_family = AF_INET;
  a->sin_port = htons(ep.port);
  ::inet_pton(AF_INET, text.c_str(), &a->sin_addr);
  return sizeof(sockaddr_in);
}

void set_timeouts(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::string response(int status, const char* reason, const std::string& body, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                    "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                    std::to_string(body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

int make_stop_fd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return fd;
}

void signal_stop(int fd) {
  const std::uint64_t one = 1;
  if (::write(fd, &one, sizeof one) < 0) {
    // An eventfd write fails only when its counter is full: it is signalled already.
  }
}

}  // namespace

HealthServer::HealthServer(const std::vector<config::Endpoint>& listen, HealthChecks checks)
    : checks_(std::move(checks)) {
  for (const auto& ep : listen) {
    sockaddr_storage ss;
    const socklen_t len = to_sockaddr(ep, ss);
    const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "health socket");
    listeners_.push_back(fd);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ep.addr.v6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 64) != 0) {
      const int err = errno;
      for (int l : listeners_) ::close(l);
      throw std::system_error(err, std::generic_category(), "health-listen " + ep.to_string());
    }
  }
  stop_ = make_stop_fd();
}

HealthServer::~HealthServer() {
  signal_stop(stop_);
  if (thread_.joinable()) thread_.join();
  for (int fd : listeners_) ::close(fd);
  ::close(stop_);
}

std::vector<config::Endpoint> HealthServer::listening() const {
  std::vector<config::Endpoint> out;
  for (int fd : listeners_) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    char text[INET6_ADDRSTRLEN] = {};
    std::uint16_t port = 0;
    if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      port = ntohs(a->sin6_port);
    } else {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      port = ntohs(a->sin_port);
    }
    out.push_back({*policy::IpAddr::parse(text), port});
  }
  return out;
}

void HealthServer::start() {
  thread_ = std::thread([this] { run(); });
}

void HealthServer::run() {
  std::vector<pollfd> fds;
  for (int fd : listeners_) fds.push_back({fd, POLLIN, 0});
  fds.push_back({stop_, POLLIN, 0});
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds.back().revents != 0) return;
    for (std::size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int c = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;  // gone already, or out of descriptors: the next poll retries
      serve(c);
      ::close(c);
    }
  }
}

// One request, one answer. The client has kClientMs for each read and write: a slow one
// delays the next by at most that, and never holds the thread.
void HealthServer::serve(int fd) {
  set_timeouts(fd, kClientMs);
  std::string bytes;
  http::RequestHead head;
  http::ParseResult parsed;
  const auto deadline = steady::now() + std::chrono::milliseconds(kClientMs);
  char buf[512];
  // The proxy's own head parser (fuzzed): strict, and bounded by kMaxHead.
  while (parsed.state == http::ParseState::incomplete && steady::now() < deadline) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    bytes.append(buf, static_cast<std::size_t>(n));
    parsed = http::parse_request_head(bytes, kMaxHead, head);
  }
  std::string out;
  if (parsed.state != http::ParseState::complete) {
    out = response(400, "Bad Request", "a GET of /livez or /readyz\n", false);
  } else {
    const bool is_head = head.method == "HEAD";
    const std::function<std::string()>* check = head.target == "/livez"    ? &checks_.live
                                                : head.target == "/readyz" ? &checks_.ready
                                                                           : nullptr;
    if (check == nullptr) {
      out = response(404, "Not Found", "only /livez and /readyz are here\n", is_head);
    } else if (head.method != "GET" && !is_head) {
      out = response(405, "Method Not Allowed", "GET or HEAD\n", false);
    } else {
      const std::string why = *check ? (*check)() : std::string();
      out = why.empty() ? response(200, "OK", "ok\n", is_head)
                        : response(503, "Service Unavailable", why, is_head);
    }
  }
  std::size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
  // A client whose head was refused may still be sending: closing with its bytes unread
  // would reset the connection, and the answer with it. Read what comes, briefly, first.
  ::shutdown(fd, SHUT_WR);
  set_timeouts(fd, 100);
  for (std::size_t drained = 0; drained < 65536;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    drained += static_cast<std::size_t>(n);
  }
}

std::string loops_turning(const std::vector<Loop>& loops, std::chrono::milliseconds within) {
  auto turned = std::make_shared<std::vector<std::atomic<bool>>>(loops.size());
  for (std::size_t i = 0; i < loops.size(); ++i) {
    asio::post(*loops[i].io, [turned, i] { (*turned)[i].store(true, std::memory_order_release); });
  }
  const auto deadline = steady::now() + within;
  std::string why;
  for (std::size_t i = 0; i < loops.size(); ++i) {
    while (!(*turned)[i].load(std::memory_order_acquire) && steady::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!(*turned)[i].load(std::memory_order_acquire)) {
      why += "I/O thread " + std::to_string(i) + " did not turn within " +
             std::to_string(within.count()) + " ms\n";
    }
  }
  return why;
}

UpstreamProbe::UpstreamProbe(std::vector<config::Endpoint> servers,
                             std::chrono::milliseconds interval, std::chrono::milliseconds timeout)
    : servers_(std::move(servers)), interval_(interval), timeout_(timeout), stop_(make_stop_fd()) {
  thread_ = std::thread([this] { run(); });
}

UpstreamProbe::~UpstreamProbe() {
  signal_stop(stop_);
  if (thread_.joinable()) thread_.join();
  ::close(stop_);
}

std::string UpstreamProbe::answering() const {
  const auto last = last_answer_ms_.load(std::memory_order_acquire);
  if (last >= 0 && now_ms() - last <= 3 * interval_.count()) return {};
  std::string why = "no upstream DNS server (" + config::to_string(servers_) + ") answered ";
  why += last < 0 ? "yet" : "in the last " + std::to_string(now_ms() - last) + " ms";
  return why + "\n";
}

void UpstreamProbe::run() {
  for (;;) {
    for (const auto& s : servers_) {
      if (ask(s)) {
        last_answer_ms_.store(now_ms(), std::memory_order_release);
        break;
      }
    }
    pollfd p{stop_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(interval_.count())) != 0) return;
  }
}

bool UpstreamProbe::ask(const config::Endpoint& server) {
  sockaddr_storage ss;
  const socklen_t len = to_sockaddr(server, ss);
  const int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  static thread_local std::mt19937 rng(std::random_device{}());
  const auto id = static_cast<std::uint16_t>(rng());
  // A query for the root's NS records: id, RD, one question; the root name; NS; IN.
  const std::uint8_t query[17] = {static_cast<std::uint8_t>(id >> 8),
                                  static_cast<std::uint8_t>(id),
                                  0x01,
                                  0x00,
                                  0x00,
                                  0x01,
                                  0,
                                  0,
                                  0,
                                  0,
                                  0,
                                  0,
                                  0x00,
                                  0x00,
                                  0x02,
                                  0x00,
                                  0x01};
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 &&
      ::send(fd, query, sizeof query, 0) == static_cast<ssize_t>(sizeof query)) {
    const auto deadline = steady::now() + timeout_;
    std::array<std::uint8_t, 512> reply{};
    while (!ok && steady::now() < deadline) {
      pollfd p[2] = {{fd, POLLIN, 0}, {stop_, POLLIN, 0}};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      if (::poll(p, 2, static_cast<int>(std::max<std::int64_t>(1, left.count()))) <= 0 ||
          p[1].revents != 0)
        break;
      const ssize_t n = ::recv(fd, reply.data(), reply.size(), 0);
      // The reply to this query: its id, and the QR bit set.
      ok = n >= 12 && reply[0] == query[0] && reply[1] == query[1] && (reply[2] & 0x80) != 0;
      if (n < 0) break;  // ICMP unreachable: nobody there
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace vibepit::runtime
