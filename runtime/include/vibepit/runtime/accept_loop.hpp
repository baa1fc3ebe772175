#pragma once
// One accept loop for every listener of the appliance: the proxy, DNS over TCP and the
// control API.
//
// The listener is a tcp::socket put into the listening state (listen_tcp), not Asio's
// acceptor: the loop accepts with accept4() itself, so each client's socket is made
// non-blocking and close-on-exec by the kernel and handed to Asio as such (adopt_fresh in
// reactor.hpp: no ioctl per client, no EPOLL_CTL_DEL when it closes), and it waits for the
// next client with async_wait_edge(), which needs a socket (no re-arm per wait).
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
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "vibepit/runtime/reactor.hpp"

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

struct ListenOptions {
  bool reuse_port = false;  // SO_REUSEPORT: one listener per worker on one port
  bool no_delay = false;    // TCP_NODELAY, inherited by every accepted socket (Linux)
  // TCP_DEFER_ACCEPT: a client is accepted when its first bytes arrive, so the first read
  // finds them; one that sends nothing is accepted after about this many seconds (the
  // kernel's next SYN-ACK retransmission), and until then holds no descriptor. For
  // protocols where the client speaks first. 0: off.
  int defer_accept_s = 0;
  int backlog = asio::socket_base::max_listen_connections;
};

// SO_REUSEPORT on `fd`: every thread has its own socket on one port, and the kernel spreads
// the clients (or datagrams) over them. The error, if the kernel refuses.
asio::error_code set_reuse_port(int fd);

// A non-blocking listening socket bound to `at` (port 0: the kernel picks). Throws
// asio::system_error, naming the failing step, if it cannot listen.
asio::ip::tcp::socket listen_tcp(asio::io_context& io, const asio::ip::tcp::endpoint& at,
                                 const ListenOptions& options);

// One accept4() on `listener`: the client's descriptor goes to `client` (adopt_fresh) and
// its address to `peer`. would_block when no client is waiting.
void accept_fresh(asio::ip::tcp::socket& listener, asio::ip::tcp::socket& client,
                  asio::ip::tcp::endpoint& peer, asio::error_code& ec);

// Logs a failed accept and, when descriptors ran out, refuses one client with the spare.
void on_accept_error(asio::ip::tcp::socket& listener, const asio::error_code& ec,
                     const AcceptPolicy& policy);

// Clients accepted in a row before the loop lets the thread's other work run.
inline constexpr int kAcceptBurst = 16;

// Accepts until the listener closes. `on_accept(socket, peer)` takes each client; it returns
// false to end the loop (its owner is going away).
template <class OnAccept>
asio::awaitable<void> accept_loop(asio::ip::tcp::socket& listener, AcceptPolicy policy,
                                  OnAccept on_accept) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer backoff(ex);
  auto gone = [&] { return (policy.alive && !*policy.alive) || !listener.is_open(); };
  int burst = 0;
  for (;;) {
    asio::ip::tcp::socket client(listener.get_executor());
    asio::ip::tcp::endpoint peer;  // from accept itself: no getpeername() per connection
    accept_fresh(listener, client, peer, ec);
    if (ec == asio::error::would_block) {
      // Empty: the next client raises an edge on the listener.
      co_await async_wait_edge(listener, Edge::read, tok);
      if (ec == asio::error::operation_aborted || gone()) co_return;
      burst = 0;
      continue;
    }
    if (gone()) co_return;
    if (ec) {
      on_accept_error(listener, ec, policy);
      backoff.expires_after(kAcceptBackoff);
      co_await backoff.async_wait(tok);
      if (gone()) co_return;
      continue;
    }
    if (!on_accept(std::move(client), peer)) co_return;
    if (++burst == kAcceptBurst) {
      co_await asio::post(ex, asio::use_awaitable);
      if (gone()) co_return;
      burst = 0;
    }
  }
}

}  // namespace vibepit::runtime
