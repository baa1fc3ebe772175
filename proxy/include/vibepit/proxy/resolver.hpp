#pragma once
// Asynchronous name resolution with c-ares on an Asio event loop (AresChannel). One
// Resolver per io_context (c-ares channels are single-threaded). Only the configured servers
// are used: never /etc/resolv.conf, never /etc/hosts.
//
// Answers are cached for their DNS TTL (capped), and concurrent lookups of one name share
// one query. The cache holds addresses, not verdicts: every decision still classifies
// every address it is given, so caching opens no rebinding window.
//
// A name in use is refreshed ahead of its expiry: if an entry answers any lookup during its
// life, one query is sent in the background when nine tenths of that life have passed (at
// once, if the hit comes later than that), and its answer replaces the entry. So the
// tunnels to a busy host do not wait for a fresh lookup each time its TTL runs out. Nothing
// is served past its TTL, a failed refresh leaves the entry to expire, and a name not asked
// for again during its life just expires: at rest the resolver sends nothing.

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/async_result.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/runtime/ares_channel.hpp"

struct ares_addrinfo;

namespace vibepit::proxy {

struct ResolveResult {
  bool ok = false;
  std::vector<policy::IpAddr> addrs;  // in the order the upstream gave them
  std::string error;                  // why resolution failed, when !ok
  bool timed_out = false;             // failed because no upstream server answered
  bool cached = false;                // answered from this resolver's cache
  bool cancelled = false;             // the asking connection went away meanwhile
};

// Bounds of a resolver's answer cache.
struct ResolverCacheLimits {
  std::size_t entries = 4096;
  std::chrono::seconds max_ttl{300};
};

// The time a resolver's cache decisions (expiry, refresh) are made by: steady_clock unless
// a test injects a clock it moves by hand. Read through a plain function pointer, once per
// lookup.
struct ResolverClock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point (*now)() = &std::chrono::steady_clock::now;
  // If set, the longest the refresh timer waits (in real time) before it reads now() again.
  // Only a clock moved by hand needs it: steady time and the timer's own clock agree.
  std::chrono::milliseconds recheck{0};
};

class Resolver {
 public:
  using CacheLimits = ResolverCacheLimits;
  Resolver(asio::io_context& io, const std::vector<config::Endpoint>& servers,
           std::chrono::milliseconds timeout, CacheLimits limits = {}, ResolverClock clock = {});
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // A cache hit answered at once, without a round through the event loop.
  bool cached(const std::string& name, ResolveResult& out);

  // Completion signature void(ResolveResult). The handler always runs later on the loop,
  // never inside the call.
  template <typename Token>
  auto async_resolve(std::string name, Token&& token) {
    return asio::async_initiate<Token, void(ResolveResult)>(
        [this](auto handler, const std::string& n) {
          using H = decltype(handler);
          start(n, std::make_unique<Waiter<H>>(std::move(handler), io_));
        },
        token, std::move(name));
  }

 private:
  struct WaiterBase {
    virtual ~WaiterBase() = default;
    virtual void complete(ResolveResult r) = 0;
  };
  template <typename H>
  struct Waiter final : WaiterBase {
    Waiter(H h, asio::io_context& io) : handler(std::move(h)), io_(io) {}
    void complete(ResolveResult r) override {
      asio::post(io_, [h = std::move(handler), r = std::move(r)]() mutable { std::move(h)(r); });
    }
    H handler;
    asio::io_context& io_;
  };
  struct Query;
  using Clock = std::chrono::steady_clock;
  struct CacheEntry {
    std::vector<policy::IpAddr> addrs;
    Clock::time_point expires;
    Clock::time_point refresh_at;  // nine tenths of its life
    std::list<std::string>::iterator lru;
    bool refresh_planned = false;  // it has answered a lookup: refreshed at refresh_at
  };

  void start(const std::string& name, std::unique_ptr<WaiterBase> waiter);
  // Puts a query for `name` on the wire; its answer goes to finish(). The caller has made
  // its inflight_ entry.
  void send(const std::string& name);
  // A query with no waiters yet, unless one for `name` is already on the wire.
  void refresh(const std::string& name);
  void plan_refresh(Clock::time_point at, const std::string& name);
  void arm_refresh_timer(Clock::time_point at);
  void refresh_due();
  void finish(const std::string& name, const ResolveResult& r, int ttl);
  bool from_cache(const std::string& name, WaiterBase& waiter);
  static void on_addrinfo(void* arg, int status, int timeouts, ares_addrinfo* res);

  asio::io_context& io_;
  CacheLimits limits_;
  ResolverClock clock_;
  std::unordered_map<std::string, CacheEntry> cache_;
  std::list<std::string> lru_;  // most recently used first
  std::unordered_map<std::string, std::vector<std::unique_ptr<WaiterBase>>> inflight_;
  std::multimap<Clock::time_point, std::string> refresh_plan_;  // may hold stale items
  asio::steady_timer refresh_timer_;
  Clock::time_point refresh_timer_at_ = Clock::time_point::max();  // its pending wait's
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Last, so it is destroyed first: its pending lookups complete (ARES_EDESTRUCTION) while
  // the cache and the waiters they touch still exist.
  runtime::AresChannel channel_;
};

}  // namespace vibepit::proxy
