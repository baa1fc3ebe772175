#include "vibepit/runtime/health.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
constexpr int kDrainMs = 100;   // and then this long, within those, to stop sending
constexpr std::size_t kMaxDrain = 65536;
constexpr std::size_t kMaxClients = 32;  // at once; past this the oldest is closed

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

// A connection to the health port, from accept to close.
struct HealthServer::Client {
  enum class State { reading, writing, draining };
  int fd = -1;
  State state = State::reading;
  steady::time_point deadline;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  std::size_t drained = 0;
};

void HealthServer::run() {
  std::vector<Client> clients;  // in the order they came: the first is the oldest
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    for (int fd : listeners_) fds.push_back({fd, POLLIN, 0});
    fds.push_back({stop_, POLLIN, 0});
    int wait_ms = -1;
    const auto now = steady::now();
    for (const auto& c : clients) {
      fds.push_back(
          {c.fd, static_cast<short>(c.state == Client::State::writing ? POLLOUT : POLLIN), 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(c.deadline - now).count();
      const int ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, kClientMs));
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[listeners_.size()].revents != 0) break;
    const std::size_t first = listeners_.size() + 1;
    for (std::size_t k = 0; k < clients.size(); ++k) {
      Client& c = clients[k];
      if (fds[first + k].revents != 0) step(c);
      if (c.fd >= 0 && steady::now() >= c.deadline) {
        ::close(c.fd);  // out of time: reading, writing, or draining
        c.fd = -1;
      }
    }
    std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
    for (std::size_t i = 0; i < listeners_.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = ::accept4(listeners_[i], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;  // gone already, or out of descriptors: the next poll retries
      if (clients.size() == kMaxClients) {
        // Full: the oldest goes. A prober's request comes with its connection and is
        // answered within the loop's next turn, so clients that only hold connections
        // open cannot keep it out.
        ::close(clients.front().fd);
        clients.erase(clients.begin());
      }
      Client c;
      c.fd = fd;
      c.deadline = steady::now() + std::chrono::milliseconds(kClientMs);
      clients.push_back(std::move(c));
      step(clients.back());  // its request may be here already
    }
  }
  for (const auto& c : clients) ::close(c.fd);
}

// Moves one client on as far as its socket allows: read the head (the proxy's own parser,
// fuzzed: strict, and bounded by kMaxHead), answer it, then read what it still sends for a
// moment before closing (closing with its bytes unread would reset the connection, and the
// answer with it). Closes the socket and sets fd to -1 when the client is done.
void HealthServer::step(Client& c) {
  char buf[512];
  if (c.state == Client::State::reading) {
    http::RequestHead head;
    http::ParseResult parsed;
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        ::close(c.fd);
        c.fd = -1;
        return;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      parsed = http::parse_request_head(c.in, kMaxHead, head);
      if (parsed.state != http::ParseState::incomplete) break;
    }
    c.out = answer(parsed.state == http::ParseState::complete ? &head : nullptr);
    c.in.clear();
    c.state = Client::State::writing;
  }
  if (c.state == Client::State::writing) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        ::close(c.fd);
        c.fd = -1;
        return;
      }
      c.sent += static_cast<std::size_t>(n);
    }
    ::shutdown(c.fd, SHUT_WR);
    c.state = Client::State::draining;
    c.deadline = std::min(c.deadline, steady::now() + std::chrono::milliseconds(kDrainMs));
  }
  for (;;) {  // draining
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.drained += n > 0 ? static_cast<std::size_t>(n) : 0;
    if (n <= 0 || c.drained >= kMaxDrain) {
      ::close(c.fd);
      c.fd = -1;
      return;
    }
  }
}

// The answer to a parsed head, or to a head that was not one (null).
std::string HealthServer::answer(const http::RequestHead* head) const {
  if (head == nullptr) return response(400, "Bad Request", "a GET of /livez or /readyz\n", false);
  const bool is_head = head->method == "HEAD";
  const std::function<std::string()>* check = head->target == "/livez"    ? &checks_.live
                                              : head->target == "/readyz" ? &checks_.ready
                                                                          : nullptr;
  if (check == nullptr)
    return response(404, "Not Found", "only /livez and /readyz are here\n", is_head);
  if (head->method != "GET" && !is_head)
    return response(405, "Method Not Allowed", "GET or HEAD\n", false);
  const std::string why = *check ? (*check)() : std::string();
  return why.empty() ? response(200, "OK", "ok\n", is_head)
                     : response(503, "Service Unavailable", why, is_head);
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
