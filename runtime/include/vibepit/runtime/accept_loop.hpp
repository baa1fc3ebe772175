#pragma once
// One accept loop for every listener of the appliance: the proxy, DNS over TCP and the
// control API.
//
// A failing accept never spins. When the process is out of descriptors (EMFILE, ENFILE,
// ENOBUFS, ENOMEM) the listener's spare descriptor, if it keeps one, is released to take
// one pending client off the queue and tell it why; then, after any failure, the loop
// waits 50 ms before accepting again.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

namespace vibepit::runtime {

// One descriptor held in reserve (on /dev/null), so that a process out of descriptors can
// still accept one client to answer it.
class SpareDescriptor {
 public:
  SpareDescriptor();
  ~SpareDescriptor();
  SpareDescriptor(const SpareDescriptor&) = delete;
  SpareDescriptor& operator=(const SpareDescriptor&) = delete;

  // Frees the spare, accepts one pending client on `listener` (non-blocking), sends it
  // `refusal` (may be empty), closes it, and takes the spare again.
  void refuse_one(int listener, std::string_view refusal);

 private:
  int fd_ = -1;
};

inline constexpr std::chrono::milliseconds kAcceptBackoff{50};

struct AcceptPolicy {
  const char* what = "";             // for the log: "proxy", "dns", "control"
  SpareDescriptor* spare = nullptr;  // none: a shortage only backs off
  std::string refusal;               // sent to a client refused for want of descriptors
  // When the acceptor's owner may be destroyed while the loop waits, its liveness flag:
  // the loop touches nothing once it reads false. Null: the owner outlives the loop.
  std::shared_ptr<const bool> alive;
};

// Logs a failed accept and, when descriptors ran out, refuses one client with the spare.
void on_accept_error(asio::ip::tcp::acceptor& acceptor, const asio::error_code& ec,
                     const AcceptPolicy& policy);

// Accepts until the acceptor closes. `on_accept(socket, peer)` takes each client; it returns
// false to end the loop (its owner is going away).
template <class OnAccept>
asio::awaitable<void> accept_loop(asio::ip::tcp::acceptor& acceptor, AcceptPolicy policy,
                                  OnAccept on_accept) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  asio::steady_timer backoff(co_await asio::this_coro::executor);
  for (;;) {
    asio::ip::tcp::socket sock(acceptor.get_executor());
    asio::ip::tcp::endpoint peer;  // from accept itself: no getpeername() per connection
    co_await acceptor.async_accept(sock, peer, tok);
    if (ec == asio::error::operation_aborted || (policy.alive && !*policy.alive)) co_return;
    if (!acceptor.is_open()) co_return;
    if (ec) {
      on_accept_error(acceptor, ec, policy);
      backoff.expires_after(kAcceptBackoff);
      co_await backoff.async_wait(tok);
      continue;
    }
    if (!on_accept(std::move(sock), peer)) co_return;
  }
}

}  // namespace vibepit::runtime
