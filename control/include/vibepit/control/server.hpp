#pragma once
// The control API server: HTTP/1.1 over mutual TLS 1.3 on its own thread and event loop,
// apart from the data path. Every connection has deadlines, the number of clients and the
// request rate are bounded, and a decision follower gets at most one batch queued: a slow
// follower loses records (and is told how many) instead of slowing anything down.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/ssl/context.hpp>

#include "vibepit/control/api.hpp"

namespace vibepit::control {

struct ServerOptions {
  std::vector<asio::ip::tcp::endpoint> listen;
  std::string socket_path;  // a unix socket as well (made mode 0600), when not empty
  std::size_t max_clients = 16;
  std::uint32_t rate = 500;  // requests per second across all clients; 0: no limit
  std::uint32_t burst = 1000;
  std::chrono::milliseconds timeout{10'000};   // handshake, one request, one write
  std::chrono::milliseconds idle{60'000};      // between keep-alive requests
  std::chrono::milliseconds follow_poll{20};   // how often a follower looks for new records
  std::chrono::milliseconds heartbeat{5'000};  // an empty line to a quiet follower
  std::size_t follow_batch = 512;              // records sent to a follower at once
};

struct ServerCounters {
  std::atomic<std::uint64_t> accepted{0}, refused_busy{0}, handshake_failed{0}, plain_http{0},
      requests{0}, rate_limited{0};
  std::atomic<std::uint64_t> followers{0};  // decision streams open now
};

class ControlServer {
 public:
  ControlServer(const ControlApi& api, const DecisionFeed& feed, asio::ssl::context tls,
                ServerOptions opts);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Bind every listen address; returns the bound endpoints (port 0 resolved).
  std::vector<asio::ip::tcp::endpoint> listen();
  void start();  // the control thread
  // Wait, up to `within`, until no decision follower is left: each ends its stream once the
  // feed has an end line and it has sent everything before it. Any thread.
  void finish_followers(std::chrono::milliseconds within);
  void stop();  // close everything and join
  const ServerCounters& counters() const { return counters_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  ServerCounters counters_;
  std::thread thread_;
};

}  // namespace vibepit::control
