// `dns-relay`: the least a UDP DNS forwarder can do, in one of two shapes, as a yardstick for
// the DNS server's cost and tail at a fixed load (bench/dns_shapes.py). Per query it swaps
// the client's ID for one of its own, remembers the client, sends the datagram on to
// --upstream, and on the answer swaps the ID back and returns it. No policy, no cache, no
// record, no checks of the answer: what is left is the shape.
//   --shape epoll    one thread waits in epoll_wait() on the client socket and the upstream
//                    socket and drains each with recvmmsg(MSG_DONTWAIT) on a wake-up, as
//                    vibepit-proxy's I/O thread does;
//   --shape threads  a thread per socket blocks in recvmmsg(MSG_WAITFORONE), the ID map
//                    under a mutex between them, as dnsdist's receiver and responder do.
// IDs are a counter: this is a yardstick on a benchmark network, not a resolver.
#include "common.hpp"
#include "modes.hpp"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace vibepit::bench {
namespace {

constexpr int kBatch = 32;
constexpr std::size_t kSlot = 4096;

struct RelayOptions {
  std::string listen;
  std::string upstream;
  std::string shape = "epoll";
  double duration_s = 3600;
};

// Whom an ID of ours stands for.
struct Client {
  bool waiting = false;
  std::uint16_t id = 0;
  sockaddr_storage addr{};
  socklen_t len = 0;
};

struct IdMap {
  std::array<Client, 65536> slots{};
  std::uint16_t next = 0;
  std::mutex m;  // taken only in the threads shape
};

// One recvmmsg()'s worth of datagrams in, one sendmmsg()'s worth out.
struct Batch {
  std::array<std::array<std::uint8_t, kSlot>, kBatch> buf{};
  std::array<sockaddr_storage, kBatch> addr{};
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msg{};

  void prepare_receive() {
    for (int i = 0; i < kBatch; ++i) set(i, kSlot, &addr[i], sizeof addr[i]);
  }
  void set(int i, std::size_t len, sockaddr_storage* to, socklen_t to_len) {
    iov[i] = {buf[i].data(), len};
    msg[i].msg_hdr = {};
    msg[i].msg_hdr.msg_name = to;
    msg[i].msg_hdr.msg_namelen = to_len;
    msg[i].msg_hdr.msg_iov = &iov[i];
    msg[i].msg_hdr.msg_iovlen = 1;
  }
};

struct Counts {
  std::atomic<std::uint64_t> queries{0}, answers{0};
};

class Relay {
 public:
  Relay(int client_fd, int upstream_fd, bool locked)
      : client_(client_fd), upstream_(upstream_fd), locked_(locked) {}

  // Client datagrams in `in` go to the upstream with IDs of ours.
  void queries(Batch& in, int n, Batch& out) {
    const int filled = each(in, n, [&](int i, std::size_t len, int k) {
      const std::uint16_t ours = map_->next++;
      Client& c = map_->slots[ours];
      c.waiting = true;
      std::memcpy(&c.id, in.buf[i].data(), 2);
      c.len = in.msg[i].msg_hdr.msg_namelen;
      std::memcpy(&c.addr, &in.addr[i], c.len);
      std::memcpy(out.buf[k].data(), in.buf[i].data(), len);
      std::memcpy(out.buf[k].data(), &ours, 2);
      out.set(k, len, nullptr, 0);  // the upstream socket is connected
      return true;
    });
    send(upstream_, out, filled);
    counts.queries += static_cast<std::uint64_t>(filled);
  }

  // Upstream answers in `in` go back to their clients with the clients' IDs.
  void answers(Batch& in, int n, Batch& out) {
    const int filled = each(in, n, [&](int i, std::size_t len, int k) {
      std::uint16_t ours = 0;
      std::memcpy(&ours, in.buf[i].data(), 2);
      Client& c = map_->slots[ours];
      if (!c.waiting) return false;
      c.waiting = false;
      std::memcpy(out.buf[k].data(), in.buf[i].data(), len);
      std::memcpy(out.buf[k].data(), &c.id, 2);
      std::memcpy(&out.addr[k], &c.addr, c.len);
      out.set(k, len, &out.addr[k], c.len);
      return true;
    });
    send(client_, out, filled);
    counts.answers += static_cast<std::uint64_t>(filled);
  }

  // Drains `fd` until a short batch says its queue is empty.
  void drain(int fd, Batch& in, Batch& out) {
    for (;;) {
      in.prepare_receive();
      const int n = ::recvmmsg(fd, in.msg.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) return;
      if (fd == client_) {
        queries(in, n, out);
      } else {
        answers(in, n, out);
      }
      if (n < kBatch) return;
    }
  }

  int client_fd() const { return client_; }
  int upstream_fd() const { return upstream_; }
  Counts counts;

 private:
  // Calls place(i, length, k) for each of the n datagrams in `in` that can hold a DNS header,
  // under the map's lock in the threads shape; place() fills out's slot k and says whether
  // it did. Returns how many slots were filled.
  template <class Place>
  int each(Batch& in, int n, Place place) {
    std::unique_lock<std::mutex> g(map_->m, std::defer_lock);
    if (locked_) g.lock();
    int k = 0;
    for (int i = 0; i < n; ++i) {
      const std::size_t len = in.msg[i].msg_len;
      if (len < 12 || (in.msg[i].msg_hdr.msg_flags & MSG_TRUNC)) continue;
      if (place(i, len, k)) ++k;
    }
    return k;
  }

