#include "vibepit/runtime/ares_channel.hpp"

#include <ares.h>
#include <netinet/in.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include <asio/posix/stream_descriptor.hpp>

namespace vibepit::runtime {

struct AresChannel::Watch {
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

AresChannel::AresChannel(asio::io_context& io, const std::vector<config::Endpoint>& servers,
                         AresOptions o)
    : io_(io), timer_(io) {
  ares_options opts{};
  int mask = 0;
  opts.sock_state_cb = &AresChannel::on_sock_state;
  opts.sock_state_cb_data = this;
  mask |= ARES_OPT_SOCK_STATE_CB;
  // c-ares doubles the wait on each retry: timeout/3 + 2*timeout/3 is the whole budget.
  opts.timeout = std::max<int>(1, static_cast<int>(o.timeout.count() / 3));
  mask |= ARES_OPT_TIMEOUTMS;
  opts.tries = 2;
  mask |= ARES_OPT_TRIES;
  opts.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES;
  if (o.tcp) opts.flags |= ARES_FLAG_USEVC;
  if (o.ignore_truncation) opts.flags |= ARES_FLAG_IGNTC;
  if (o.any_rcode) opts.flags |= ARES_FLAG_NOCHECKRESP;
  if (o.edns_payload) {
    opts.flags |= ARES_FLAG_EDNS;
    opts.ednspsz = o.edns_payload;
    mask |= ARES_OPT_EDNSPSZ;
  }
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
  // servers are replaced with the configured ones (with ports) right after.
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

AresChannel::~AresChannel() {
  *alive_ = false;
  ares_destroy(channel_);
  for (auto& [fd, w] : watches_) {
    w->closed = true;
    w->sd.release();
  }
}

void AresChannel::on_sock_state(void* data, int fd, int readable, int writable) {
  auto* self = static_cast<AresChannel*>(data);
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

void AresChannel::watch(const std::shared_ptr<Watch>& w, bool read) {
  (read ? w->reading : w->writing) = true;
  auto type =
      read ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write;
  w->sd.async_wait(type, [this, w, read, alive = alive_](const asio::error_code& ec) {
    if (!*alive) return;
    (read ? w->reading : w->writing) = false;
    if (ec || w->closed) return;
    process(read ? w->fd : ARES_SOCKET_BAD, read ? ARES_SOCKET_BAD : w->fd);
    // The callback may have closed the socket or changed what c-ares wants.
    if (!w->closed && (read ? w->want_read : w->want_write) && !(read ? w->reading : w->writing)) {
      watch(w, read);
    }
    rearm_timer();
  });
}

void AresChannel::process(int read_fd, int write_fd) {
  if (before_) before_();
  ares_process_fd(channel_, read_fd, write_fd);
  if (after_) after_();
}

void AresChannel::rearm_timer() {
  // Called after every query and every batch of answers. Every query gets the same timeout,
  // so a new query's deadline is never earlier than one already waited for: while the timer
  // is armed there is nothing to do (and ares_timeout, which walks every pending query, is
  // not called). An early wake-up processes nothing and re-arms.
  if (timer_armed_) return;
  timeval tv{};
  if (!ares_timeout(channel_, nullptr, &tv)) return;  // nothing pending
  timer_armed_ = true;
  timer_.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
  timer_.async_wait([this, alive = alive_](const asio::error_code& ec) {
    if (!*alive || ec) return;
    timer_armed_ = false;
    process(ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    rearm_timer();
  });
}

}  // namespace vibepit::runtime
