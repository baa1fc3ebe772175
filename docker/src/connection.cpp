#include "vibepit/docker/connection.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <variant>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "vibepit/docker/error.hpp"
#include "vibepit/http/head.hpp"

namespace vibepit::docker {
namespace {

constexpr std::size_t kMaxHead = 64 * 1024;
constexpr std::size_t kReadSize = 64 * 1024;

// Run one asynchronous operation on `io` until it completes or `timeout` passes (zero: no
// deadline). On timeout the socket's operations are cancelled and DockerError(timeout) thrown.
template <typename Socket, typename Start>
std::size_t run_bounded(asio::io_context& io, Socket& sock, std::chrono::milliseconds timeout,
                        const std::string& what, Start start) {
  std::error_code ec = asio::error::would_block;
  std::size_t n = 0;
  start([&](const std::error_code& e, std::size_t k) {
    ec = e;
    n = k;
  });
  io.restart();
  if (timeout.count() > 0) {
    io.run_for(timeout);
  } else {
    io.run();
  }
  if (ec == asio::error::would_block) {
    std::error_code ignored;
    sock.cancel(ignored);
    io.restart();
    io.run();
    throw DockerError(ErrorKind::timeout,
                      "the container engine did not answer within " +
                          std::to_string(timeout.count() / 1000.0).substr(0, 4) + " s (" + what +
                          ")");
  }
  if (ec && ec != asio::error::eof) throw std::system_error(ec, what);
  return n;
}

}  // namespace

std::optional<std::string> Response::find(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (http::iequals(k, name)) return v;
  return std::nullopt;
}

Connection::Connection(const std::string& socket_path, std::chrono::milliseconds timeout)
    : sock_(io_), path_(socket_path), timeout_(timeout) {
  try {
    run_bounded(io_, sock_, timeout_, "connect", [&](auto handler) {
      sock_.async_connect(asio::local::stream_protocol::endpoint(path_),
                          [handler](const std::error_code& e) mutable { handler(e, 0); });
    });
  } catch (const std::system_error& e) {
    std::string why;
    // Asio reports connect failures as errno values in its system category.
    const int err = e.code().value();
    if (err == ENOENT)
      why = "no such socket";
    else if (err == ECONNREFUSED)
      why = "nothing listens there";
    else if (err == EACCES)
      why = "permission denied (for Docker: are you in the docker group?)";
    else
      why = e.code().message();
    throw DockerError(ErrorKind::unavailable,
                      "cannot reach a container engine at " + path_ + ": " + why);
  } catch (const DockerError& e) {
    throw DockerError(ErrorKind::unavailable,
                      "cannot reach a container engine at " + path_ + ": " + e.what());
  }
}

Connection::~Connection() {
  std::error_code ignored;
  sock_.close(ignored);
}

void Connection::write_head(std::string_view method, std::string_view target,
                            const std::vector<Header>& headers,
                            std::optional<std::uint64_t> content_length, bool chunked) {
  std::string head;
  head.reserve(256);
  head.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: docker\r\n");
  head.append("User-Agent: vibepit\r\n");
  for (const auto& [k, v] : headers) head.append(k).append(": ").append(v).append("\r\n");
  if (content_length) {
    head.append("Content-Length: ").append(std::to_string(*content_length)).append("\r\n");
  } else if (chunked) {
    head.append("Transfer-Encoding: chunked\r\n");
  }
  head.append("\r\n");
  write(head);
}

void Connection::write(std::string_view data) {
  if (data.empty()) return;
  try {
    run_bounded(io_, sock_, timeout_, "write", [&](auto handler) {
      asio::async_write(sock_, asio::buffer(data.data(), data.size()), handler);
    });
  } catch (const std::system_error& e) {
    throw DockerError(ErrorKind::unavailable,
                      "the container engine closed the connection (" + e.code().message() + ")");
  }
}

void Connection::write_chunk(std::string_view data) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string piece(size);
  piece.append(data);
  piece.append("\r\n");
  write(piece);
}

