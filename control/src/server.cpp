#include "vibepit/control/server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/thread_name.hpp"
#include "vibepit/runtime/token_bucket.hpp"

namespace vibepit::control {
namespace {

using asio::ip::tcp;
using local = asio::local::stream_protocol;
using Socket = asio::generic::stream_protocol::socket;  // a TCP or a unix-socket client
using clock = std::chrono::steady_clock;
constexpr unsigned char kTlsHandshakeRecord = 0x16;

// Said to a client that speaks plain HTTP to the TLS port, instead of a silent close.
const std::string& plain_reply() {
  static const std::string body =
      "This is the vibepit control API. It speaks TLS 1.3 with client certificates only; "
      "use the vibepit CLI to reach it.\n";
  static const std::string reply =
      "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  return reply;
}

// One connection: its TLS stream and a watchdog that closes the socket when a deadline
// passes, which ends whatever operation is waiting.
struct Conn : std::enable_shared_from_this<Conn> {
  Conn(Socket s, asio::ssl::context& ctx)
      : stream(std::move(s), ctx), watchdog(stream.get_executor()) {}

  void arm(std::chrono::milliseconds d) {
    watchdog.expires_after(d);
    watchdog.async_wait([weak = weak_from_this()](const asio::error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock()) {
        asio::error_code ignored;
        self->stream.lowest_layer().close(ignored);
      }
    });
  }

  asio::ssl::stream<Socket> stream;
  asio::steady_timer watchdog;
};

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

struct ControlServer::Impl {
  Impl(const ControlApi& a, const DecisionFeed& f, asio::ssl::context t, ServerOptions o,
       ServerCounters& c)
      : api(a), feed(f), tls(std::move(t)), opts(std::move(o)), counters(c) {}

  bool take_token() { return opts.rate == 0 || bucket.take(opts.rate, opts.burst, clock::now()); }

  bool take_client(Socket sock);  // each accepted client, from either accept loop
  asio::awaitable<void> serve(Socket sock);
  asio::awaitable<void> accept_local();
  asio::awaitable<void> follow(Conn& c, std::uint64_t after);

