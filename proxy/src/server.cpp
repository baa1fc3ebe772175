#include "vibepit/proxy/server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

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

bool out_of_descriptors(const asio::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

asio::awaitable<void> accept_loop(Worker& w, tcp::acceptor& acceptor) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  asio::steady_timer backoff(w.io);
  for (;;) {
    tcp::socket sock(w.io);
    tcp::endpoint peer;  // from accept itself: no getpeername() per connection
    co_await acceptor.async_accept(sock, peer, tok);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      if (out_of_descriptors(ec)) {
        // Free the spare descriptor to take one pending client off the queue and answer it,
        // then back off so a persistent shortage is not a busy loop.
        if (w.spare_fd >= 0) {
          ::close(w.spare_fd);
          // accept4 on the O_NONBLOCK listener: never blocks, even if the queue emptied.
          int fd =
              ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd >= 0) {
            auto text =
                make_error_response(503, ProxyError::proxy_internal_error,
                                    "the proxy is out of file descriptors; retry later", true);
            [[maybe_unused]] auto sent = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
            ::close(fd);
          }
          w.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        spdlog::warn("accept: {} (backing off 50 ms)", ec.message());
      } else {
        spdlog::warn("accept: {}", ec.message());
      }
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(tok);
      continue;
    }
    if (w.draining) {
      refuse_now(sock, 503, "the proxy is shutting down");
      continue;
    }
    if (w.active.fetch_add(1, std::memory_order_relaxed) >= w.cfg.max_connections) {
      w.active.fetch_sub(1, std::memory_order_relaxed);
      refuse_now(sock, 503, "too many connections (max-connections); retry later");
      continue;
    }
    std::make_shared<Session>(w, std::move(sock), peer)->start();
  }
}

constexpr auto kSweepInterval = std::chrono::milliseconds(100);

// One timer per thread enforces every deadline: timeouts are seconds long, so 100 ms of
// slack costs nothing, and connections need no timer of their own.
void sweep(Worker& w) {
  w.sweeper.expires_after(kSweepInterval);
  w.sweeper.async_wait([&w](const asio::error_code& ec) {
    if (ec) return;
    auto now = std::chrono::steady_clock::now();
    for (auto* s : w.sessions) s->check_deadline(now);  // closing never erases synchronously
    sweep(w);
  });
}

}  // namespace

Worker::Worker(const runtime::Config& c, policy::SnapshotStore& s,
               runtime::DecisionLog::Producer& p, std::atomic<std::size_t>& a)
    : cfg(c), store(s), log(p), active(a), resolver(io, c.upstream_dns, c.resolve_timeout) {
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Worker::~Worker() {
  if (spare_fd >= 0) ::close(spare_fd);
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
      asio::co_spawn(w->io, accept_loop(*w, a), asio::detached);
    }
    sweep(*w);
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
}

}  // namespace vibepit::proxy