std::size_t Connection::fill() {
  if (eof_) return 0;
  const std::size_t old = buf_.size();
  buf_.resize(old + kReadSize);
  std::size_t n = 0;
  try {
    n = run_bounded(io_, sock_, timeout_, "read", [&](auto handler) {
      sock_.async_read_some(asio::buffer(buf_.data() + old, kReadSize), handler);
    });
  } catch (const std::system_error& e) {
    buf_.resize(old);
    throw DockerError(ErrorKind::unavailable,
                      "the container engine closed the connection (" + e.code().message() + ")");
  } catch (...) {
    buf_.resize(old);
    throw;
  }
  buf_.resize(old + n);
  if (n == 0) eof_ = true;
  return n;
}

void Connection::fail_protocol(const std::string& what) {
  throw DockerError(ErrorKind::protocol, "unexpected answer from the container engine: " + what);
}

Response Connection::read_head(std::string_view method) {
  http::ResponseHead head;
  for (;;) {
    auto r = http::parse_response_head(buf_, kMaxHead, head);
    if (r.state == http::ParseState::complete) {
      // 1xx other than 101 carries no body and another head follows.
      if (head.status >= 100 && head.status < 200 && head.status != 101) {
        buf_.erase(0, head.head_size);
        continue;
      }
      break;
    }
    if (r.state == http::ParseState::error) fail_protocol(std::string(http::describe(r.error)));
    if (fill() == 0) fail_protocol("the connection closed before a complete response head");
  }
  Response out;
  out.status = head.status;
  for (const auto& h : head.headers) out.headers.emplace_back(h.name, h.value);
  auto framing = http::response_framing(head, method);
  buf_.erase(0, head.head_size);
  if (auto* err = std::get_if<http::FramingError>(&framing)) fail_protocol(err->what);
  framing_ = std::get<http::Framing>(framing);
  if (head.status == 101) framing_.kind = http::BodyKind::until_close;
  left_ = framing_.length;
  chunked_ = http::ChunkedDecoder();
  body_done_ = framing_.kind == http::BodyKind::none ||
               (framing_.kind == http::BodyKind::length && left_ == 0);
  return out;
}

bool Connection::read_body(std::string& piece) {
  while (!body_done_) {
    if (buf_.empty() && fill() == 0) {
      if (framing_.kind == http::BodyKind::until_close) {
        body_done_ = true;
        return false;
      }
      fail_protocol("the connection closed in the middle of a response body");
    }
    switch (framing_.kind) {
      case http::BodyKind::length: {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, buf_.size()));
        piece.append(buf_, 0, n);
        buf_.erase(0, n);
        left_ -= n;
        if (left_ == 0) body_done_ = true;
        return true;
      }
      case http::BodyKind::until_close:
        piece.append(buf_);
        buf_.clear();
        return true;
      case http::BodyKind::chunked: {
        const std::size_t before = piece.size();
        auto step = chunked_.feed(buf_, piece);
        buf_.erase(0, step.consumed);
        if (step.status == http::ChunkedDecoder::Status::error)
          fail_protocol("bad chunked body: " + std::string(chunked_.error()));
        if (step.status == http::ChunkedDecoder::Status::done) body_done_ = true;
        if (piece.size() > before || body_done_) return true;
        break;  // only framing so far: read more
      }
      case http::BodyKind::none:
        body_done_ = true;
        break;
    }
  }
  return false;
}

std::string Connection::read_body_all(std::size_t limit) {
  std::string body;
  while (read_body(body)) {
    if (body.size() > limit)
      fail_protocol("a response body larger than " + std::to_string(limit) + " bytes");
  }
  return body;
}

Hijacked Connection::hijack() {
  Hijacked out;
  out.buffered.swap(buf_);
  out.fd = sock_.release();
  // Asio left it non-blocking; hand it over in the ordinary state.
  const int flags = ::fcntl(out.fd, F_GETFL);
  if (flags >= 0) ::fcntl(out.fd, F_SETFL, flags & ~O_NONBLOCK);
  return out;
}

}  // namespace vibepit::docker
