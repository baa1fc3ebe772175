#pragma once
// One I/O thread's share of the DNS server (see server.hpp): its UDP sockets and TCP
// connections on every dns-listen address (RFC 7766 framing), and the QueryHandler that
// answers what they receive. This side owns the bytes on the wire: datagrams move in
// batches (recvmmsg/sendmmsg), TCP messages are read as they arrive, never to a declared
// length up front. Everything here runs on that thread's io_context only.
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>

#include "query_handler.hpp"
#include "shared_cache.hpp"
#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/accept_loop.hpp"

namespace vibepit::dns {

class DnsWorker final : public Replier, public std::enable_shared_from_this<DnsWorker> {
 public:
  DnsWorker(asio::io_context& io, const config::DnsConfig& cfg, policy::SnapshotStore& store,
            decision_log::DecisionLog::Producer& log, SharedCache& cache);
  ~DnsWorker();

  // Binding happens on the caller's thread before the loop runs.
  asio::ip::udp::endpoint bind(const asio::ip::udp::endpoint& ep);
  void start();  // on the loop
  void stop();   // on the loop

  asio::io_context& io() { return io_; }

  // Replier: where the handler's answers leave.
  void deliver(const ReplyTo& to, std::span<const std::uint8_t> reply) override;
  void begin_batch(int udp_fd) override;
  void flush_batch() override;

 private:
  class TcpConn;

  // Wait until udp_[index] is readable, then drain_udp. `drained`: the last recvmmsg()
  // stopped on an empty queue, so the wait is for the next edge and costs no system call
  // (runtime/reactor.hpp); otherwise the descriptor is re-armed.
  void receive_udp(std::size_t index, bool drained);
  void drain_udp(std::size_t index);
  void accept_tcp(std::size_t index);  // runs runtime::accept_loop on tcp_[index]
  void take_tcp(asio::ip::tcp::socket s);

  asio::io_context& io_;
  const config::DnsConfig& cfg_;
  std::vector<asio::ip::udp::socket> udp_;
  std::vector<asio::ip::tcp::socket> tcp_;  // listening (runtime::listen_tcp)
  runtime::SpareDescriptor spare_;          // one client refused (closed) when out of descriptors
  std::unordered_map<TcpConn*, std::weak_ptr<TcpConn>> conns_;  // open TCP clients
  bool stopped_ = false;
  // UDP datagrams move kUdpBatch at a time: one recvmmsg() in, one sendmmsg() out.
  static constexpr int kUdpBatch = 32;
  static constexpr std::size_t kUdpSlot = 4'096;  // dns-udp-payload is at most 4096
  struct UdpBatch {
    std::array<std::array<std::uint8_t, kUdpSlot>, kUdpBatch> in{}, out{};
    std::array<sockaddr_storage, kUdpBatch> from{}, from_out{};
    std::array<iovec, kUdpBatch> iov_in{}, iov_out{};
    std::array<mmsghdr, kUdpBatch> msgs_in{}, msgs_out{};
    int replies = 0;
  };
  std::unique_ptr<UdpBatch> batch_;
  int batch_fd_ = -1;  // the socket whose batch is being handled, else -1
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Last, so it goes first: answers still pending upstream are dropped while the sockets
  // they would have gone to exist.
  QueryHandler handler_;
};

}  // namespace vibepit::dns