  static void send(int fd, Batch& out, int k) {
    int sent = 0;
    while (sent < k) {
      const int m = ::sendmmsg(fd, out.msg.data() + sent, static_cast<unsigned>(k - sent),
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (m <= 0) return;  // a full buffer drops the rest, as the network could
      sent += m;
    }
  }

  int client_, upstream_;
  bool locked_;
  std::unique_ptr<IdMap> map_ = std::make_unique<IdMap>();
};

void run_epoll(Relay& r, Clock::time_point until) {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
  for (int fd : {r.client_fd(), r.upstream_fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.fd = fd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  auto in = std::make_unique<Batch>(), out = std::make_unique<Batch>();
  std::array<epoll_event, 4> events{};
  // Both sockets may hold datagrams from before the registration.
  r.drain(r.client_fd(), *in, *out);
  r.drain(r.upstream_fd(), *in, *out);
  while (!stop_requested() && Clock::now() < until) {
    const int m = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 200);
    for (int j = 0; j < m; ++j) r.drain(events[j].data.fd, *in, *out);
  }
  ::close(ep);
}

void run_threads(Relay& r, Clock::time_point until) {
  auto loop = [&r, until](int fd) {
    timeval tv{0, 200'000};  // wakes to check the clock and the stop flag
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    auto in = std::make_unique<Batch>(), out = std::make_unique<Batch>();
    while (!stop_requested() && Clock::now() < until) {
      in->prepare_receive();
      const int n = ::recvmmsg(fd, in->msg.data(), kBatch, MSG_WAITFORONE, nullptr);
      if (n <= 0) continue;
      if (fd == r.client_fd()) {
        r.queries(*in, n, *out);
      } else {
        r.answers(*in, n, *out);
      }
    }
  };
  std::thread responder(loop, r.upstream_fd());
  loop(r.client_fd());
  responder.join();
}

int udp_socket(const tcp::endpoint& ep, const std::string& what) {
  const int fd = ::socket(ep.protocol().family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ConfigError("socket for " + what + ": " + std::strerror(errno));
  return fd;
}

ModeResult run_dns_relay(const RelayOptions& o) {
  const bool threads = o.shape == "threads";
  auto listen = parse_proxy(o.listen);
  auto upstream = parse_proxy(o.upstream);
  if (!listen) throw ConfigError("--listen must be ADDR:PORT, got " + o.listen);
  if (!upstream) throw ConfigError("--upstream must be ADDR:PORT, got " + o.upstream);
  const auto lep = resolve_endpoint(*listen, true);
  const auto uep = resolve_endpoint(*upstream);
  const int cfd = udp_socket(lep, o.listen);
  if (::bind(cfd, lep.data(), static_cast<socklen_t>(lep.size())) != 0) {
    throw ConfigError("cannot bind " + o.listen + ": " + std::strerror(errno));
  }
  const int ufd = udp_socket(uep, o.upstream);
  if (::connect(ufd, uep.data(), static_cast<socklen_t>(uep.size())) != 0) {
    throw ConfigError("cannot connect to " + o.upstream + ": " + std::strerror(errno));
  }
  auto relay = std::make_unique<Relay>(cfd, ufd, threads);
  const auto start = Clock::now();
  const auto until = start + seconds_flag(o.duration_s, "--duration", 86400.0 * 7);
  if (threads) {
    run_threads(*relay, until);
  } else {
    run_epoll(*relay, until);
  }
  ::close(cfd);
  ::close(ufd);
  nlohmann::ordered_json j;
  j["mode"] = "dns-relay";
  j["shape"] = o.shape;
  j["listen"] = o.listen;
  j["upstream"] = o.upstream;
  j["queries"] = relay->counts.queries.load();
  j["answers"] = relay->counts.answers.load();
  j["elapsed_s"] = seconds_between(start, Clock::now());
  j["cpu"] = cpu_usage();
  return {j, true};
}

}  // namespace

void add_dns_relay(CLI::App& app, Runner& runner) {
  auto opts = std::make_shared<RelayOptions>();
  auto* cmd = app.add_subcommand(
      "dns-relay", "The least a UDP DNS forwarder can do, in one shape (a yardstick)");
  cmd->add_option("--listen", opts->listen, "ADDR:PORT the clients query")->required();
  cmd->add_option("--upstream", opts->upstream, "ADDR:PORT of the server to forward to")
      ->required();
  cmd->add_option("--shape", opts->shape,
                  "epoll: one thread on an event loop; threads: a thread blocking in the "
                  "read on each socket")
      ->check(CLI::IsMember({"epoll", "threads"}));
  cmd->add_option("--duration", opts->duration_s, "Seconds to serve");
  cmd->callback([opts, &runner] { runner = [opts] { return run_dns_relay(*opts); }; });
}

}  // namespace vibepit::bench
