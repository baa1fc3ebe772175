#include "vibepit/dns/server.hpp"

#include <asio/post.hpp>

#include "dns_worker.hpp"
#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::dns {

DnsServer::DnsServer(const config::DnsConfig& cfg, policy::SnapshotStore& store,
                     std::span<const runtime::Loop> loops)
    : cfg_(cfg),
      cache_(std::make_unique<SharedCache>(
          CacheLimits{.entries = cfg.cache_entries,
                      .min_ttl = cfg.cache_min_ttl,
                      .max_ttl = cfg.cache_max_ttl,
                      .max_negative_ttl = cfg.cache_max_negative_ttl})) {
  for (const auto& loop : loops) {
    workers_.push_back(std::make_shared<DnsWorker>(*loop.io, cfg, store, *loop.log, *cache_));
  }
}

DnsServer::~DnsServer() = default;

std::vector<asio::ip::udp::endpoint> DnsServer::listen() {
  std::vector<asio::ip::udp::endpoint> bound;
  for (const auto& ep : cfg_.listen) {
    auto want =
        asio::ip::udp::endpoint(runtime::to_tcp_endpoint(ep.addr, ep.port).address(), ep.port);
    for (auto& w : workers_) {
      want = w->bind(want);  // port 0: the other threads join the port the first one got
    }
    bound.push_back(want);
  }
  return bound;
}

void DnsServer::start() {
  for (auto& w : workers_) asio::post(w->io(), [w] { w->start(); });
}

void DnsServer::stop() {
  for (auto& w : workers_) asio::post(w->io(), [w] { w->stop(); });
}

}  // namespace vibepit::dns
