#include "vibepit/proxy/server.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <spdlog/spdlog.h>

#include "vibepit/runtime/endpoint.hpp"
#include "vibepit/runtime/thread_name.hpp"

namespace vibepit::proxy {

using asio::ip::tcp;

ProxyServer::ProxyServer(const config::ProxyConfig& cfg, policy::SnapshotStore& store,
                         decision_log::DecisionLog& log, runtime::PendingTable* pending)
    : cfg_(cfg) {
  unsigned n = cfg.threads ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<Worker>(cfg, store, log.make_producer(), active_, pending));
  }
}

void ProxyServer::set_inspection(Inspection* inspection) {
  for (auto& w : workers_) w->set_inspection(inspection);
}

ProxyServer::~ProxyServer() {
  for (auto& w : workers_) w->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<tcp::endpoint> ProxyServer::listen() {
  std::vector<tcp::endpoint> bound;
  for (const auto& ep : cfg_.listen) {
    auto want = runtime::to_tcp_endpoint(ep.addr, ep.port);
    // Port 0: the first worker picks the port and the others join it.
    for (auto& w : workers_) want = w->listen(want);
    bound.push_back(want);
  }
  return bound;
}

std::vector<runtime::Loop> ProxyServer::loops() const {
  std::vector<runtime::Loop> out;
  for (const auto& w : workers_) out.push_back(w->loop());
  return out;
}

void ProxyServer::start() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    threads_.emplace_back([&w = *workers_[i], i] {
      runtime::name_this_thread("vp-proxy-" + std::to_string(i));
      w.run();
    });
  }
}

void ProxyServer::shutdown() {
  for (auto& w : workers_) w->drain();
  auto until = std::chrono::steady_clock::now() + cfg_.drain_timeout;
  while (active() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (active() > 0) {
    // Closed on their own threads, the connections end as on any close: a tunnel writes its
    // close record with the bytes it moved. One that is still waiting on something else (a
    // name lookup) has a moment to see it.
    spdlog::warn("drain timeout: closing {} open connections", active());
    for (auto& w : workers_) w->close_sessions();
    until = std::chrono::steady_clock::now() + kCloseGrace;
    while (active() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (active() > 0) spdlog::warn("{} connections still open at exit", active());
  }
  for (auto& w : workers_) w->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // The threads are gone: their producers may be used from here. The last summaries.
  for (auto& w : workers_) w->flush_log();
}

}  // namespace vibepit::proxy
