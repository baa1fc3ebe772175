#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "dns_worker.hpp"

#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/reactor.hpp"

namespace vibepit::dns {
namespace {

using asio::ip::tcp;
using asio::ip::udp;

}  // namespace

// One TCP client. Reads one length-prefixed query at a time, answers it, then reads the
// next; a connection that sends no complete query for dns-tcp-idle-ms is closed.
class DnsWorker::TcpConn : public std::enable_shared_from_this<TcpConn> {
 public:
  TcpConn(DnsWorker& w, tcp::socket s) : w_(w), socket_(std::move(s)), timer_(w.io_) {}

  void start() {
    asio::error_code ec;
    auto peer = socket_.remote_endpoint(ec);
    if (ec) return close();
    peer_ = peer;
    read_length();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    asio::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
    w_.conns_.erase(this);
  }

 private:
  void arm_timer() {
    timer_.expires_after(w_.cfg_.tcp_idle);
    timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
      if (!ec) self->close();
    });
  }

  void read_length() {
    arm_timer();
    asio::async_read(socket_, asio::buffer(len_),
                     [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                       if (ec || self->closed_) return self->close();
                       std::size_t n = (std::size_t{self->len_[0]} << 8) | self->len_[1];
                       // A zero-length message can hold no header: the framing is broken.
                       if (n == 0) return self->close();
                       self->want_ = n;
                       self->body_.clear();
                       self->read_body();
                     });
  }

  // The message grows as its bytes arrive (doubling from kFirstRead), so a client that
  // declares 64 KiB and sends nothing holds kFirstRead bytes, not 64 KiB.
  void read_body() {
    const std::size_t have = body_.size();
    const std::size_t step = std::min(want_ - have, std::max(kFirstRead, have));
    body_.resize(have + step);
    socket_.async_read_some(
        asio::buffer(body_.data() + have, step),
        [self = shared_from_this(), have](const asio::error_code& ec, std::size_t got) {
          if (ec || self->closed_) return self->close();
          self->body_.resize(have + got);
          if (self->body_.size() < self->want_) return self->read_body();
          self->on_message();
        });
  }

  void on_message() {
    timer_.cancel();  // the upstream has its own deadline
    // The reply target holds the connection while the upstream answers.
    ReplyTo to;
    to.transport = Transport::tcp;
    to.conn = shared_from_this();
    const bool will_answer =
        w_.handler_.handle(body_, peer_.address(), peer_.port(), std::move(to));
    // No answer at all (a response packet): the stream is out of step.
    if (!will_answer) close();
  }

 public:
  void send(std::span<const std::uint8_t> reply) {
    if (closed_) return;
    out_.resize(reply.size() + 2);
    out_[0] = static_cast<std::uint8_t>(reply.size() >> 8);
    out_[1] = static_cast<std::uint8_t>(reply.size() & 0xff);
    std::copy(reply.begin(), reply.end(), out_.begin() + 2);
    sending_ = true;
    arm_timer();  // a client that does not read its answer is cut off too
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                        self->sending_ = false;
                        self->out_.clear();
                        release_if_large(self->out_);
                        release_if_large(self->body_);
                        if (ec || self->closed_) return self->close();
                        self->read_length();
                      });
  }

 private:
  DnsWorker& w_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  tcp::endpoint peer_;
  // An idle connection keeps at most this much of its last message's buffers.
  static constexpr std::size_t kFirstRead = 512;
  static constexpr std::size_t kKeepIdle = 4096;
  static void release_if_large(std::vector<std::uint8_t>& v) {
    if (v.capacity() > kKeepIdle) std::vector<std::uint8_t>().swap(v);
  }

  std::uint8_t len_[2] = {0, 0};
  std::size_t want_ = 0;  // the declared length of the message being read
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
  bool sending_ = false;
  bool closed_ = false;
};

DnsWorker::DnsWorker(asio::io_context& io, const config::DnsConfig& cfg,
                     policy::SnapshotStore& store, decision_log::DecisionLog::Producer& log,
                     SharedCache& cache)
    : io_(io), cfg_(cfg), handler_(io, cfg, store, log, cache, *this) {}

DnsWorker::~DnsWorker() {
  *alive_ = false;
}

udp::endpoint DnsWorker::bind(const udp::endpoint& ep) {
  udp::socket u(io_);
  u.open(ep.protocol());
  u.set_option(udp::socket::reuse_address(true));
  runtime::set_reuse_port(u.native_handle());  // a refusal shows as the bind clashing
  if (ep.address().is_v6()) u.set_option(asio::ip::v6_only(true));
  u.bind(ep);
  auto bound = u.local_endpoint();
  u.non_blocking(true);

  auto a =
      runtime::listen_tcp(io_, tcp::endpoint(bound.address(), bound.port()), {.reuse_port = true});

  udp_.push_back(std::move(u));
  tcp_.push_back(std::move(a));
  return bound;
}

void DnsWorker::start() {
  // Upstream answers that complete together (one recvmmsg()) leave in one sendmmsg() too,
  // when the worker has a single UDP socket to answer from.
  if (udp_.size() == 1) handler_.batch_upstream_answers(udp_[0].native_handle());
  for (std::size_t i = 0; i < udp_.size(); ++i) receive_udp(i, false);
  for (std::size_t i = 0; i < tcp_.size(); ++i) accept_tcp(i);
}

void DnsWorker::stop() {
  stopped_ = true;
  handler_.stop();
  asio::error_code ignored;
  for (auto& u : udp_) u.close(ignored);
  for (auto& a : tcp_) a.close(ignored);
  std::vector<std::shared_ptr<TcpConn>> open;
  for (auto& [raw, weak] : conns_) {
    if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->close();
}

void DnsWorker::receive_udp(std::size_t index, bool drained) {
  auto then = [this, index, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec || stopped_) return;
    drain_udp(index);
  };
  if (drained) {
    runtime::async_wait_edge(udp_[index], runtime::Edge::read, std::move(then));
  } else {
    udp_[index].async_wait(udp::socket::wait_read, std::move(then));
  }
}