  const ControlApi& api;
  const DecisionFeed& feed;
  asio::ssl::context tls;  // declared before io: it outlives every connection
  ServerOptions opts;
  ServerCounters& counters;
  std::size_t active = 0;  // control thread only
  runtime::TokenBucket bucket{static_cast<double>(opts.burst), clock::now()};
  asio::io_context io{1};
  std::vector<tcp::socket> listeners;              // runtime::listen_tcp
  std::optional<local::acceptor> socket_listener;  // opts.socket_path
};

bool ControlServer::Impl::take_client(Socket sock) {
  counters.accepted.fetch_add(1, std::memory_order_relaxed);
  if (active >= opts.max_clients) {
    counters.refused_busy.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("control: {} clients connected already; refusing one", active);
    asio::error_code ignored;
    sock.close(ignored);
    return true;
  }
  asio::co_spawn(io, serve(std::move(sock)), asio::detached);
  return true;
}

asio::awaitable<void> ControlServer::Impl::accept_local() {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  asio::steady_timer backoff(io);
  while (socket_listener && socket_listener->is_open()) {
    local::socket client(io);
    co_await socket_listener->async_accept(client, tok);
    if (ec == asio::error::operation_aborted || !socket_listener->is_open()) co_return;
    if (ec) {  // out of descriptors, say: a moment, then on
      spdlog::warn("control: accepting on {}: {}", opts.socket_path, ec.message());
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(tok);
      continue;
    }
    take_client(Socket(std::move(client)));
  }
}

asio::awaitable<void> ControlServer::Impl::serve(Socket sock) {
  ++active;
  struct Release {
    std::size_t& n;
    ~Release() { --n; }
  } release{active};
  auto c = std::make_shared<Conn>(std::move(sock), tls);
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  c->arm(opts.timeout);

  // A TLS client's first byte is a handshake record; anything else gets a plain answer.
  auto& raw = c->stream.next_layer();
  co_await raw.async_wait(Socket::wait_read, tok);
  if (ec) co_return;
  unsigned char first = 0;
  if (::recv(raw.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT) != 1) co_return;
  if (first != kTlsHandshakeRecord) {
    counters.plain_http.fetch_add(1, std::memory_order_relaxed);
    co_await asio::async_write(raw, asio::buffer(plain_reply()), tok);
    raw.shutdown(Socket::shutdown_send, ec);
    co_return;
  }
  co_await c->stream.async_handshake(asio::ssl::stream_base::server, tok);
  if (ec) {
    counters.handshake_failed.fetch_add(1, std::memory_order_relaxed);
    spdlog::info("control: TLS handshake refused: {}", ec.message());
    co_return;
  }

  // A request may carry a credential's value (PUT /v1/secrets/NAME): the bytes read are
  // wiped as they are used, and the buffer's blocks when they are freed.
  secret::WipedString buf;
  buf.reserve(secret::kNoInline);
  char tmp[16 * 1024];
  const auto& limits = api.limits();
  for (;;) {
    c->arm(buf.empty() ? opts.idle : opts.timeout);
    ApiRequest req;
    Framed f;
    for (;;) {
      f = frame_request(buf, limits, req);
      if (f.state != FrameState::incomplete) break;
      std::size_t n = co_await c->stream.async_read_some(asio::buffer(tmp), tok);
      if (ec) co_return;  // closed, reset, or the deadline passed
      buf.append(tmp, n);
      secret::wipe(tmp, n);
      c->arm(opts.timeout);
    }
    ApiResponse resp;
    bool keep_alive = false;
    if (f.state == FrameState::error) {
      resp = error_response(f.status, f.error);
    } else {
      secret::wipe(buf.data(), f.consumed);
      buf.erase(0, f.consumed);
      counters.requests.fetch_add(1, std::memory_order_relaxed);
      keep_alive = req.keep_alive;
      if (!take_token()) {
        counters.rate_limited.fetch_add(1, std::memory_order_relaxed);
        resp = error_response(429, "too many control requests; retry in a second");
        resp.headers.emplace_back("Retry-After", "1");
      } else {
        try {
          resp = api.handle(req);
        } catch (const std::exception& e) {
          resp = error_response(503, std::string("the request failed: ") + e.what());
        }
      }
    }
    c->arm(opts.timeout);
    co_await asio::async_write(c->stream, asio::buffer(serialize(resp, keep_alive || resp.follow)),
                               tok);
    if (ec) co_return;
    if (resp.follow) {
      co_await follow(*c, resp.follow_after);
      co_return;
    }
    if (!keep_alive) break;
  }
  // Send close_notify; the watchdog bounds how long we wait for the peer's.
  c->arm(std::chrono::milliseconds(1000));
  co_await c->stream.async_shutdown(tok);
  c->watchdog.cancel();
}

asio::awaitable<void> ControlServer::Impl::follow(Conn& c, std::uint64_t after) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  asio::steady_timer poll(io);
  auto last_write = clock::now();
  counters.followers.fetch_add(1, std::memory_order_relaxed);
  struct Release {
    std::atomic<std::uint64_t>& n;
    ~Release() { n.fetch_sub(1, std::memory_order_relaxed); }
  } release{counters.followers};
  for (;;) {
    // Read before the entries: an end line seen now comes after every record there is.
    const std::string end = feed.end_line();
    // At most one batch is ever queued for a follower: while its write is pending we
    // fetch nothing, and records the ring evicts meanwhile are reported as lost.
    std::uint64_t lost = 0;
    auto entries = feed.since(after, opts.follow_batch, lost);
    std::string data;
    if (lost) {
      data += "{\"lost\":" + std::to_string(lost) + ",\"after\":" + std::to_string(after) + "}\n";
    }
    for (const auto& e : entries) {
      data += feed_line(e);
      after = e.seq;
    }
    if (!end.empty() && entries.size() < opts.follow_batch) {
      // Everything is sent: the final counters, then the end of the chunked body.
      c.arm(opts.timeout);
      co_await asio::async_write(c.stream, asio::buffer(chunk(data + end) + "0\r\n\r\n"), tok);
      if (ec) co_return;
      // Counted as a follower until the client, having read the end, closes: what relays
      // the connection (a port forwarder) may otherwise lose the last bytes when the proxy
      // exits at once (finish_followers waits for this, within its bound).
      c.arm(opts.timeout);
      char byte = 0;
      co_await c.stream.async_read_some(asio::buffer(&byte, 1), tok);
      co_return;
    }
    if (data.empty() && clock::now() - last_write >= opts.heartbeat) data = "\n";
    if (!data.empty()) {
      c.arm(opts.timeout);
      co_await asio::async_write(c.stream, asio::buffer(chunk(data)), tok);
      if (ec) co_return;  // gone, or too slow to take one batch within the deadline
      last_write = clock::now();
      if (entries.size() == opts.follow_batch) continue;  // more are waiting
    }
    c.arm(opts.heartbeat + opts.timeout);
    poll.expires_after(opts.follow_poll);
    co_await poll.async_wait(tok);
    if (ec || !c.stream.lowest_layer().is_open()) co_return;
  }
}

