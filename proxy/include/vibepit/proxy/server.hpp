#pragma once
// The proxy server: one io_context per thread, each with its own acceptors (SO_REUSEPORT),
// its own c-ares resolver and its own decision-log producer, so a connection lives on one
// thread from accept to close and shares nothing mutable with other threads.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include <asio/ip/tcp.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/proxy/worker.hpp"
#include "vibepit/runtime/loop.hpp"

namespace vibepit::proxy {

class ProxyServer {
 public:
  // `pending`: ask mode's table of held requests (Worker), or none.
  ProxyServer(const config::ProxyConfig& cfg, policy::SnapshotStore& store,
              decision_log::DecisionLog& log, runtime::PendingTable* pending = nullptr);
  ~ProxyServer();

  // Bind every proxy-listen address on every worker. Returns the bound endpoints (port 0
  // resolved to the chosen port). Throws std::system_error when a bind fails.
  std::vector<asio::ip::tcp::endpoint> listen();
  // TLS inspection (Worker::set_inspection), for every worker. Before start().
  void set_inspection(Inspection* inspection);
  void start();  // start worker threads
  // Stop accepting, close idle keep-alive connections, wait up to drain-timeout for the
  // rest, close what is still open (up to kCloseGrace for them to end and write their
  // records), then stop the loops and join the threads.
  void shutdown();
  static constexpr std::chrono::milliseconds kCloseGrace{1'000};
  std::size_t active() const { return active_.load(std::memory_order_relaxed); }
  // The I/O threads' loops, for the DNS server to run on. Valid until this server is
  // destroyed; the threads run from start() to shutdown().
  std::vector<runtime::Loop> loops() const;

 private:
  const config::ProxyConfig& cfg_;
  std::atomic<std::size_t> active_{0};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace vibepit::proxy