// Datagrams come in kUdpBatch at a time with one recvmmsg(); the answers made while they are
// handled (denials, cache hits) leave together with one sendmmsg(). After a full batch the
// loop lets TCP clients and upstream answers on this thread run before it reads on.
void DnsWorker::drain_udp(std::size_t index) {
  if (!batch_) batch_ = std::make_unique<UdpBatch>();
  auto& b = *batch_;
  const int fd = udp_[index].native_handle();
  for (int i = 0; i < kUdpBatch; ++i) {
    b.iov_in[i] = {b.in[i].data(), kUdpSlot};
    b.msgs_in[i].msg_hdr = {};
    b.msgs_in[i].msg_hdr.msg_name = &b.from[i];
    b.msgs_in[i].msg_hdr.msg_namelen = sizeof b.from[i];
    b.msgs_in[i].msg_hdr.msg_iov = &b.iov_in[i];
    b.msgs_in[i].msg_hdr.msg_iovlen = 1;
  }
  int got = ::recvmmsg(fd, b.msgs_in.data(), kUdpBatch, MSG_DONTWAIT, nullptr);
  if (got <= 0) {
    // EAGAIN: empty. Anything else (an ICMP error queued on the socket) is not fatal, but
    // datagrams may wait behind it: wait re-armed, which reports them at once.
    if (got < 0 && errno == EINTR) return drain_udp(index);
    return receive_udp(index, got == 0 || errno == EAGAIN || errno == EWOULDBLOCK);
  }
  begin_batch(fd);
  handler_.hold_upstream();
  for (int i = 0; i < got && !stopped_; ++i) {
    const auto& hdr = b.msgs_in[i].msg_hdr;
    if (hdr.msg_flags & MSG_TRUNC) continue;  // over 4 KiB: no DNS query is that large
    udp::endpoint peer;
    std::memcpy(peer.data(), &b.from[i], std::min<std::size_t>(hdr.msg_namelen, sizeof b.from[i]));
    peer.resize(hdr.msg_namelen);
    ReplyTo to;
    to.udp_fd = fd;
    to.peer = peer;
    handler_.handle(std::span<const std::uint8_t>(b.in[i].data(), b.msgs_in[i].msg_len),
                    peer.address(), peer.port(), std::move(to));
  }
  handler_.flush_upstream();  // the misses of this batch leave together
  flush_batch();
  if (stopped_) return;
  if (got < kUdpBatch) return receive_udp(index, true);  // it stopped on an empty queue
  asio::post(io_, [this, index, alive = alive_] {
    if (*alive && !stopped_) drain_udp(index);
  });
}

void DnsWorker::begin_batch(int fd) {
  if (!batch_) batch_ = std::make_unique<UdpBatch>();
  batch_fd_ = fd;
  batch_->replies = 0;
}

void DnsWorker::flush_batch() {
  if (batch_fd_ < 0) return;
  auto& b = *batch_;
  int sent = 0;
  while (sent < b.replies) {
    // Never blocks: a full socket buffer drops the rest, as the network could.
    int n = ::sendmmsg(batch_fd_, b.msgs_out.data() + sent, static_cast<unsigned>(b.replies - sent),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += n;
  }
  b.replies = 0;
  batch_fd_ = -1;
}

void DnsWorker::deliver(const ReplyTo& to, std::span<const std::uint8_t> reply) {
  if (to.transport == Transport::tcp) {
    return static_cast<TcpConn*>(to.conn.get())->send(reply);
  }
  if (batch_fd_ == to.udp_fd && batch_ && batch_->replies < kUdpBatch && reply.size() <= kUdpSlot) {
    auto& b = *batch_;
    const int i = b.replies++;
    std::memcpy(b.out[i].data(), reply.data(), reply.size());
    b.iov_out[i] = {b.out[i].data(), reply.size()};
    b.msgs_out[i].msg_hdr = {};
    // The peer address lives in `to`, which is gone by the flush: keep a copy in the slot.
    std::memcpy(&b.from_out[i], to.peer.data(), to.peer.size());
    b.msgs_out[i].msg_hdr.msg_name = &b.from_out[i];
    b.msgs_out[i].msg_hdr.msg_namelen = static_cast<socklen_t>(to.peer.size());
    b.msgs_out[i].msg_hdr.msg_iov = &b.iov_out[i];
    b.msgs_out[i].msg_hdr.msg_iovlen = 1;
    return;
  }
  ::sendto(to.udp_fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL, to.peer.data(),
           static_cast<socklen_t>(to.peer.size()));
}

void DnsWorker::accept_tcp(std::size_t index) {
  runtime::AcceptPolicy policy{"dns", &spare_, {}, alive_};
  asio::co_spawn(io_,
                 runtime::accept_loop(tcp_[index], std::move(policy),
                                      [this, alive = alive_](tcp::socket s, const tcp::endpoint&) {
                                        if (!*alive || stopped_) return false;
                                        take_tcp(std::move(s));
                                        return true;
                                      }),
                 asio::detached);
}

void DnsWorker::take_tcp(tcp::socket s) {
  if (conns_.size() >= cfg_.max_tcp) {
    asio::error_code ignored;
    s.close(ignored);  // over dns-max-tcp: the client may retry or use UDP
    return;
  }
  auto c = std::make_shared<TcpConn>(*this, std::move(s));
  conns_.emplace(c.get(), c);
  c->start();
}

}  // namespace vibepit::dns
