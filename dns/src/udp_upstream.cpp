#include "udp_upstream.hpp"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include <asio/post.hpp>

#include "vibepit/dns/wire.hpp"
#include "vibepit/runtime/endpoint.hpp"
#include "vibepit/runtime/reactor.hpp"
#include "wire_detail.hpp"

namespace vibepit::dns {
namespace {

using clock = std::chrono::steady_clock;
using udp = asio::ip::udp;
using detail::get16;
using detail::put16;

constexpr int kBatch = 32;                // answers per recvmmsg(), queries per sendmmsg()
constexpr std::size_t kSlot = 4'096 + 1;  // dns-udp-payload is at most 4096; one more tells
                                          // a larger datagram (MSG_TRUNC says so too)
constexpr std::size_t kMaxSocketsPerServer = 64;

}  // namespace

const char* to_string(UpstreamStatus s) {
  switch (s) {
    case UpstreamStatus::answer:
      return "answer";
    case UpstreamStatus::timeout:
      return "no answer within dns-timeout-ms";
    case UpstreamStatus::refused:
      return "connection refused";
    case UpstreamStatus::stopped:
      return "stopped";
  }
  return "?";
}

struct UdpUpstream::Socket {
  explicit Socket(asio::io_context& io) : sock(io) {}
  udp::socket sock;
  std::size_t inflight = 0;
};

// Buffers for one recvmmsg() or sendmmsg(), shared by every socket of the thread.
struct UdpUpstream::Batch {
  std::array<std::array<std::uint8_t, kSlot>, kBatch> in{};
  std::array<iovec, kBatch> iov{};
  std::array<mmsghdr, kBatch> msgs{};
};

UdpUpstream::UdpUpstream(asio::io_context& io, const std::vector<config::Endpoint>& servers,
                         Options opts, Done done)
    : io_(io),
      servers_(servers.size()),
      per_server_(std::clamp<std::size_t>((opts.max_pending + kSocketLoad - 1) / kSocketLoad, 1,
                                          kMaxSocketsPerServer)),
      first_try_(
          std::max<std::chrono::milliseconds>(opts.timeout / 3, std::chrono::milliseconds(1))),
      second_try_(std::max<std::chrono::milliseconds>(opts.timeout - first_try_,
                                                      std::chrono::milliseconds(1))),
      done_(done),
      timer_(io) {
  for (const auto& server : servers) {
    const auto ep = runtime::to_tcp_endpoint(server.addr, server.port);
    const udp::endpoint to(ep.address(), ep.port());
    for (std::size_t i = 0; i < per_server_; ++i) {
      auto s = std::make_unique<Socket>(io);
      s->sock.open(to.protocol());
      s->sock.non_blocking(true);
      // Connected: the kernel keeps only this server's datagrams, and picks the source port
      // at random.
      s->sock.connect(to);
      sockets_.push_back(std::move(s));
    }
  }
  for (std::size_t i = 0; i < sockets_.size(); ++i) receive(i, false);
}

UdpUpstream::~UdpUpstream() {
  *alive_ = false;
  auto pending = std::move(pending_);
  for (auto& [key, p] : pending) done_(p.user, UpstreamStatus::stopped, {});
}

void UdpUpstream::set_batch_hooks(std::function<void()> before, std::function<void()> after) {
  before_ = std::move(before);
  after_ = std::move(after);
}

std::uint16_t UdpUpstream::random_id() {
  if (ids_left_ == 0) {
    // The kernel's CSPRNG, 256 IDs per call. It blocks only before the pool is first
    // seeded at boot; a failure (none is known on Linux 3.17+) is fatal, not a guessable ID.
    std::size_t got = 0;
    auto* bytes = reinterpret_cast<std::uint8_t*>(ids_.data());
    while (got < sizeof ids_) {
      const ssize_t n = ::getrandom(bytes + got, sizeof ids_ - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom");
      got += static_cast<std::size_t>(n);
    }
    ids_left_ = ids_.size();
  }
  return ids_[--ids_left_];
}

bool UdpUpstream::send(std::span<const std::uint8_t> query, std::size_t question_end, void* user) {
  if (servers_ == 0 || query.size() < question_end || question_end <= kHeaderSize) return false;
  Node node = take_node();
  Pending& p = node.mapped();
  p.user = user;
  p.query.assign(query.begin(), query.end());
  p.question_end = question_end;
  p.tries = 0;
  if (place(node, 0)) return true;
  give_back(std::move(node));
  return false;
}

UdpUpstream::Node UdpUpstream::take_node() {
  if (spare_nodes_.empty()) {
    std::unordered_map<std::uint32_t, Pending> one;
    return one.extract(one.emplace(0, Pending{}).first);
  }
  Node node = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  return node;
}

void UdpUpstream::give_back(Node node) {
  if (spare_nodes_.size() >= kSpareNodes) return;
  node.mapped().user = nullptr;
  if (spare_nodes_.capacity() == 0) spare_nodes_.reserve(kSpareNodes);
  spare_nodes_.push_back(std::move(node));
}

std::optional<std::uint16_t> UdpUpstream::free_id(std::size_t socket) {
  // Random draws: at most a quarter of the socket's IDs are taken, so the first draw is free
  // three times in four. After eight misses (about once in 65 536 queries at that load),
  // the first free ID after a random one, so that a query never fails for want of luck.
  for (int draw = 0; draw < 8; ++draw) {
    const std::uint16_t id = random_id();
    if (!pending_.contains(key_of(socket, id))) return id;
  }
  const std::uint16_t start = random_id();
  for (std::uint32_t k = 0; k <= 0xffff; ++k) {
    const auto id = static_cast<std::uint16_t>(start + k);
    if (!pending_.contains(key_of(socket, id))) return id;
  }
  return std::nullopt;
}

bool UdpUpstream::place(Node& node, std::size_t server) {
  Pending& p = node.mapped();
  for (std::size_t i = 0; i < per_server_; ++i) {
    const std::size_t s = server * per_server_ + i;
    if (sockets_[s]->inflight >= kSocketLoad) continue;
    const auto id = free_id(s);
    if (!id) continue;
    const std::uint32_t key = key_of(s, *id);
    put16(p.query, 0, *id);
    p.server = server;
    p.serial = ++next_serial_;
    const auto at = clock::now() + (p.tries == 0 ? first_try_ : second_try_);
    auto& deadlines = deadlines_[p.tries == 0 ? 0 : 1];
    // Answered queries' entries otherwise stay until the timer fires, a whole try's timeout
    // of them at the query rate: trimmed here, the queues stay near the number in flight.
    if (deadlines.size() > 2 * pending_.size() + 64) trim_deadlines();
    deadlines.push_back({at, key, p.serial});
    ++p.tries;
    node.key() = key;
    pending_.insert(std::move(node));
    ++sockets_[s]->inflight;
    queued_.push_back(key);
    if (!flush_posted_ && !held_) {
      flush_posted_ = true;
      asio::post(io_, [this, alive = alive_] {
        if (!*alive) return;
        flush_posted_ = false;
        flush();
      });
    }
    // The timer only ever needs to move earlier; most queries leave it as it is, with no
    // look at the deadline queues.
    if (timer_at_ == clock::time_point{} || at < timer_at_) arm_timer();
    return true;
  }
  return false;
}

void UdpUpstream::flush() {
  held_ = false;
  if (queued_.empty()) return;
  if (!batch_) batch_ = std::make_unique<Batch>();
  // Swapped, not moved: both keep their capacity. Queries placed while this runs (retries
  // after a refusal) go into queued_ for the next flush.
  auto& keys = sending_;
  keys.swap(queued_);
  // By socket, each socket's queries in the order they came.
  // Mostly they are already: one socket per server takes nearly every query, and
  // stable_sort would allocate its buffer for nothing.
  const auto by_socket = [](std::uint32_t a, std::uint32_t b) { return (a >> 16) < (b >> 16); };
  if (!std::is_sorted(keys.begin(), keys.end(), by_socket)) {
    std::stable_sort(keys.begin(), keys.end(), by_socket);
  }
  std::vector<std::size_t> refused;
  auto& b = *batch_;
  for (std::size_t at = 0; at < keys.size();) {
    const std::size_t s = keys[at] >> 16;
    int n = 0;
    while (at < keys.size() && (keys[at] >> 16) == s && n < kBatch) {
      auto it = pending_.find(keys[at++]);
      if (it == pending_.end()) continue;  // ended before it left (refused, or destroyed)
      auto& q = it->second.query;
      b.iov[n] = {q.data(), q.size()};
      b.msgs[n].msg_hdr = {};
      b.msgs[n].msg_hdr.msg_iov = &b.iov[n];
      b.msgs[n].msg_hdr.msg_iovlen = 1;
      ++n;
    }
    const int fd = sockets_[s]->sock.native_handle();
    int sent = 0, errors = 0;
    while (sent < n) {
      const int r = ::sendmmsg(fd, b.msgs.data() + sent, static_cast<unsigned>(n - sent),
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        sent += r;
        continue;
      }
      // A full send buffer drops the rest, as the network could: they time out and are
      // tried again. An ICMP error from before is reported here once (and so cleared).
      if (r < 0 && errno == ECONNREFUSED &&
          std::find(refused.begin(), refused.end(), s) == refused.end()) {
        refused.push_back(s);  // once: a second refuse() would end the retries it starts
      }
      if (r < 0 && (errno == EINTR || errno == ECONNREFUSED) && ++errors < 3) continue;
      break;
    }
  }
  keys.clear();
  for (auto s : refused) refuse(s);
}

void UdpUpstream::refuse(std::size_t socket) {
  // The server said nothing listens there: every query that socket holds ends its try now.
  std::vector<std::uint32_t> keys;
  for (const auto& [key, p] : pending_) {
    if ((key >> 16) == socket) keys.push_back(key);
  }
  for (auto key : keys) try_again_or_fail(key, UpstreamStatus::refused);
}

void UdpUpstream::try_again_or_fail(std::uint32_t key, UpstreamStatus why) {
  auto node = pending_.extract(key);
  if (node.empty()) return;
  --sockets_[key >> 16]->inflight;
  Pending& p = node.mapped();
  if (p.tries < 2 && place(node, (p.server + 1) % servers_)) return;
  done_(p.user, why, {});
  give_back(std::move(node));
}

void UdpUpstream::complete(std::uint32_t key, std::span<const std::uint8_t> answer) {
  auto node = pending_.extract(key);
  --sockets_[key >> 16]->inflight;
  done_(node.mapped().user, UpstreamStatus::answer, answer);
  give_back(std::move(node));
}

void UdpUpstream::receive(std::size_t socket, bool drained) {
  auto then = [this, socket, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec) return;
    drain(socket);
  };
  auto& s = sockets_[socket]->sock;
  if (drained) {
    runtime::async_wait_edge(s, runtime::Edge::read, std::move(then));
  } else {
    s.async_wait(udp::socket::wait_read, std::move(then));
  }
}

void UdpUpstream::drain(std::size_t socket) {
  if (!batch_) batch_ = std::make_unique<Batch>();
  auto& b = *batch_;
  for (int i = 0; i < kBatch; ++i) {
    b.iov[i] = {b.in[i].data(), kSlot};
    b.msgs[i].msg_hdr = {};
    b.msgs[i].msg_hdr.msg_iov = &b.iov[i];
    b.msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const auto alive = alive_;  // the callbacks below may end this object
  const int fd = sockets_[socket]->sock.native_handle();
  const int got = ::recvmmsg(fd, b.msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
  if (got <= 0) {
    if (got < 0 && errno == EINTR) return drain(socket);
    if (got < 0 && errno == ECONNREFUSED) {
      // The error is cleared by being reported; answers may still wait behind it.
      refuse(socket);
      return receive(socket, false);
    }
    return receive(socket, got == 0 || errno == EAGAIN || errno == EWOULDBLOCK);
  }
  if (before_) before_();
  for (int i = 0; i < got && *alive; ++i) {
    const auto& hdr = b.msgs[i].msg_hdr;
    // Larger than any answer we asked for (we advertise at most 4096): dropped; the query
    // times out and is tried again.
    if ((hdr.msg_flags & MSG_TRUNC) || b.msgs[i].msg_len >= kSlot) continue;
    take_answer(socket, std::span<const std::uint8_t>(b.in[i].data(), b.msgs[i].msg_len));
  }
  if (!*alive) return;
  if (after_) after_();
  if (got < kBatch) return receive(socket, true);  // it stopped on an empty queue
  asio::post(io_, [this, socket, alive = alive_] {
    if (*alive) drain(socket);
  });
}

void UdpUpstream::take_answer(std::size_t socket, std::span<const std::uint8_t> msg) {
  if (msg.size() < kHeaderSize) return;
  const std::uint32_t key = key_of(socket, get16(msg, 0));
  auto it = pending_.find(key);
  if (it == pending_.end()) return;  // late (answered, or given up on), or forged
  const Pending& p = it->second;
  if (!answers_query(msg, p.query, p.question_end)) return;  // forged, or someone else's
  complete(key, msg);
}

void UdpUpstream::trim_deadlines() {
  for (auto& q : deadlines_) {
    while (!q.empty()) {
      auto it = pending_.find(q.front().key);
      if (it != pending_.end() && it->second.serial == q.front().serial) break;
      q.pop_front();
    }
  }
}

void UdpUpstream::arm_timer() {
  // Entries whose query was answered (or moved on to its next try) are dropped from the
  // fronts here, so that the timer waits for the oldest query still unanswered: with
  // answers coming, it fires about once per try timeout, not once per query.
  trim_deadlines();
  clock::time_point earliest = clock::time_point::max();
  for (auto& q : deadlines_) {
    if (!q.empty()) earliest = std::min(earliest, q.front().at);
  }
  if (earliest == clock::time_point::max()) return;
  if (timer_at_ != clock::time_point{} && timer_at_ <= earliest) return;
  timer_at_ = earliest;
  timer_.expires_at(earliest);
  timer_.async_wait([this, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec) return;  // re-armed earlier (aborted), or going away
    timer_at_ = {};
    on_timer();
  });
}

void UdpUpstream::on_timer() {
  const auto now = clock::now();
  for (auto& q : deadlines_) {
    while (!q.empty() && q.front().at <= now) {
      const Deadline d = q.front();
      q.pop_front();
      auto it = pending_.find(d.key);
      if (it != pending_.end() && it->second.serial == d.serial) {
        try_again_or_fail(d.key, UpstreamStatus::timeout);
      }
    }
  }
  arm_timer();
}

}  // namespace vibepit::dns
