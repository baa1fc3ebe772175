#include "vibepit/control/client.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <filesystem>
#include <optional>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/redirect_error.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/control/tls.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::control {
namespace {

using asio::ip::tcp;
using Protocol = asio::generic::stream_protocol;  // TCP, or a unix socket
constexpr std::size_t kMaxHead = 64 * 1024;
constexpr std::size_t kMaxBody = 64 * 1024 * 1024;
constexpr const char* kUnixPrefix = "unix:";

// Where a call connects: host:port, or a unix socket's path. A path longer than sun_path
// takes is reached through its directory, held open: /proc/self/fd/N/NAME.
class Target {
 public:
  Target(const std::string& host, std::uint16_t port, const std::string& socket_path) {
    if (socket_path.empty()) {
      endpoint_ = Protocol::endpoint(tcp::endpoint(asio::ip::make_address(host), port));
      where_ = policy::join_host_port(host, port);
      return;
    }
    where_ = kUnixPrefix + socket_path;
    std::string path = socket_path;
    if (path.size() > 107) {
      const std::filesystem::path p(socket_path);
      dir_ = ::open(p.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dir_ < 0) throw ConnectError("cannot open the directory of " + where_);
      path = "/proc/self/fd/" + std::to_string(dir_) + "/" + p.filename().string();
    }
    endpoint_ = Protocol::endpoint(asio::local::stream_protocol::endpoint(path));
  }
  ~Target() {
    if (dir_ >= 0) ::close(dir_);
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  const Protocol::endpoint& endpoint() const { return endpoint_; }
  const std::string& where() const { return where_; }

 private:
  Protocol::endpoint endpoint_;
  std::string where_;
  int dir_ = -1;
};

// One request on one connection, driven by its own event loop with a watchdog.
class Call {
 public:
  Call(const PeerCredentials& creds, const std::string& host, std::uint16_t port,
       const std::string& socket_path, std::chrono::milliseconds timeout)
      : ctx_(make_client_tls(creds, host)),
        stream_(io_, ctx_),
        watchdog_(io_),
        target_(host, port, socket_path),
        where_(target_.where()),
        timeout_(timeout) {}

  template <typename Fn>
  void run(Fn body) {
    std::exception_ptr error;
    asio::co_spawn(io_, body(*this), [&](std::exception_ptr e) {
      error = std::move(e);
      watchdog_.cancel();
    });
    io_.run();
    if (error) std::rethrow_exception(error);
  }

  void arm(std::chrono::milliseconds d) {
    watchdog_.expires_after(d);
    watchdog_.async_wait([this](const asio::error_code& ec) {
      if (ec) return;
      timed_out_ = true;
      asio::error_code ignored;
      stream_.lowest_layer().close(ignored);
    });
  }

  [[noreturn]] void fail(const char* step, const asio::error_code& ec) {
    std::string why =
        timed_out_ ? "no answer within " + std::to_string(timeout_.count()) + " ms" : ec.message();
    throw ConnectError("cannot " + std::string(step) + " the vibepit proxy's control API at " +
                       where_ + ": " + why);
  }

  asio::awaitable<void> open() {
    asio::error_code ec;
    auto tok = asio::redirect_error(asio::use_awaitable, ec);
    arm(timeout_);
    co_await stream_.lowest_layer().async_connect(target_.endpoint(), tok);
    if (ec) {
      fail("reach", ec);
    }
    co_await stream_.async_handshake(asio::ssl::stream_base::client, tok);
    if (ec) {
      if (timed_out_) fail("reach", ec);
      throw ConnectError("the TLS handshake with " + where_ + " failed (" + ec.message() +
                         "): this session's credentials do not match the proxy there");
    }
  }

