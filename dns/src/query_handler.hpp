#pragma once
// One I/O thread's query path, apart from its sockets (dns_worker.hpp): parse -> per-client
// rate limit -> policy -> cache -> upstream (UDP clients: udp_upstream.hpp; TCP clients:
// c-ares over TCP) -> the answer's addresses classified ->
// cache -> reply, and one decision record per query. It sends nothing itself: each reply
// goes to a Replier, the thread's transport in production and a recorder in tests. Runs on
// that thread's io_context only.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/udp.hpp>

#include "shared_cache.hpp"
#include "udp_upstream.hpp"
#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/decision_log/folding_log.hpp"
#include "vibepit/dns/filter.hpp"
#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/ares_channel.hpp"
#include "vibepit/runtime/token_bucket.hpp"

namespace vibepit::dns {

enum class Transport { udp, tcp };

// Where a reply goes: a small value, so that answering allocates nothing. `conn` keeps a TCP
// connection alive while its answer is pending; a UDP reply goes to `peer` from `udp_fd`.
struct ReplyTo {
  Transport transport = Transport::udp;
  int udp_fd = -1;
  asio::ip::udp::endpoint peer;
  std::shared_ptr<void> conn;
};

// Sends replies. UDP replies made between begin_batch(fd) and flush_batch() on that socket
// may leave together (one sendmmsg()).
class Replier {
 public:
  virtual void deliver(const ReplyTo& to, std::span<const std::uint8_t> reply) = 0;
  virtual void begin_batch(int udp_fd) = 0;
  virtual void flush_batch() = 0;

 protected:
  ~Replier() = default;
};

// A token bucket per client address (dns-client-qps, dns-client-burst), bounded in size.
class RateLimiter {
 public:
  RateLimiter(std::uint32_t qps, std::uint32_t burst) : qps_(qps), burst_(burst) {}
  bool allow(const asio::ip::address& client, std::chrono::steady_clock::time_point now);

 private:
  static constexpr std::size_t kMaxClients = 65'536;
  std::uint32_t qps_, burst_;
  // Keyed by address, not by its bytes as text: an IPv6 client's 16 would not fit a
  // std::string's inline 15, and cost an allocation a query.
  std::unordered_map<policy::IpAddr, runtime::TokenBucket, policy::IpAddrHash> buckets_;
};

class QueryHandler {
 public:
  QueryHandler(asio::io_context& io, const config::DnsConfig& cfg, policy::SnapshotStore& store,
               decision_log::DecisionLog::Producer& log, SharedCache& cache, Replier& replier);
  ~QueryHandler();
  QueryHandler(const QueryHandler&) = delete;
  QueryHandler& operator=(const QueryHandler&) = delete;

  // Handle one query from `client`. Answers `to` exactly once, now or when the upstream
  // answers, and returns true; returns false without answering packets that get no answer
  // (responses, runts).
  bool handle(std::span<const std::uint8_t> pkt, const asio::ip::address& client,
              std::uint16_t client_port, ReplyTo to);
  // Upstream answers that complete together (one read) are batched on `udp_fd`.
  void batch_upstream_answers(int udp_fd);
  // The worker brackets each batch of client datagrams with these: the batch's upstream
  // queries leave together at flush_upstream() (otherwise they leave by themselves once the
  // current handler returns), with no flush posted behind them (UdpUpstream::hold).
  void hold_upstream() { udp_forward_.hold(); }
  void flush_upstream() { udp_forward_.flush(); }
  // Answers arriving from now on are dropped (the sockets are closing); the decision log's
  // pending summaries are written.
  void stop();

 private:
  struct Forward;

  // The answer is judged with the rules in force when it arrives (on_upstream).
  void forward(std::span<const std::uint8_t> pkt, const Query& q, decision_log::DecisionRecord rec,
               ReplyTo to);
  static void on_upstream(void* arg, int status, int timeouts, unsigned char* abuf, int alen);
  static void on_udp_upstream(void* arg, UpstreamStatus status,
                              std::span<const std::uint8_t> answer);
  // `failure`: why there is no answer (nullptr when there is one).
  void finish_forward(Forward& f, const char* failure, std::span<const std::uint8_t> answer);
  void reply_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rc,
                   decision_log::DecisionRecord& rec, const ReplyTo& to);
  decision_log::DecisionRecord make_record(const Query& q, const asio::ip::address& client,
                                           std::uint16_t port, Transport t);
  // Writes `rec`, or folds it (FoldingLog): over-limit queries always, other denials past
  // decision-log-per-client.
  void emit(decision_log::DecisionRecord& rec, Rcode rc);
  Rcode deny_rcode() const { return cfg_.deny_nxdomain ? Rcode::nxdomain : Rcode::refused; }
  std::size_t reply_limit(const Query& q, Transport t) const;
  // A Forward for a query going upstream: one that an answered query left, or a new one.
  std::unique_ptr<Forward> take_forward();
  void give_back(std::unique_ptr<Forward> f);

  const config::DnsConfig& cfg_;
  policy::SnapshotStore& store_;
  SharedCache& cache_;
  Replier& replier_;
  QtypeSet qtypes_ = QtypeSet::none();
  std::vector<policy::IpAddr> hit_addrs_;  // a cache hit's addresses; capacity reused
  RateLimiter limiter_;
  decision_log::FoldingLog log_;  // deny records: written, or folded past decision-log-per-client
  std::chrono::steady_clock::time_point now_{};  // when the query being handled arrived
  std::size_t pending_ = 0;                      // upstream queries in flight
  bool stopped_ = false;
  std::vector<std::uint8_t> wbuf_ = std::vector<std::uint8_t>(65'536);
  std::vector<std::uint8_t> qbuf_ = std::vector<std::uint8_t>(1'024);
  // Forwards of answered queries, for the next ones: a cache miss costs no allocation of
  // its own (each is 1.5 KiB, mostly the parsed query). Bounded in number, and none kept
  // that holds a large TCP query's bytes.
  static constexpr std::size_t kSpareForwards = 128;
  static constexpr std::size_t kSparePacketMax = 1'024;
  std::vector<std::unique_ptr<Forward>> spare_forwards_;
  // Last, so they are destroyed first: queries they still hold complete (ARES_EDESTRUCTION)
  // while everything above exists.
  runtime::AresChannel tcp_upstream_;
  UdpUpstream udp_forward_;
};

}  // namespace vibepit::dns
