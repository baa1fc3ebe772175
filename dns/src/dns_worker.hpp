#pragma once
// One I/O thread's share of the DNS server (see server.hpp). Everything here runs on that
// thread's io_context only.
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>
#include <asio/steady_timer.hpp>

#include "shared_cache.hpp"
#include "vibepit/dns/filter.hpp"
#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/ares_channel.hpp"
#include "vibepit/runtime/config.hpp"
#include "vibepit/runtime/decision_log.hpp"
#include "vibepit/runtime/record_folder.hpp"
#include "vibepit/runtime/token_bucket.hpp"

namespace vibepit::dns {

enum class Transport { udp, tcp };

class DnsWorker;

// Where a reply goes: a small value, so that answering allocates nothing. UDP replies made
// while a batch of datagrams is being handled leave together with one sendmmsg(); later ones
// (upstream answers) with one sendto(). TCP replies go to the connection. `custom` is for
// tests that call handle() directly.
struct ReplyTo {
  Transport transport = Transport::udp;
  int udp_fd = -1;
  asio::ip::udp::endpoint peer;
  std::shared_ptr<void> conn;  // the TcpConn, kept alive while its answer is pending
  std::function<void(std::span<const std::uint8_t>)> custom;
};

// A token bucket per client address (dns-client-qps, dns-client-burst), bounded in size.
class RateLimiter {
 public:
  RateLimiter(std::uint32_t qps, std::uint32_t burst) : qps_(qps), burst_(burst) {}
  bool allow(const asio::ip::address& client, std::chrono::steady_clock::time_point now);

 private:
  static constexpr std::size_t kMaxClients = 65'536;
  std::uint32_t qps_, burst_;
  std::unordered_map<std::string, runtime::TokenBucket> buckets_;  // key: the address bytes
};

class DnsWorker : public std::enable_shared_from_this<DnsWorker> {
 public:
  DnsWorker(asio::io_context& io, const runtime::Config& cfg, policy::SnapshotStore& store,
            runtime::DecisionLog::Producer& log, SharedCache& cache);
  ~DnsWorker();

  // Binding happens on the caller's thread before the loop runs.
  asio::ip::udp::endpoint bind(const asio::ip::udp::endpoint& ep);
  void start();  // on the loop
  void stop();   // on the loop

  // Handle one query from `client`. Answers `to` exactly once, now or when the upstream
  // answers, and returns true; returns false without answering packets that get no answer
  // (responses, runts).
  bool handle(std::span<const std::uint8_t> pkt, const asio::ip::address& client,
              std::uint16_t client_port, ReplyTo to);

  asio::io_context& io() { return io_; }
  const runtime::DnsConfig& cfg() const { return cfg_.dns; }
  std::size_t& tcp_count() { return tcp_count_; }

 private:
  struct Forward;
  class TcpConn;
  friend class TcpConn;

  void receive_udp(std::size_t index);
  void drain_udp(std::size_t index);
  void accept_tcp(std::size_t index);  // runs runtime::accept_loop on tcp_[index]
  void take_tcp(asio::ip::tcp::socket s);
  // The answer is judged with the rules in force when it arrives (on_upstream).
  void forward(std::span<const std::uint8_t> pkt, const Query& q, runtime::DecisionRecord rec,
               ReplyTo to);
  void deliver(const ReplyTo& to, std::span<const std::uint8_t> reply);
  void begin_udp_batch(int fd);
  void flush_udp_batch();
  static void on_upstream(void* arg, int status, int timeouts, unsigned char* abuf, int alen);
  void finish_forward(Forward& f, int status, std::span<const std::uint8_t> answer);
  void reply_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rc,
                   runtime::DecisionRecord& rec, const ReplyTo& to);
  runtime::DecisionRecord make_record(const Query& q, const asio::ip::address& client,
                                      std::uint16_t port, Transport t);
  // Writes `rec`, or folds it (RecordFolder): over-limit queries always, other denials past
  // decision-log-per-client.
  void emit(runtime::DecisionRecord& rec, Rcode rc);
  void arm_fold_timer();  // summaries are due: write them when the interval ends
  Rcode deny_rcode() const { return cfg_.dns.deny_nxdomain ? Rcode::nxdomain : Rcode::refused; }
  std::size_t reply_limit(const Query& q, Transport t) const;

  asio::io_context& io_;
  const runtime::Config& cfg_;
  policy::SnapshotStore& store_;
  runtime::DecisionLog::Producer& log_;
  QtypeSet qtypes_ = QtypeSet::none();
  SharedCache& cache_;
  std::vector<policy::IpAddr> hit_addrs_;  // a cache hit's addresses; capacity reused
  RateLimiter limiter_;
  runtime::RecordFolder folder_;
  asio::steady_timer fold_timer_;
  bool fold_timer_armed_ = false;
  std::chrono::steady_clock::time_point now_{};  // when the query being handled arrived
  std::vector<asio::ip::udp::socket> udp_;
  std::vector<asio::ip::tcp::acceptor> tcp_;
  runtime::SpareDescriptor spare_;  // one client refused (closed) when out of descriptors
  std::unordered_map<TcpConn*, std::weak_ptr<TcpConn>> conns_;
  std::size_t tcp_count_ = 0;
  std::size_t pending_ = 0;
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
  std::vector<std::uint8_t> wbuf_ = std::vector<std::uint8_t>(65'536);
  std::vector<std::uint8_t> qbuf_ = std::vector<std::uint8_t>(1'024);
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Last, so they are destroyed first: queries they still hold complete (ARES_EDESTRUCTION)
  // while everything above exists.
  runtime::AresChannel udp_upstream_;
  runtime::AresChannel tcp_upstream_;
};

}  // namespace vibepit::dns
