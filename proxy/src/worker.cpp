#include "vibepit/proxy/worker.hpp"

#include <sys/socket.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/session.hpp"
#include "vibepit/runtime/reactor.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;

// TCP_DEFER_ACCEPT on the proxy's listeners, in seconds. The kernel rounds it to SYN-ACK
// retransmissions; 1 is the shortest deferral it has.
constexpr int kDeferAcceptSeconds = 1;

// Best effort, never blocking: a refused client gets a clear status, not a silent reset.
void refuse_now(tcp::socket& s, int status, std::string_view why) {
  auto text = make_error_response(status, ProxyError::proxy_internal_error, why, true);
  asio::error_code ec;
  s.non_blocking(true, ec);
  s.send(asio::buffer(text), 0, ec);
  s.close(ec);
}

}  // namespace

Worker::Worker(const config::ProxyConfig& cfg, policy::SnapshotStore& store,
               decision_log::DecisionLog::Producer& producer, std::atomic<std::size_t>& active,
               runtime::PendingTable* pending)
    : cfg_(cfg),
      store_(store),
      producer_(producer),
      active_(active),
      pending_(pending),
      resolver_(io_, cfg.upstream_dns, cfg.resolve_timeout),
      log_(io_, producer, cfg.log_per_client) {
  lookup_ = [this](std::string host) {
    return resolver_.async_resolve(std::move(host), asio::use_awaitable);
  };
  connect_ = [](tcp::socket& socket, const tcp::endpoint& to) {
    return runtime::connect_fresh(socket, to);
  };
}

Worker::~Worker() = default;

void Worker::set_outside(LookupFn lookup, ConnectFn connect) {
  lookup_ = std::move(lookup);
  connect_ = std::move(connect);
}

tcp::endpoint Worker::listen(const tcp::endpoint& want) {
  // SO_REUSEPORT: every worker has its own accept queue on one port. Accepted sockets
  // inherit TCP_NODELAY from the listener on Linux: one setsockopt here instead of one per
  // connection. An HTTP client speaks first, so a client is accepted with its request
  // already queued (TCP_DEFER_ACCEPT): the session's first read finds it, with no wait in
  // between. A silent client is accepted after about a second, and the header timeout
  // runs from then (docs/security.md).
  auto s = runtime::listen_tcp(
      io_, want, {.reuse_port = true, .no_delay = true, .defer_accept_s = kDeferAcceptSeconds});
  auto bound = s.local_endpoint();
  listeners_.push_back(std::move(s));
  return bound;
}

void Worker::run() {
  for (auto& a : listeners_) {
    runtime::AcceptPolicy policy;
    policy.what = "proxy";
    policy.spare = &spare_;
    policy.refusal = make_error_response(503, ProxyError::proxy_internal_error,
                                         "the proxy is out of file descriptors; retry later", true);
    asio::co_spawn(io_,
                   runtime::accept_loop(a, std::move(policy),
                                        [this](tcp::socket s, const tcp::endpoint& peer) {
                                          return take_client(std::move(s), peer);
                                        }),
                   asio::detached);
  }
  auto guard = asio::make_work_guard(io_);
  io_.run();
}

// Each client accepted: refused at once while draining or over max-connections, else
// handed to a new Session.
bool Worker::take_client(tcp::socket sock, const tcp::endpoint& peer) {
  if (draining_) {
    refuse_now(sock, 503, "the proxy is shutting down");
    return true;
  }
  if (active_.fetch_add(1, std::memory_order_relaxed) >= cfg_.max_connections) {
    active_.fetch_sub(1, std::memory_order_relaxed);
    refuse_now(sock, 503, "too many connections (max-connections); retry later");
    return true;
  }
  start_session(std::move(sock), peer);
  return true;
}

void Worker::start_session(tcp::socket client, const tcp::endpoint& peer) {
  std::allocate_shared<Session>(PoolAllocator<Session>(session_memory_), *this, std::move(client),
                                peer)
      ->start();
}

// The open sessions, as an intrusive list: a set's node would be one more allocation and
// free per connection.
void Worker::enter(Session& s) {
  s.links_.next = sessions_;
  if (sessions_) sessions_->links_.prev = &s;
  sessions_ = &s;
}

void Worker::leave(Session& s) {
  if (s.links_.prev) s.links_.prev->links_.next = s.links_.next;
  if (s.links_.next) s.links_.next->links_.prev = s.links_.prev;
  if (sessions_ == &s) sessions_ = s.links_.next;
  s.links_ = {};
  active_.fetch_sub(1, std::memory_order_relaxed);
}

// Each open session, with `act`. What it does (close_all(), on_drain()) only closes
// sockets and cancels a timer, whose handlers run later: no session leaves the list
// during the walk. Held by a reference meanwhile all the same.
template <class Act>
void Worker::for_each_session(Act act) {
  for (Session* s = sessions_; s;) {
    auto keep = s->weak_from_this().lock();
    Session* next = s->links_.next;
    if (keep) act(*s);
    s = next;
  }
}

void Worker::drain() {
  asio::post(io_, [this] {
    draining_ = true;
    for (auto& a : listeners_) {
      asio::error_code ignored;
      a.close(ignored);
    }
    for_each_session([](Session& s) { s.on_drain(); });
  });
}

void Worker::close_sessions() {
  asio::post(io_, [this] { for_each_session([](Session& s) { s.close_all(); }); });
}

void Worker::stop() {
  io_.stop();
}

}  // namespace vibepit::proxy
