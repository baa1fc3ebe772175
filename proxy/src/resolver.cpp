#include "vibepit/proxy/resolver.hpp"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace vibepit::proxy {

struct Resolver::Query {
  Resolver* self;
  std::string name;
};

Resolver::Resolver(asio::io_context& io, const std::vector<config::Endpoint>& servers,
                   std::chrono::milliseconds timeout, CacheLimits limits, ResolverClock clock)
    : io_(io),
      limits_(limits),
      clock_(clock),
      refresh_timer_(io),
      channel_(io, servers, runtime::AresOptions{timeout, false, false}) {}

// Pending lookups complete with ARES_EDESTRUCTION when channel_ goes; their handlers are
// posted, not run.
Resolver::~Resolver() {
  *alive_ = false;
}

bool Resolver::cached(const std::string& name, ResolveResult& out) {
  auto it = cache_.find(name);
  if (it == cache_.end()) return false;
  auto now = clock_.now();
  auto& entry = it->second;
  if (now >= entry.expires) {
    lru_.erase(entry.lru);
    cache_.erase(it);
    return false;
  }
  lru_.splice(lru_.begin(), lru_, entry.lru);
  out.ok = true;
  out.cached = true;
  out.error.clear();
  out.addrs = entry.addrs;
  if (!entry.refresh_planned) {  // the first hit of this entry's life
    entry.refresh_planned = true;
    // Last: a refresh's answer may land in finish() at once and move the entry.
    if (now >= entry.refresh_at) {
      refresh(name);
    } else {
      plan_refresh(entry.refresh_at, name);
    }
  }
  return true;
}

void Resolver::refresh(const std::string& name) {
  // A lookup that arrives while it is on the wire (the entry having expired meanwhile)
  // waits for its answer.
  if (inflight_.try_emplace(name).second) send(name);
}

void Resolver::plan_refresh(Clock::time_point at, const std::string& name) {
  refresh_plan_.emplace(at, name);
  if (at < refresh_timer_at_) arm_refresh_timer(at);
}

void Resolver::arm_refresh_timer(Clock::time_point at) {
  refresh_timer_at_ = at;
  // Cancels a later wait, whose handler then does nothing. A wait cut short by `recheck`
  // finds nothing due and waits again.
  auto wait = at - clock_.now();
  if (clock_.recheck.count() > 0) wait = std::min<Clock::duration>(wait, clock_.recheck);
  refresh_timer_.expires_after(wait);
  refresh_timer_.async_wait([this, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec) return;
    refresh_timer_at_ = Clock::time_point::max();
    refresh_due();
  });
}

void Resolver::refresh_due() {
  auto now = clock_.now();
  while (!refresh_plan_.empty() && refresh_plan_.begin()->first <= now) {
    auto node = refresh_plan_.extract(refresh_plan_.begin());
    auto it = cache_.find(node.mapped());
    // Stale items: the entry was evicted, has expired, or has been answered anew since.
    if (it == cache_.end() || !it->second.refresh_planned || now >= it->second.expires ||
        now < it->second.refresh_at) {
      continue;
    }
    refresh(node.mapped());
  }
  if (!refresh_plan_.empty()) arm_refresh_timer(refresh_plan_.begin()->first);
}

bool Resolver::from_cache(const std::string& name, WaiterBase& waiter) {
  ResolveResult r;
  if (!cached(name, r)) return false;
  waiter.complete(std::move(r));
  return true;
}

void Resolver::start(const std::string& name, std::unique_ptr<WaiterBase> waiter) {
  if (from_cache(name, *waiter)) return;
  auto [it, first] = inflight_.try_emplace(name);
  it->second.push_back(std::move(waiter));
  if (first) send(it->first);  // else a query for this name is already on the wire
}

void Resolver::send(const std::string& name) {
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  // NOSORT: c-ares would otherwise connect() probe sockets to sort by route.
  hints.ai_flags = ARES_AI_NOSORT;
  auto* query = new Query{this, name};
  ares_getaddrinfo(channel_.get(), query->name.c_str(), nullptr, &hints, &Resolver::on_addrinfo,
                   query);
  channel_.rearm_timer();
}

void Resolver::finish(const std::string& name, const ResolveResult& r, int ttl) {
  if (r.ok && ttl > 0 && limits_.entries > 0) {
    auto life = std::min<std::chrono::seconds>(std::chrono::seconds(ttl), limits_.max_ttl);
    auto it = cache_.find(name);
    if (it == cache_.end()) {
      if (cache_.size() >= limits_.entries) {  // evict the least recently used
        cache_.erase(lru_.back());
        lru_.pop_back();
      }
      lru_.push_front(name);
      it = cache_.emplace(name, CacheEntry{{}, {}, {}, lru_.begin(), false}).first;
    }
    it->second.addrs = r.addrs;
    it->second.expires = clock_.now() + life;
    it->second.refresh_at =
        it->second.expires - std::chrono::duration_cast<std::chrono::milliseconds>(life) / 10;
    it->second.refresh_planned = false;
  }
  auto node = inflight_.extract(name);
  if (node.empty()) return;
  for (auto& waiter : node.mapped()) waiter->complete(r);
}

void Resolver::on_addrinfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
  std::unique_ptr<Query> query(static_cast<Query*>(arg));
  ResolveResult r;
  int ttl = std::numeric_limits<int>::max();
  if (status == ARES_SUCCESS && res) {
    for (auto* n = res->nodes; n; n = n->ai_next) {
      policy::IpAddr ip;
      if (n->ai_family == AF_INET) {
        auto* sa = reinterpret_cast<const sockaddr_in*>(n->ai_addr);
        std::memcpy(ip.bytes.data(), &sa->sin_addr, 4);
      } else if (n->ai_family == AF_INET6) {
        auto* sa = reinterpret_cast<const sockaddr_in6*>(n->ai_addr);
        ip.v6 = true;
        std::memcpy(ip.bytes.data(), &sa->sin6_addr, 16);
      } else {
        continue;
      }
      ttl = std::min(ttl, n->ai_ttl);
      bool dup = false;
      for (const auto& seen : r.addrs) dup = dup || seen == ip;
      if (!dup) r.addrs.push_back(ip);
    }
    r.ok = !r.addrs.empty();
    if (!r.ok) r.error = "no addresses";
  } else {
    r.error = ares_strerror(status);
    r.timed_out = status == ARES_ETIMEOUT;
  }
  if (res) ares_freeaddrinfo(res);
  if (!r.ok) ttl = 0;
  query->self->finish(query->name, r, ttl);
}

}  // namespace vibepit::proxy
