#include "vibepit/proxy/server.hpp"

#include <sys/socket.h>

#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/session.hpp"
#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;

// Best effort, never blocking: a refused client gets a clear status, not a silent reset.
void refuse_now(tcp::socket& s, int status, std::string_view why) {
  auto text = make_error_response(status, ProxyError::proxy_internal_error, why, true);
  asio::error_code ec;
  s.non_blocking(true, ec);
  s.send(asio::buffer(text), 0, ec);
  s.close(ec);
}

// Each client accepted: refused at once while draining or over max-connections, else
// handed to a new Session.
bool take_client(Worker& w, tcp::socket sock, const tcp::endpoint& peer) {
  if (w.draining) {
    refuse_now(sock, 503, "the proxy is shutting down");
    return true;
  }
  if (w.active.fetch_add(1, std::memory_order_relaxed) >= w.cfg.max_connections) {
    w.active.fetch_sub(1, std::memory_order_relaxed);
    refuse_now(sock, 503, "too many connections (max-connections); retry later");
    return true;
  }
  std::make_shared<Session>(w, std::move(sock), peer)->start();
  return true;
}

}  // namespace

Worker::Worker(const runtime::Config& c, policy::SnapshotStore& s,
               runtime::DecisionLog::Producer& p, std::atomic<std::size_t>& a)
    : cfg(c),
      store(s),
      log(p),
      active(a),
      resolver(io, c.upstream_dns, c.resolve_timeout),
      folder(c.decision_log_per_client,
             [&p](runtime::DecisionRecord&& r) { p.push(std::move(r)); }) {
  lookup = [this](std::string host) {
    return resolver.async_resolve(std::move(host), asio::use_awaitable);
  };
  connect = [](tcp::socket& socket, tcp::endpoint to) -> asio::awaitable<asio::error_code> {
    asio::error_code ec;
    co_await socket.async_connect(to, asio::redirect_error(asio::use_awaitable, ec));
    co_return ec;
  };
}

Worker::~Worker() = default;

void Worker::arm_fold_timer() {
  if (fold_timer_armed || !folder.pending()) return;
  fold_timer_armed = true;
  fold_timer.expires_at(folder.due());
  fold_timer.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    fold_timer_armed = false;
    folder.flush(std::chrono::steady_clock::now(), true);
  });
}

ProxyServer::ProxyServer(const runtime::Config& cfg, policy::SnapshotStore& store,
                         runtime::DecisionLog& log)
    : cfg_(cfg) {
  unsigned n = cfg.threads ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<Worker>(cfg, store, log.make_producer(), active_));
  }
}

ProxyServer::~ProxyServer() {
  for (auto& w : workers_) w->io.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<tcp::endpoint> ProxyServer::listen() {
  std::vector<tcp::endpoint> bound;
  for (const auto& ep : cfg_.proxy_listen) {
    auto want = runtime::to_tcp_endpoint(ep.addr, ep.port);
    for (auto& w : workers_) {
      tcp::acceptor a(w->io);
      a.open(want.protocol());
      a.set_option(tcp::acceptor::reuse_address(true));
      int one = 1;
      // Each worker has its own accept queue on the same port: the kernel spreads clients.
      ::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
      if (want.address().is_v6()) a.set_option(asio::ip::v6_only(true));
      // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one setsockopt
      // here instead of one per connection.
      a.set_option(tcp::no_delay(true));
      a.bind(want);
      a.listen(asio::socket_base::max_listen_connections);
      want = a.local_endpoint();  // port 0: the other workers join the chosen port
      w->acceptors.push_back(std::move(a));
    }
    bound.push_back(want);
  }
  return bound;
}

std::vector<runtime::Loop> ProxyServer::loops() const {
  std::vector<runtime::Loop> out;
  for (const auto& w : workers_) out.push_back({&w->io, &w->log});
  return out;
}

void ProxyServer::start() {
  for (auto& w : workers_) {
    for (auto& a : w->acceptors) {
      runtime::AcceptPolicy policy;
      policy.what = "proxy";
      policy.spare = &w->spare;
      policy.refusal =
          make_error_response(503, ProxyError::proxy_internal_error,
                              "the proxy is out of file descriptors; retry later", true);
      asio::co_spawn(w->io,
                     runtime::accept_loop(a, std::move(policy),
                                          [&w = *w](tcp::socket s, const tcp::endpoint& peer) {
                                            return take_client(w, std::move(s), peer);
                                          }),
                     asio::detached);
    }
    threads_.emplace_back([&io = w->io] {
      auto guard = asio::make_work_guard(io);
      io.run();
    });
  }
}

void ProxyServer::shutdown() {
  for (auto& w : workers_) {
    asio::post(w->io, [&w = *w] {
      w.draining = true;
      for (auto& a : w.acceptors) {
        asio::error_code ignored;
        a.close(ignored);
      }
      // Copy: a session may close and leave the set while we walk it.
      std::vector<Session*> sessions(w.sessions.begin(), w.sessions.end());
      for (auto* s : sessions) {
        if (w.sessions.count(s)) s->on_drain();
      }
    });
  }
  auto until = std::chrono::steady_clock::now() + cfg_.drain_timeout;
  while (active() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (active() > 0) spdlog::warn("drain timeout: closing {} open connections", active());
  for (auto& w : workers_) w->io.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // The threads are gone: their producers may be used from here. The last summaries.
  for (auto& w : workers_) w->folder.flush(std::chrono::steady_clock::now(), true);
}

}  // namespace vibepit::proxy
