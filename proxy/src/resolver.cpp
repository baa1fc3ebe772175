#include "vibepit/proxy/resolver.hpp"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <limits>
#include <stdexcept>

namespace vibepit::proxy {

struct Resolver::Watch {
  Watch(asio::io_context& io, int f) : fd(f), sd(io, f) {}
  int fd;
  asio::posix::stream_descriptor sd;
  bool want_read = false, want_write = false;
  bool reading = false, writing = false;
  bool closed = false;
};

void resolver_library_init() {
  static const int rc = ares_library_init(ARES_LIB_INIT_ALL);
  if (rc != ARES_SUCCESS) throw std::runtime_error(std::string("c-ares: ") + ares_strerror(rc));
}

struct Resolver::Query {
  Resolver* self;
  std::string name;
};

Resolver::Resolver(asio::io_context& io, const std::vector<Endpoint>& servers,
                   std::chrono::milliseconds timeout, CacheLimits limits)
    : io_(io), timer_(io), limits_(limits) {
  ares_options opts{};
  int mask = 0;
  opts.sock_state_cb = &Resolver::on_sock_state;
  opts.sock_state_cb_data = this;
  mask |= ARES_OPT_SOCK_STATE_CB;
  // c-ares doubles the wait on each retry: timeout/3 + 2*timeout/3 is the whole budget.
  opts.timeout = std::max<int>(1, static_cast<int>(timeout.count() / 3));
  mask |= ARES_OPT_TIMEOUTMS;
  opts.tries = 2;
  mask |= ARES_OPT_TRIES;
  opts.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES;
  mask |= ARES_OPT_FLAGS;
  // DNS only: the host's /etc/hosts must not answer for the sandbox ("localhost", ...).
  char lookups[] = "b";
  opts.lookups = lookups;
  mask |= ARES_OPT_LOOKUPS;
  opts.ndomains = 0;
  opts.domains = nullptr;
  mask |= ARES_OPT_DOMAINS;
  // Every name is asked as given (ndots 0), including single-label names.
  opts.ndots = 0;
  mask |= ARES_OPT_NDOTS;
  opts.sortlist = nullptr;
  opts.nsort = 0;
  mask |= ARES_OPT_SORTLIST;
  // Every option resolv.conf could supply is set here, so c-ares does not read it; the
  // servers are replaced with upstream-dns (with ports) right after.
  in_addr none{};
  opts.servers = &none;
  opts.nservers = 1;
  mask |= ARES_OPT_SERVERS;

  int rc = ares_init_options(&channel_, &opts, mask);
  if (rc != ARES_SUCCESS) throw std::runtime_error(std::string("c-ares: ") + ares_strerror(rc));

  std::string csv;
  for (const auto& s : servers) {
    if (!csv.empty()) csv += ',';
    csv += s.to_string();
  }
  rc = ares_set_servers_ports_csv(channel_, csv.c_str());
  if (rc != ARES_SUCCESS) {
    ares_destroy(channel_);
    throw std::runtime_error("c-ares: cannot use upstream-dns \"" + csv +
                             "\": " + ares_strerror(rc));
  }
}

Resolver::~Resolver() {
  *alive_ = false;
  // Pending lookups complete with ARES_EDESTRUCTION; their handlers are posted, not run.
  ares_destroy(channel_);
  for (auto& [fd, w] : watches_) {
    w->closed = true;
    w->sd.release();
  }
}

bool Resolver::cached(const std::string& name, ResolveResult& out) {
  auto it = cache_.find(name);
  if (it == cache_.end()) return false;
  if (std::chrono::steady_clock::now() >= it->second.expires) {
    lru_.erase(it->second.lru);
    cache_.erase(it);
    return false;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  out.ok = true;
  out.cached = true;
  out.error.clear();
  out.addrs = it->second.addrs;
  return true;
}

bool Resolver::from_cache(const std::string& name, WaiterBase& waiter) {
  ResolveResult r;
  if (!cached(name, r)) return false;
  waiter.complete(std::move(r));
  return true;
}

void Resolver::start(std::string name, std::unique_ptr<WaiterBase> waiter) {
  if (from_cache(name, *waiter)) return;
  auto [it, first] = inflight_.try_emplace(name);
  it->second.push_back(std::move(waiter));
  if (!first) return;  // a query for this name is already on the wire
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  // NOSORT: c-ares would otherwise connect() probe sockets to sort by route.
  hints.ai_flags = ARES_AI_NOSORT;
  auto* query = new Query{this, std::move(name)};
  ares_getaddrinfo(channel_, query->name.c_str(), nullptr, &hints, &Resolver::on_addrinfo, query);
  rearm_timer();
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
      it = cache_.emplace(name, CacheEntry{{}, {}, lru_.begin()}).first;
    }
    it->second.addrs = r.addrs;
    it->second.expires = std::chrono::steady_clock::now() + life;
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
  }
  if (res) ares_freeaddrinfo(res);
  if (!r.ok) ttl = 0;
  query->self->finish(query->name, r, ttl);
}

void Resolver::on_sock_state(void* data, int fd, int readable, int writable) {
  auto* self = static_cast<Resolver*>(data);
  auto it = self->watches_.find(fd);
  if (!readable && !writable) {
    // c-ares is about to close fd: stop watching it and let go without closing it.
    if (it != self->watches_.end()) {
      it->second->closed = true;
      it->second->sd.release();
      self->watches_.erase(it);
    }
    return;
  }
  if (it == self->watches_.end()) {
    it = self->watches_.emplace(fd, std::make_shared<Watch>(self->io_, fd)).first;
  }
  auto w = it->second;
  w->want_read = readable;
  w->want_write = writable;
  if (w->want_read && !w->reading) self->watch(w, true);
  if (w->want_write && !w->writing) self->watch(w, false);
}

void Resolver::watch(const std::shared_ptr<Watch>& w, bool read) {
  (read ? w->reading : w->writing) = true;
  auto type =
      read ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write;
  w->sd.async_wait(type, [this, w, read, alive = alive_](const asio::error_code& ec) {
    if (!*alive) return;
    (read ? w->reading : w->writing) = false;
    if (ec || w->closed) return;
    ares_process_fd(channel_, read ? w->fd : ARES_SOCKET_BAD, read ? ARES_SOCKET_BAD : w->fd);
    // The callback may have closed the socket or changed what c-ares wants.
    if (!w->closed && (read ? w->want_read : w->want_write) && !(read ? w->reading : w->writing)) {
      watch(w, read);
    }
    rearm_timer();
  });
}

void Resolver::rearm_timer() {
  timeval tv{};
  if (!ares_timeout(channel_, nullptr, &tv)) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
  timer_.async_wait([this, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec) return;
    ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm_timer();
  });
}

}  // namespace vibepit::proxy