ControlServer::ControlServer(const ControlApi& api, const DecisionFeed& feed,
                             asio::ssl::context tls, ServerOptions opts)
    : impl_(std::make_unique<Impl>(api, feed, std::move(tls), std::move(opts), counters_)) {}

ControlServer::~ControlServer() {
  stop();
}

std::vector<tcp::endpoint> ControlServer::listen() {
  std::vector<tcp::endpoint> bound;
  for (const auto& ep : impl_->opts.listen) {
    auto acc = runtime::listen_tcp(impl_->io, ep, {.backlog = 64});
    bound.push_back(acc.local_endpoint());
    impl_->listeners.push_back(std::move(acc));
  }
  if (const auto& path = impl_->opts.socket_path; !path.empty()) {
    // A socket left by an earlier run goes; anything else there is an error.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
    // Only the proxy's user (and root) may connect: the socket is made closed.
    const mode_t old = ::umask(0177);
    asio::error_code ec;
    impl_->socket_listener.emplace(impl_->io);
    impl_->socket_listener->open(local(), ec);
    if (!ec) impl_->socket_listener->bind(local::endpoint(path), ec);
    ::umask(old);
    if (!ec) impl_->socket_listener->listen(64, ec);
    if (ec) throw std::runtime_error("control-socket " + path + ": " + ec.message());
  }
  return bound;
}

void ControlServer::start() {
  for (auto& acc : impl_->listeners) {
    asio::co_spawn(impl_->io,
                   runtime::accept_loop(acc, runtime::AcceptPolicy{"control", nullptr, {}, nullptr},
                                        [impl = impl_.get()](tcp::socket s, const tcp::endpoint&) {
                                          return impl->take_client(Socket(std::move(s)));
                                        }),
                   asio::detached);
  }
  if (impl_->socket_listener) asio::co_spawn(impl_->io, impl_->accept_local(), asio::detached);
  thread_ = std::thread([this] {
    runtime::name_this_thread("vp-control");
    impl_->io.run();
  });
}

void ControlServer::finish_followers(std::chrono::milliseconds within) {
  const auto until = clock::now() + within;
  while (counters_.followers.load(std::memory_order_relaxed) != 0 && clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void ControlServer::stop() {
  if (!thread_.joinable()) return;
  asio::post(impl_->io, [this] {
    for (auto& acc : impl_->listeners) {
      asio::error_code ignored;
      acc.close(ignored);
    }
    if (impl_->socket_listener) {
      asio::error_code ignored;
      impl_->socket_listener->close(ignored);
      ::unlink(impl_->opts.socket_path.c_str());
    }
    impl_->io.stop();
  });
  thread_.join();
}

}  // namespace vibepit::control
