#pragma once
// The filtering DNS server. It runs inside vibepit-proxy, on the proxy's I/O threads: each
// thread has its own UDP sockets and TCP acceptor on every dns-listen address
// (SO_REUSEPORT), its own c-ares channels to upstream-dns (one UDP, one TCP) and its own
// rate-limit table, so a query is handled on one thread from receipt to reply. The answer
// cache is shared by the threads, in shards with a mutex each (shared_cache.hpp). The rules
// come from the same snapshot store as the proxy's, read without a lock.
//
// Per query: parse strictly -> per-client rate limit -> policy (allow-dns, query type) ->
// cache -> upstream (c-ares) -> the answer's addresses classified (rebinding defence) ->
// cache -> reply. One decision record per query.
#include <memory>
#include <span>
#include <vector>

#include <asio/ip/udp.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/loop.hpp"

namespace vibepit::dns {

class DnsWorker;
class SharedCache;

class DnsServer {
 public:
  // One worker on each loop (the proxy server's I/O threads); call before they start.
  DnsServer(const config::DnsConfig& cfg, policy::SnapshotStore& store,
            std::span<const runtime::Loop> loops);
  ~DnsServer();
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;

  // Bind UDP and TCP on every dns-listen address on every thread. Port 0 picks one free port
  // for UDP and TCP alike. Returns the bound endpoints; throws std::system_error on failure.
  std::vector<asio::ip::udp::endpoint> listen();
  // Start receiving (posts to each thread's loop).
  void start();
  // Stop receiving and close every DNS socket; queries in flight are abandoned.
  void stop();

 private:
  const config::DnsConfig& cfg_;
  std::unique_ptr<SharedCache> cache_;  // declared first: the workers use it
  std::vector<std::shared_ptr<DnsWorker>> workers_;
};

}  // namespace vibepit::dns
