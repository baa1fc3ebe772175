#pragma once
// The proxy server: one io_context per thread, each with its own acceptors (SO_REUSEPORT),
// its own c-ares resolver and its own decision-log producer, so a connection lives on one
// thread from accept to close and shares nothing mutable with other threads.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/error_code.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/policy/snapshot.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/config.hpp"
#include "vibepit/runtime/decision_log.hpp"
#include "vibepit/runtime/loop.hpp"
#include "vibepit/runtime/record_folder.hpp"

namespace vibepit::proxy {

class Session;

// How a worker reaches the outside: `lookup` resolves a name its resolver has not cached,
// `connect` opens an upstream TCP connection. Both are the real thing (c-ares, the kernel)
// unless a component test replaces them (tests/unit/proxy/session_test.cpp) to see every
// name looked up and every address dialled, with no network and no root.
using LookupFn = std::function<asio::awaitable<ResolveResult>(std::string host)>;
using ConnectFn = std::function<asio::awaitable<asio::error_code>(asio::ip::tcp::socket& socket,
                                                                  asio::ip::tcp::endpoint to)>;

// What a session needs from the thread it runs on.
struct Worker {
  Worker(const runtime::Config& c, policy::SnapshotStore& s, runtime::DecisionLog::Producer& p,
         std::atomic<std::size_t>& active);
  ~Worker();

  // Declared before io: destroying io destroys pending sessions, which unregister here.
  std::unordered_set<Session*> sessions;  // this thread's sessions, for draining
  bool draining = false;
  asio::io_context io{1};
  const runtime::Config& cfg;
  policy::SnapshotStore& store;
  runtime::DecisionLog::Producer& log;
  std::atomic<std::size_t>& active;  // connections open across all workers
  Resolver resolver;
  runtime::RecordFolder folder;  // deny records past decision-log-per-client
  asio::steady_timer fold_timer{io};
  bool fold_timer_armed = false;
  void arm_fold_timer();  // summaries are due: write them when the interval ends
  LookupFn lookup;        // resolver.async_resolve
  ConnectFn connect;      // socket.async_connect
  std::vector<asio::ip::tcp::acceptor> acceptors;
  runtime::SpareDescriptor spare;  // released to accept-and-refuse when out of descriptors
};

class ProxyServer {
 public:
  ProxyServer(const runtime::Config& cfg, policy::SnapshotStore& store, runtime::DecisionLog& log);
  ~ProxyServer();

  // Bind every proxy-listen address on every worker. Returns the bound endpoints (port 0
  // resolved to the chosen port). Throws std::system_error when a bind fails.
  std::vector<asio::ip::tcp::endpoint> listen();
  void start();  // start worker threads
  // Stop accepting, close idle keep-alive connections, wait up to drain-timeout for the
  // rest, then stop the loops and join the threads.
  void shutdown();
  std::size_t active() const { return active_.load(std::memory_order_relaxed); }
  // The I/O threads' loops, for the DNS server to run on. Valid until this server is
  // destroyed; the threads run from start() to shutdown().
  std::vector<runtime::Loop> loops() const;

 private:
  const runtime::Config& cfg_;
  std::atomic<std::size_t> active_{0};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace vibepit::proxy
