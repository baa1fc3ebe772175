#pragma once
// A c-ares channel driven by an Asio event loop, as Envoy drives it: c-ares reports each
// socket it wants watched through its socket-state callback, we wait for readiness with
// Asio and call ares_process_fd, and one timer drives c-ares' own timeouts. Only the given
// servers are asked: never /etc/resolv.conf, never /etc/hosts. Single-threaded, like the
// channel itself: one per io_context.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/config/config.hpp"

struct ares_channeldata;

namespace vibepit::runtime {

struct AresOptions {
  std::chrono::milliseconds timeout{3000};  // the whole budget of a query, retries included
  bool tcp = false;                         // ARES_FLAG_USEVC: every query over TCP
  bool ignore_truncation = false;  // ARES_FLAG_IGNTC: hand truncated UDP answers back as is
  bool any_rcode = false;          // ARES_FLAG_NOCHECKRESP: hand SERVFAIL/REFUSED answers back too
  // Non-zero: the UDP answer size we accept. Without it c-ares cuts UDP answers at 512
  // bytes (it adds no OPT to queries given to ares_send; the caller's query carries one).
  std::uint16_t edns_payload = 0;
};

class AresChannel {
 public:
  // Throws std::runtime_error when c-ares refuses the options or the servers.
  AresChannel(asio::io_context& io, const std::vector<config::Endpoint>& servers, AresOptions opts);
  ~AresChannel();  // pending queries complete with ARES_EDESTRUCTION
  AresChannel(const AresChannel&) = delete;
  AresChannel& operator=(const AresChannel&) = delete;

  ares_channeldata* get() const { return channel_; }
  // Called around every batch of c-ares processing (one readiness event or a timeout), in
  // which many queries may complete: a user can gather what the callbacks produce and
  // send it in one go.
  void set_batch_hooks(std::function<void()> before, std::function<void()> after) {
    before_ = std::move(before);
    after_ = std::move(after);
  }
  // Call after starting a query on get(): c-ares may want its timer earlier now.
  void rearm_timer();

 private:
  struct Watch;
  static void on_sock_state(void* data, int fd, int readable, int writable);
  void watch(const std::shared_ptr<Watch>& w, bool read);
  void process(int read_fd, int write_fd);

  asio::io_context& io_;
  ares_channeldata* channel_ = nullptr;
  asio::steady_timer timer_;
  bool timer_armed_ = false;  // a wait is pending on timer_
  std::unordered_map<int, std::shared_ptr<Watch>> watches_;
  std::function<void()> before_, after_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Call once per process before any channel is made.
void resolver_library_init();

}  // namespace vibepit::runtime
