#pragma once
// Liveness and readiness for an orchestrator (config key health-listen, docs/fleet.md):
// plain HTTP/1.1 on a port of its own, without TLS and without anything else on it.
// GET or HEAD /livez (alive: every I/O loop turns) and /readyz (ready to take traffic:
// listeners open, rules loaded, upstream DNS answering, not draining). 200 with "ok", or
// 503 with the reasons, one a line; any other request gets 404 or 405, and the connection
// closes after each answer. One thread serves up to 32 clients at once, each given 0.5 s;
// past 32 the oldest is closed, so connections held open cannot keep a prober out.
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "vibepit/config/config.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/runtime/loop.hpp"

namespace vibepit::runtime {

struct HealthChecks {
  // Each returns the reasons it fails, one a line, or an empty string when it holds.
  std::function<std::string()> live;
  std::function<std::string()> ready;
};

class HealthServer {
 public:
  // Binds every address now (throws std::system_error naming it when one cannot be bound).
  HealthServer(const std::vector<config::Endpoint>& listen, HealthChecks checks);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  std::vector<config::Endpoint> listening() const;  // with the ports the kernel chose
  void start();                                     // the serving thread; the destructor stops it

 private:
  struct Client;
  void run();
  void step(Client& c);
  std::string answer(const http::RequestHead* head) const;

  std::vector<int> listeners_;
  HealthChecks checks_;
  int stop_ = -1;
  std::thread thread_;
};

// Whether each loop runs a posted no-op within `within`: an I/O thread stuck in a handler
// is not alive. The reasons name the loops that did not.
std::string loops_turning(const std::vector<Loop>& loops, std::chrono::milliseconds within);

// Asks each upstream DNS server for the root's NS records every `interval` (one at a time,
// `timeout` each), on a thread of its own. Any reply with the query's id counts as
// answering, whatever its rcode: the server is there.
class UpstreamProbe {
 public:
  UpstreamProbe(std::vector<config::Endpoint> servers, std::chrono::milliseconds interval,
                std::chrono::milliseconds timeout);
  ~UpstreamProbe();
  UpstreamProbe(const UpstreamProbe&) = delete;
  UpstreamProbe& operator=(const UpstreamProbe&) = delete;

  // Empty when a server answered within the last three intervals; else why not.
  std::string answering() const;

 private:
  void run();
  bool ask(const config::Endpoint& server);

  std::vector<config::Endpoint> servers_;
  std::chrono::milliseconds interval_, timeout_;
  std::atomic<std::int64_t> last_answer_ms_{-1};  // steady clock, ms; -1: never
  int stop_ = -1;
  std::thread thread_;
};

}  // namespace vibepit::runtime