  asio::awaitable<void> send(const std::string& bytes) {
    asio::error_code ec;
    arm(timeout_);
    co_await asio::async_write(stream_, asio::buffer(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) fail("write to", ec);
  }

  // Read more bytes into buf_; false at the end of the stream.
  asio::awaitable<bool> fill(std::chrono::milliseconds deadline) {
    asio::error_code ec;
    char tmp[16 * 1024];
    arm(deadline);
    auto n = co_await stream_.async_read_some(asio::buffer(tmp),
                                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) co_return false;
    if (ec) fail("read from", ec);
    buf_.append(tmp, n);
    co_return true;
  }

  // Read the response head; returns its status and leaves the rest in buf_.
  asio::awaitable<int> read_head(std::optional<std::size_t>& length, bool& chunked) {
    for (;;) {
      http::ResponseHead head;
      auto r = http::parse_response_head(buf_, kMaxHead, head);
      if (r.state == http::ParseState::complete) {
        if (auto cl = head.find("Content-Length")) {
          std::size_t n = 0;
          auto [p, ec] = std::from_chars(cl->data(), cl->data() + cl->size(), n);
          if (ec != std::errc() || p != cl->data() + cl->size() || n > kMaxBody) {
            throw ConnectError("the control API sent a bad Content-Length");
          }
          length = n;
        }
        auto te = head.find("Transfer-Encoding");
        chunked = te && http::iequals(*te, "chunked");
        int status = head.status;
        buf_.erase(0, head.head_size);
        co_return status;
      }
      if (r.state == http::ParseState::error) {
        throw ConnectError("the control API sent a malformed response head");
      }
      if (!co_await fill(timeout_)) throw ConnectError("the control API closed the connection");
    }
  }

  std::string buf_;

 private:
  asio::io_context io_{1};
  asio::ssl::context ctx_;
  asio::ssl::stream<Protocol::socket> stream_;
  asio::steady_timer watchdog_;
  Target target_;
  std::string where_;
  std::chrono::milliseconds timeout_;
  bool timed_out_ = false;
};

std::string request_text(const std::string& method, const std::string& target,
                         const std::string& host, const std::string* body) {
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: " + host +
                    "\r\nUser-Agent: vibepit\r\nConnection: close\r\n";
  if (body) {
    out.reserve(out.size() + 80 + body->size());  // one block: none left behind holds the body
    out += method == "PUT" ? "Content-Type: application/octet-stream\r\n"
                           : "Content-Type: application/json\r\n";
    out += "Content-Length: " + std::to_string(body->size()) + "\r\n\r\n";
    out += *body;
  } else {
    out += "\r\n";
  }
  return out;
}

}  // namespace

ControlClient::ControlClient(StoredSession session, std::chrono::milliseconds timeout)
    : session_(std::move(session)), timeout_(timeout) {
  const auto& c = session_.info.control;
  if (c.rfind(kUnixPrefix, 0) == 0) {
    // The server's certificate names 127.0.0.1, whichever way it is reached.
    socket_path_ = c.substr(std::string_view(kUnixPrefix).size());
    if (socket_path_.empty() || socket_path_[0] != '/')
      throw std::runtime_error("session.json: control socket \"" + c + "\" is not absolute");
    host_ = "127.0.0.1";
    return;
  }
  auto colon = c.rfind(':');
  if (colon == std::string::npos || colon + 1 == c.size()) {
    throw std::runtime_error("session.json: control address \"" + c + "\" has no port");
  }
  host_ = c.substr(0, colon);
  if (host_.size() > 2 && host_.front() == '[' && host_.back() == ']') {
    host_ = host_.substr(1, host_.size() - 2);
  }
  unsigned port = 0;
  auto [p, ec] = std::from_chars(c.data() + colon + 1, c.data() + c.size(), port);
  if (ec != std::errc() || p != c.data() + c.size() || port == 0 || port > 65535) {
    throw std::runtime_error("session.json: bad control port in \"" + c + "\"");
  }
  port_ = static_cast<std::uint16_t>(port);
  asio::error_code bad;
  asio::ip::make_address(host_, bad);
  if (bad) throw std::runtime_error("session.json: control host \"" + host_ + "\" is not an IP");
}

HttpResult ControlClient::get(const std::string& target) {
  return call("GET", target, nullptr);
}

HttpResult ControlClient::post_json(const std::string& target, const std::string& body) {
  return call("POST", target, &body);
}

HttpResult ControlClient::put(const std::string& target, std::string_view body) {
  secret::WipedString copy;
  copy.reserve(std::max(body.size(), secret::kNoInline));
  copy.assign(body);
  std::string text(copy.begin(), copy.end());
  struct Wipe {
    std::string& s;
    ~Wipe() { secret::wipe(s.data(), s.size()); }
  } wipe{text};
  return call("PUT", target, &text);
}

HttpResult ControlClient::remove(const std::string& target) {
  return call("DELETE", target, nullptr);
}

HttpResult ControlClient::call(const std::string& method, const std::string& target,
                               const std::string* body) {
  HttpResult out;
  Call call(session_.client, host_, port_, socket_path_, timeout_);
  // Wiped once sent: a PUT /v1/secrets body is a credential's value.
  std::string text = request_text(method, target, host_, body);
  struct Wipe {
    std::string& s;
    ~Wipe() { secret::wipe(s.data(), s.size()); }
  } wipe{text};
  call.run([&](Call& c) -> asio::awaitable<void> {
    co_await c.open();
    co_await c.send(text);
    std::optional<std::size_t> length;
    bool chunked = false;
    out.status = co_await c.read_head(length, chunked);
    if (chunked) throw ConnectError("unexpected chunked response to " + method + " " + target);
    while (!length || c.buf_.size() < *length) {
      if (!co_await c.fill(timeout_)) break;
      if (c.buf_.size() > kMaxBody) throw ConnectError("response larger than 64 MiB");
    }
    if (length && c.buf_.size() < *length) throw ConnectError("response cut short");
    out.body = length ? c.buf_.substr(0, *length) : c.buf_;
  });
  return out;
}

void ControlClient::stream_lines(const std::string& target,
                                 const std::function<bool(std::string_view)>& on_line,
                                 std::chrono::milliseconds idle) {
  Call call(session_.client, host_, port_, socket_path_, timeout_);
  const auto text = request_text("GET", target, host_, nullptr);
  call.run([&](Call& c) -> asio::awaitable<void> {
    co_await c.open();
    co_await c.send(text);
    std::optional<std::size_t> length;
    bool chunked = false;
    int status = co_await c.read_head(length, chunked);
    if (status != 200 || !chunked) {
      while (length && c.buf_.size() < *length && co_await c.fill(timeout_)) {
      }
      throw ConnectError("the control API answered " + std::to_string(status) + ": " +
                         c.buf_.substr(0, 500));
    }
    std::string pending;  // decoded bytes not yet ending in a newline
    for (;;) {
      // A chunk: hex size CRLF, data, CRLF. A zero-size chunk ends the stream.
      auto eol = c.buf_.find("\r\n");
      if (eol == std::string::npos) {
        if (c.buf_.size() > 64) throw ConnectError("bad chunk header in the decision stream");
        if (!co_await c.fill(idle)) co_return;
        continue;
      }
      std::size_t size = 0;
      auto [p, ec] = std::from_chars(c.buf_.data(), c.buf_.data() + eol, size, 16);
      if (ec != std::errc() || size > kMaxBody) throw ConnectError("bad chunk size");
      (void)p;
      if (size == 0) co_return;
      while (c.buf_.size() < eol + 2 + size + 2) {
        if (!co_await c.fill(idle)) throw ConnectError("the decision stream was cut short");
      }
      pending.append(c.buf_, eol + 2, size);
      c.buf_.erase(0, eol + 2 + size + 2);
      std::size_t start = 0;
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
        std::string_view line(pending.data() + start, nl - start);
        start = nl + 1;
        if (!line.empty() && !on_line(line)) co_return;  // empty lines are heartbeats
      }
      pending.erase(0, start);
    }
  });
}

}  // namespace vibepit::control
