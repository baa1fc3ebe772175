#pragma once
// One HTTP/1.1 request's exchange, shared by the two ways requests arrive: plain forwarding
// (http_forward.cpp, over the client's and upstream's sockets) and inspection (inspect.cpp,
// over TLS on both sides). What differs is `Ends`:
//
//   struct Ends {
//     Session& session();
//     ClientStream& client();      // an AsyncReadStream and AsyncWriteStream
//     UpstreamStream& upstream();  // the same
//     asio::awaitable<bool> send(std::string_view bytes);  // to the client, whole
//     asio::awaitable<void> refuse(int status, ProxyError error, std::string message,
//                                  bool close);
//   };
//
// Each function is its own coroutine, so that each frame stays small enough for Asio's
// per-thread frame recycling (about 1 KiB): a larger one goes to malloc on every request.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/http/body.hpp"
#include "vibepit/proxy/join.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/session.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::proxy::exchange_detail {

constexpr std::size_t kChunk = 16 * 1024;

// Append what the stream has to `buf`.
template <typename Stream>
asio::awaitable<bool> fill(Stream& s, ByteBuffer& buf, asio::error_code& ec) {
  auto n = co_await s.async_read_some(buf.prepare(kChunk),
                                      asio::redirect_error(asio::use_awaitable, ec));
  buf.commit(n);
  co_return !ec;
}

enum class Pass { ok, bad_framing, failed };

// A body read until the connection closes ends well only on a clean close: over TLS, a
// close_notify (a TCP close without one is stream_truncated: the body may have been cut,
// and the client is shown the cut as it happened).
inline bool is_clean_end(const asio::error_code& ec) {
  return ec == asio::error::eof;
}

// Adapt a coroutine's result for both(): keep it in `out`.
inline asio::awaitable<void> store(asio::awaitable<bool> op, bool& out) {
  out = co_await std::move(op);
}

// Forward a framed body from `buf` (bytes already read) and then `from`, to `to`, unchanged.
// Bytes past the body stay in `buf`. A chunked body is validated as it passes.
template <typename From, typename To>
asio::awaitable<Pass> pass_body(From& from, ByteBuffer& buf, To& to, const http::Framing& framing,
                                std::uint64_t& bytes, const std::function<void()>& touch,
                                std::string& error) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  if (framing.kind == http::BodyKind::none) co_return Pass::ok;
  std::uint64_t remaining = framing.length;
  http::ChunkedDecoder chunked;
  for (;;) {
    if (!buf.empty()) {
      std::size_t take = 0;
      bool done = false;
      switch (framing.kind) {
        case http::BodyKind::length:
          take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, buf.size()));
          remaining -= take;
          done = remaining == 0;
          break;
        case http::BodyKind::chunked: {
          auto step = chunked.feed(buf);
          if (step.status == http::ChunkedDecoder::Status::error) {
            error = std::string(chunked.error());
            co_return Pass::bad_framing;
          }
          take = step.consumed;
          done = step.status == http::ChunkedDecoder::Status::done;
          break;
        }
        default:  // until_close
          take = buf.size();
          break;
      }
      if (take) {
        co_await asio::async_write(to, asio::buffer(buf.data(), take), tok);
        if (ec) co_return Pass::failed;
        bytes += take;
        buf.consume(take);
        touch();
      }
      if (done) co_return Pass::ok;
    } else if (framing.kind == http::BodyKind::length && remaining == 0) {
      co_return Pass::ok;
    }
    if (!co_await fill(from, buf, ec)) {
      bool clean_end = framing.kind == http::BodyKind::until_close && is_clean_end(ec);
      co_return clean_end ? Pass::ok : Pass::failed;
    }
  }
}

// What a request needs, checked before anything is awaited (the head's views die with its
// bytes), or why it is refused.
struct Checked {
  http::Framing framing;
  bool client_keep_alive = false;
  bool expect_continue = false;
};
struct Invalid {
  std::string detail;   // for the record
  std::string message;  // for the client
};
// `auth` is what the request is for (its URI's authority, or an inspected connection's
// CONNECT authority): the Host header must name it, `default_port` (80, 443) may be left
// out of it.
std::variant<Checked, Invalid> check_request(const http::RequestHead& head,
                                             const http::Authority& auth,
                                             std::uint16_t default_port);

template <typename Ends>
asio::awaitable<bool> forward_request_body(Ends& e, const http::Framing& framing,
                                           std::uint64_t& bytes, std::string& framing_error) {
  Session& s = e.session();
  auto r = co_await pass_body(
      e.client(), s.client_bytes(), e.upstream(), framing, bytes, [&s] { s.touch(); },
      framing_error);
  // The upstream must not wait for the rest of a body that will never come.
  if (r != Pass::ok) s.drop_upstream();
  co_return r == Pass::ok;
}

