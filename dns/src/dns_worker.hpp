#pragma once
// One I/O thread's share of the DNS server (see server.hpp). Everything here runs on that
// thread's io_context only.
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
#include "vibepit/proxy/ares_channel.hpp"
#include "vibepit/proxy/config.hpp"
#include "vibepit/proxy/decision_log.hpp"

namespace vibepit::dns {

enum class Transport { udp, tcp };

// Where a reply goes. UDP replies are sent at once from the worker's buffer; TCP replies are
// handed to the connection, which copies them.
using ReplyFn = std::function<void(std::span<const std::uint8_t>)>;

// A token bucket per client address, bounded in size.
class RateLimiter {
 public:
  RateLimiter(std::uint32_t qps, std::uint32_t burst) : qps_(qps), burst_(burst) {}
  bool allow(const asio::ip::address& client, std::chrono::steady_clock::time_point now);

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point last;
  };
  static constexpr std::size_t kMaxClients = 65'536;
  std::uint32_t qps_, burst_;
  std::unordered_map<std::string, Bucket> buckets_;  // key: the address bytes
};

class DnsWorker : public std::enable_shared_from_this<DnsWorker> {
 public:
  DnsWorker(asio::io_context& io, const proxy::Config& cfg, policy::SnapshotStore& store,
            proxy::DecisionLog::Producer& log, SharedCache& cache);
  ~DnsWorker();

  // Binding happens on the caller's thread before the loop runs.
  asio::ip::udp::endpoint bind(const asio::ip::udp::endpoint& ep);
  void start();  // on the loop
  void stop();   // on the loop

  // Handle one query from `client`. Calls `reply` exactly once, now or when the upstream
  // answers, and returns true; returns false without calling it for packets that get no
  // answer (responses, runts).
  bool handle(std::span<const std::uint8_t> pkt, const asio::ip::address& client,
              std::uint16_t client_port, Transport t, ReplyFn reply);

  asio::io_context& io() { return io_; }
  const proxy::DnsConfig& cfg() const { return cfg_.dns; }
  std::size_t& tcp_count() { return tcp_count_; }

 private:
  struct Forward;
  class TcpConn;
  friend class TcpConn;

  void receive_udp(std::size_t index);
  void drain_udp(std::size_t index);
  void accept_tcp(std::size_t index);
  void forward(std::span<const std::uint8_t> pkt, const Query& q, proxy::DecisionRecord rec,
               std::shared_ptr<const policy::Snapshot> snap, Transport t, ReplyFn reply);
  static void on_upstream(void* arg, int status, int timeouts, unsigned char* abuf, int alen);
  void finish_forward(Forward& f, int status, std::span<const std::uint8_t> answer);
  void reply_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rc,
                   proxy::DecisionRecord& rec, const ReplyFn& reply);
  proxy::DecisionRecord make_record(const Query& q, const asio::ip::address& client,
                                    std::uint16_t port, Transport t);
  void emit(proxy::DecisionRecord& rec, Rcode rc);
  Rcode deny_rcode() const { return cfg_.dns.deny_nxdomain ? Rcode::nxdomain : Rcode::refused; }
  std::size_t reply_limit(const Query& q, Transport t) const;

  asio::io_context& io_;
  const proxy::Config& cfg_;
  policy::SnapshotStore& store_;
  proxy::DecisionLog::Producer& log_;
  QtypeSet qtypes_ = QtypeSet::none();
  SharedCache& cache_;
  std::vector<policy::IpAddr> hit_addrs_;  // a cache hit's addresses; capacity reused
  RateLimiter limiter_;
  std::vector<asio::ip::udp::socket> udp_;
  std::vector<asio::ip::tcp::acceptor> tcp_;
  std::unordered_map<TcpConn*, std::weak_ptr<TcpConn>> conns_;
  std::size_t tcp_count_ = 0;
  std::size_t pending_ = 0;
  bool stopped_ = false;
  std::vector<std::uint8_t> rbuf_ = std::vector<std::uint8_t>(65'536);
  std::vector<std::uint8_t> wbuf_ = std::vector<std::uint8_t>(65'536);
  std::vector<std::uint8_t> qbuf_ = std::vector<std::uint8_t>(1'024);
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Last, so they are destroyed first: queries they still hold complete (ARES_EDESTRUCTION)
  // while everything above exists.
  proxy::AresChannel udp_upstream_;
  proxy::AresChannel tcp_upstream_;
};

}  // namespace vibepit::dns
