// Plain-HTTP forwarding (absolute-form requests): each request on a client connection is
// decided on its own, then forwarded in origin-form with hop-by-hop headers removed;
// bodies pass through unchanged, framed exactly as parsed. Allowed requests are short: one
// record, written when the response is done, carries both the decision and the totals.
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/http/body.hpp"
#include "vibepit/proxy/join.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/session.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
constexpr std::size_t kChunk = 16 * 1024;

// Append what the socket has to `buf`.
asio::awaitable<bool> fill(tcp::socket& s, ByteBuffer& buf, asio::error_code& ec) {
  auto n = co_await s.async_read_some(buf.prepare(kChunk),
                                      asio::redirect_error(asio::use_awaitable, ec));
  buf.commit(n);
  co_return !ec;
}

enum class Pass { ok, bad_framing, failed };

// Adapt a coroutine's result for both(): keep it in `out`.
asio::awaitable<void> store(asio::awaitable<bool> op, bool& out) {
  out = co_await std::move(op);
}

// Forward a framed body from `buf` (bytes already read) and then `from`, to `to`, unchanged.
// Bytes past the body stay in `buf`. A chunked body is validated as it passes.
asio::awaitable<Pass> pass_body(tcp::socket& from, ByteBuffer& buf, tcp::socket& to,
                                const http::Framing& framing, std::uint64_t& bytes,
                                const std::function<void()>& touch, std::string& error) {
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
      bool clean_end = framing.kind == http::BodyKind::until_close && ec == asio::error::eof;
      co_return clean_end ? Pass::ok : Pass::failed;
    }
  }
}

// The Host header must name the same authority as the URI, or the request is ambiguous.
// Empty when it does (or, in HTTP/1.0, when there is none).
std::string host_header_problem(const http::RequestHead& head, const http::Authority& auth) {
  std::optional<std::string_view> host_header;
  int host_count = 0;
  for (const auto& h : head.headers) {
    if (http::iequals(h.name, "host")) {
      ++host_count;
      host_header = h.value;
    }
  }
  if (host_count > 1) return "more than one Host header";
  if (!host_header) {
    return head.version_minor == 1 ? "HTTP/1.1 request without a Host header" : "";
  }
  // Parsed into this thread's one Authority, which keeps its capacity: the check runs to
  // its end without a suspension, and a warm request allocates nothing for it.
  thread_local http::Authority h;
  const auto bad = http::parse_authority(
      *host_header, auth.port == 80 ? std::optional<std::uint16_t>(80) : std::nullopt, h);
  if (!bad && h.host == auth.host && h.port == auth.port) return "";
  return "the Host header \"" + std::string(host_header->substr(0, 256)) +
         "\" does not match the request URI authority " + auth.display();
}

asio::awaitable<bool> forward_request_body(Session& s, const http::Framing& framing,
                                           std::uint64_t& bytes, std::string& framing_error) {
  auto r = co_await pass_body(
      s.client(), s.client_bytes(), s.upstream(), framing, bytes, [&s] { s.touch(); },
      framing_error);
  // The upstream must not wait for the rest of a body that will never come.
  if (r != Pass::ok) s.drop_upstream();
  co_return r == Pass::ok;
}