// The response to one request, and any interim responses before it.
template <typename Ends>
asio::awaitable<bool> forward_response(Ends& e, std::string_view method, bool client_keep_alive,
                                       bool& keep_client, decision_log::DecisionRecord& rec) {
  Session& s = e.session();
  asio::error_code ec;
  const std::string req_method(method);
  ByteBuffer& upbuf = s.upstream_bytes();
  upbuf.clear();
  http::ResponseHead rh;
  const Lease index(s.header_spares(), rh.headers);
  std::string out;  // the head to send, and the body bytes read with it
  const Lease out_text(s.text_spares(), out);
  for (;;) {
    http::ParseResult pr;
    for (;;) {
      pr = http::parse_response_head(upbuf, s.cfg().max_response_head, rh);
      if (pr.state != http::ParseState::incomplete) break;
      if (!co_await fill(e.upstream(), upbuf, ec)) co_return false;
    }
    if (pr.state == http::ParseState::error) co_return false;
    if (rh.status >= 100 && rh.status < 200) {
      if (rh.status == 101) co_return false;  // we never forward Upgrade
      auto interim = std::string(upbuf.data(), rh.head_size);
      upbuf.consume(rh.head_size);
      if (!co_await e.send(interim)) co_return false;
      continue;
    }
    auto framing_or = http::response_framing(rh, req_method);
    if (std::holds_alternative<http::FramingError>(framing_or)) co_return false;
    auto framing = std::get<http::Framing>(framing_or);
    bool upstream_keep = http::wants_keep_alive(rh.version_minor, rh.headers) &&
                         framing.kind != http::BodyKind::until_close;
    keep_client = client_keep_alive && framing.kind != http::BodyKind::until_close;

    // The rewritten head has no Connection field: say what we will do with the connection.
    http::append_response_head(
        out, rh, keep_client ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    rec.status = static_cast<std::uint16_t>(rh.status);
    upbuf.consume(rh.head_size);
    if (framing.kind == http::BodyKind::length) {
      // Send the body bytes already read together with the head: one write, not two.
      auto take = static_cast<std::size_t>(std::min<std::uint64_t>(framing.length, upbuf.size()));
      out.append(upbuf.data(), take);
      upbuf.consume(take);
      framing.length -= take;
    }
    if (!co_await e.send(out)) co_return false;
    std::uint64_t down = out.size();
    std::string ignored_error;
    bool ok = co_await pass_body(
                  e.upstream(), upbuf, e.client(), framing, down, [&s] { s.touch(); },
                  ignored_error) == Pass::ok;
    rec.bytes_down = down;
    if (!ok) {
      keep_client = false;
      s.close_all();
      co_return true;  // the response has started: the client sees the cut, not a 502
    }
    if (!upstream_keep || !upbuf.empty()) s.drop_upstream();
    co_return true;
  }
}

// The allowed request on the dialled upstream: the head and body up, the response down.
// Fills `rec`'s totals and status; an exchange that fails before the response starts gets
// an error response here. Whether the client connection may carry another request. With
// `wipe_head` (a credential's secret is in it), the head's bytes are wiped once written.
template <typename Ends>
asio::awaitable<bool> exchange(Ends& e, std::string_view method, std::string& upstream_head,
                               const Checked& req, decision_log::DecisionRecord& rec,
                               bool wipe_head = false) {
  Session& s = e.session();
  rec.totals = true;
  const auto started = Session::clock::now();
  s.touch();

  asio::error_code ec;
  if (req.expect_continue && req.framing.kind != http::BodyKind::none) {
    if (!co_await e.send("HTTP/1.1 100 Continue\r\n\r\n")) co_return false;
  }
  co_await asio::async_write(e.upstream(), asio::buffer(upstream_head),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (wipe_head) secret::wipe(upstream_head.data(), upstream_head.size());
  bool keep_client = false;
  int status = 0;  // of an error response, when one is owed
  ProxyError error = ProxyError::connection_terminated;
  std::string message;
  if (!ec) {
    std::uint64_t up = 0;
    bool ok = false;
    std::string framing_error;
    if (req.framing.kind == http::BodyKind::none) {
      ok = co_await forward_response(e, method, req.client_keep_alive, keep_client, rec);
    } else {
      // Upload and download run together: a server may answer before the body ends.
      bool sent = false, answered = false;
      co_await both(
          store(forward_request_body(e, req.framing, up, framing_error), sent),
          store(forward_response(e, method, req.client_keep_alive, keep_client, rec), answered));
      ok = sent && answered;
      if (!sent) keep_client = false;
    }
    rec.bytes_up = upstream_head.size() + up;
    if (!ok) keep_client = false;
    if (!ok && rec.status == 0) {
      if (!framing_error.empty()) {
        status = 400;
        error = ProxyError::http_request_error;
        message = "invalid chunked request body: " + framing_error;
      } else {
        status = 502;
        error = ProxyError::http_response_incomplete;
        message = "the upstream server closed the connection or sent an invalid response";
      }
    }
  } else {
    status = 502;
    message = "could not send the request upstream: " + ec.message();
  }
  if (status != 0) {
    rec.status = static_cast<std::uint16_t>(status);
    co_await e.refuse(status, error, std::move(message), true);
  }
  rec.ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Session::clock::now() - started)
          .count());
  co_return keep_client;
}

}  // namespace vibepit::proxy::exchange_detail