// The response to one request, and any interim responses before it.
asio::awaitable<bool> forward_response(Session& s, std::string_view method, bool client_keep_alive,
                                       bool& keep_client, decision_log::DecisionRecord& rec) {
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
      if (!co_await fill(s.upstream(), upbuf, ec)) co_return false;
    }
    if (pr.state == http::ParseState::error) co_return false;
    if (rh.status >= 100 && rh.status < 200) {
      if (rh.status == 101) co_return false;  // we never forward Upgrade
      auto interim = std::string(upbuf.data(), rh.head_size);
      upbuf.consume(rh.head_size);
      if (!co_await s.send(interim)) co_return false;
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
    if (!co_await s.send(out)) co_return false;
    std::uint64_t down = out.size();
    std::string ignored_error;
    bool ok = co_await pass_body(
                  s.upstream(), upbuf, s.client(), framing, down, [&s] { s.touch(); },
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

std::variant<Checked, Invalid> check_request(const http::RequestHead& head,
                                             const http::Authority& auth) {
  if (auto problem = host_header_problem(head, auth); !problem.empty()) {
    return Invalid{problem, problem};
  }
  auto framing_or = http::request_framing(head);
  if (auto* err = std::get_if<http::FramingError>(&framing_or)) {
    return Invalid{err->what, "refused request framing: " + err->what};
  }
  Checked c;
  c.framing = std::get<http::Framing>(framing_or);
  c.client_keep_alive = http::wants_keep_alive(head.version_minor, head.headers);
  if (auto e = head.find("expect")) c.expect_continue = http::iequals(*e, "100-continue");
  return c;
}

// The allowed request on the dialled upstream: the head and body up, the response down.
// Fills `rec`'s totals and status; an exchange that fails before the response starts gets
// an error response here. Whether the client connection may carry another request.
// Its own coroutine, so that each frame stays small enough for Asio's per-thread frame
// recycling (about 1 KiB): a larger one goes to malloc on every request.
asio::awaitable<bool> exchange(Session& s, std::string_view method,
                               const std::string& upstream_head, const Checked& req,
                               decision_log::DecisionRecord& rec) {
  rec.totals = true;
  const auto started = Session::clock::now();
  s.touch();

  asio::error_code ec;
  if (req.expect_continue && req.framing.kind != http::BodyKind::none) {
    if (!co_await s.send("HTTP/1.1 100 Continue\r\n\r\n")) co_return false;
  }
  co_await asio::async_write(s.upstream(), asio::buffer(upstream_head),
                             asio::redirect_error(asio::use_awaitable, ec));
  bool keep_client = false;
  int status = 0;  // of an error response, when one is owed
  ProxyError error = ProxyError::connection_terminated;
  std::string message;
  if (!ec) {
    std::uint64_t up = 0;
    bool ok = false;
    std::string framing_error;
    if (req.framing.kind == http::BodyKind::none) {
      ok = co_await forward_response(s, method, req.client_keep_alive, keep_client, rec);
    } else {
      // Upload and download run together: a server may answer before the body ends.
      bool sent = false, answered = false;
      co_await both(
          store(forward_request_body(s, req.framing, up, framing_error), sent),
          store(forward_response(s, method, req.client_keep_alive, keep_client, rec), answered));
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
    co_await s.refuse(status, error, std::move(message), true);
  }
  rec.ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Session::clock::now() - started)
          .count());
  co_return keep_client;
}

}  // namespace

asio::awaitable<bool> forward_http(Session& s, const http::RequestHead& head,
                                   const http::Target& target) {
  const auto& auth = target.authority;
  auto checked = check_request(head, auth);
  if (auto* bad = std::get_if<Invalid>(&checked)) {
    co_await s.refuse_invalid(head.method, auth.host, auth.port, std::move(bad->detail),
                              std::move(bad->message));
    co_return false;
  }
  const Checked& req = std::get<Checked>(checked);

  const std::string method(head.method);
  // With 100-continue we answer the 100 ourselves once the request is allowed, so the
  // expectation does not go upstream.
  std::string upstream_head;
  const Lease head_text(s.text_spares(), upstream_head);
  http::append_request_head(upstream_head, head, target.path, auth, req.expect_continue);
  s.client_bytes().consume(head.head_size);  // `head` views are invalid from here on

  auto& rec = s.record();
  rec = s.new_record(method, auth.host, auth.port);
  s.request_line().method = method;
  s.request_line().target = target.path;
  auto dial = co_await s.decide_and_dial(auth, rec, true, true);
  s.mark_decided(rec);
  if (s.closed()) co_return false;
  if (!dial.ok) {
    s.emit(std::move(rec));
    // A body we will not forward would be read as the next request: close instead.
    bool close = req.framing.kind != http::BodyKind::none || !req.client_keep_alive;
    co_await s.refuse(dial.status, dial.error, std::move(dial.message), close);
    co_return !close && !s.closed();
  }
  // Where method/path rules matched the normalised path, that is the path that goes
  // upstream, so that the server reads what the rules read.
  s.apply_normal_path(upstream_head);
  const bool keep_client = co_await exchange(s, method, upstream_head, req, rec);
  s.emit(std::move(rec));
  co_return keep_client && !s.closed() && !s.draining();
}

}  // namespace vibepit::proxy
