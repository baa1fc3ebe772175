// An inspected CONNECT (docs/security.md "Inspection"): a method/path rule names its
// host:port, so the proxy reads its requests. After the 200, the client's first bytes pass
// the SNI check as a tunnel's do; the proxy then speaks TLS to the client as the host (a
// leaf from the inspection CA) and reads HTTP/1.1 requests. Each is decided on its own
// (method and normalised path), recorded, and refused with a 403 that keeps the connection,
// or forwarded over the proxy's own TLS to upstream, whose certificate must verify. Nothing
// is dialled until a request is allowed. The CONNECT's close record counts the requests'
// bytes.
#include <asio/redirect_error.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/use_awaitable.hpp>

#include "exchange.hpp"
#include "vibepit/proxy/credentials.hpp"
#include "vibepit/proxy/inspection.hpp"
#include "vibepit/proxy/prefixed_socket.hpp"
#include "vibepit/proxy/tunnel_check.hpp"

namespace vibepit::proxy {
namespace {

using namespace exchange_detail;
using asio::ip::tcp;
using ClientTls = asio::ssl::stream<PrefixedSocket>;
using UpstreamTls = asio::ssl::stream<tcp::socket&>;
constexpr std::size_t kReadChunk = 4096;
// How long a closing connection waits for the client's close_notify after its own.
constexpr std::chrono::milliseconds kGoodbye{1'000};
// A Host header or absolute URI without a port names 443 here.
constexpr std::uint16_t kHttpsPort = 443;

// What an inspected connection keeps, on the heap beside the tunnel's small frame. It is
// the Ends of exchange.hpp: the client's TLS and the upstream's.
struct Inspected {
  Inspected(Session& session, Inspection& inspection, const http::Authority& to,
            std::uint64_t connect_id)
      : s(session),
        insp(inspection),
        target(to),
        tunnel(connect_id),
        check(session.cfg().tunnel_tls, to.host, session.cfg().header_timeout),
        tls(PrefixedSocket(session.client(), hello), inspection.client_side()) {}

  Session& session() { return s; }
  ClientTls& client() { return tls; }
  UpstreamTls& upstream() { return *up_tls; }
  asio::awaitable<bool> send(std::string_view bytes) {
    s.busy();
    asio::error_code ec;
    co_await asio::async_write(tls, asio::buffer(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }
  asio::awaitable<void> refuse(int status, ProxyError error, std::string message, bool close) {
    const std::string text = make_error_response(status, error, message, close);
    co_await send(text);
    if (close) closing = true;
  }

  Session& s;
  Inspection& insp;
  const http::Authority& target;
  std::uint64_t tunnel;  // the CONNECT's record id, in each request's record
  ByteBuffer hello;      // the client's first bytes: judged by the check, then read by TLS
  TunnelCheck check;
  ClientTls tls;
  std::unique_ptr<UpstreamTls> up_tls;
  std::uint64_t up_dial = 0;         // s.upstream_dials() when up_tls was made
  decision_log::DecisionRecord rec;  // the request in progress
  std::string path;                  // its path and query, as the client sent them
  std::vector<const policy::Credential*> credentials;  // scratch for add_credentials
  bool closing = false;                                // an answer said Connection: close
  std::uint64_t bytes_up = 0, bytes_down = 0;
};

// The SNI check on the client's first bytes, as on a tunnel (tunnel_check.hpp). True when
// they pass; they stay in `hello` for the TLS engine to read.
asio::awaitable<bool> check_hello(Inspected& in) {
  Session& s = in.s;
  ByteBuffer& early = s.client_bytes();  // bytes the client sent ahead of our 200
  if (!early.empty()) {
    in.hello.append(early.view());
    in.check.offer(early.view());
    early.clear();
  }
  s.release_client_bytes();
  asio::error_code ec;
  s.due_within(s.cfg().header_timeout);
  while (in.check.pending()) {
    const std::size_t before = in.hello.size();
    const auto n = co_await s.client().async_read_some(
        in.hello.prepare(kReadChunk), asio::redirect_error(asio::use_awaitable, ec));
    in.hello.commit(n);
    if (ec) co_return false;
    in.check.offer(std::string_view(in.hello.data() + before, n));
  }
  if (in.check.refused()) {
    if (!in.check.alert().empty()) co_await s.send(in.check.alert());
    co_return false;
  }
  co_return true;
}

// TLS with the client, as the host it asked for. `conn` (the close record) says why not.
asio::awaitable<bool> greet(Inspected& in, decision_log::DecisionRecord& conn) {
  try {
    in.insp.present(in.tls.native_handle(), in.target.host);
  } catch (const tls::CertificateError& e) {
    conn.detail = e.what();
    co_return false;
  }
  asio::error_code ec;
  co_await in.tls.async_handshake(asio::ssl::stream_base::server,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    conn.detail = "TLS with the client failed: " + ec.message();
    co_return false;
  }
  co_return true;
}

enum class Head { ok, closed, failed };

// The next request head, from the client's TLS into client_bytes().
asio::awaitable<Head> read_head(Inspected& in, http::RequestHead& head) {
  Session& s = in.s;
  ByteBuffer& buf = s.client_bytes();
  const auto limit = s.cfg().max_request_head;
  asio::error_code ec;
  s.wait_request();
  bool started = false;
  for (;;) {
    if (!buf.empty()) {
      if (head.headers.capacity() == 0) head.headers = s.header_spares().take();
      const auto r = http::parse_request_head(buf, limit, head);
      if (r.state == http::ParseState::complete) co_return Head::ok;
      if (r.state == http::ParseState::error) {
        if (r.error == http::HeadError::too_large) {
          co_await in.refuse(431, ProxyError::http_request_error,
                             "request head larger than " + std::to_string(limit) + " bytes", true);
        } else {
          co_await in.refuse(
              400, ProxyError::http_request_error,
              std::string("malformed request: ") + std::string(http::describe(r.error)), true);
        }
        co_return Head::failed;
      }
      if (!started) {
        // A head has begun: it must end within the header time-out, however it trickles.
        started = true;
        s.due_within(s.cfg().header_timeout);
      }
    }
    const auto n = co_await in.tls.async_read_some(buf.prepare(kReadChunk),
                                                   asio::redirect_error(asio::use_awaitable, ec));
    buf.commit(n);
    if (ec) co_return Head::closed;
  }
}

// The proxy's own TLS to upstream on the connection decide_and_dial left open (a new one
// when it dialled again). Why not, in `why` and `error`.
asio::awaitable<bool> secure_upstream(Inspected& in, std::string& why, ProxyError& error) {
  Session& s = in.s;
  if (in.up_tls && in.up_dial == s.upstream_dials()) co_return true;
  in.up_tls = std::make_unique<UpstreamTls>(s.upstream(), in.insp.upstream_side());
  in.up_dial = s.upstream_dials();
  try {
    Inspection::expect(in.up_tls->native_handle(), in.target.host);
  } catch (const std::exception& e) {
    why = e.what();
    error = ProxyError::proxy_internal_error;
    s.drop_upstream();
    co_return false;
  }
  asio::error_code ec;
  s.due_within(s.cfg().connect_timeout);
  co_await in.up_tls->async_handshake(asio::ssl::stream_base::client,
                                      asio::redirect_error(asio::use_awaitable, ec));
  s.touch();
  if (!ec) co_return true;
  const std::string refused = Inspection::verify_failure(in.up_tls->native_handle());
  if (!refused.empty()) {
    error = ProxyError::tls_certificate_error;
    why = "the certificate of " + in.target.display() + " was refused: " + refused;
  } else {
    error = ProxyError::tls_protocol_error;
    why = "TLS with " + in.target.display() + " failed: " + ec.message();
  }
  s.drop_upstream();
  co_return false;
}

// Where the request goes on this host: its target in origin form, or in absolute form
// naming this connection's host:port. Empty, with `why`, when it names anything else.
bool request_path(Inspected& in, const http::RequestHead& head, std::string& why) {
  in.path.clear();
  if (!head.target.empty() && head.target.front() == '/') {
    in.path.assign(head.target);
    return true;
  }
  http::Target t;
  if (!http::parse_target(head.method, head.target, t) && t.form == http::TargetForm::absolute &&
      t.scheme == "https" && t.authority.host == in.target.host &&
      t.authority.port == in.target.port) {
    in.path = t.path;
    return true;
  }
  why = "this connection carries requests for " + in.target.display() +
        " only, in origin form (GET /path): the request target \"" +
        std::string(head.target.substr(0, 256)) + "\" is not one";
  return false;
}

// One request: decided, recorded, refused or forwarded. Whether another may follow.
asio::awaitable<bool> serve(Inspected& in, const http::RequestHead& head) {
  Session& s = in.s;
  const http::Authority& target = in.target;
  std::string bad;
  auto checked = check_request(head, target, kHttpsPort);
  if (auto* invalid = std::get_if<Invalid>(&checked)) {
    bad = std::move(invalid->message);
  } else {
    request_path(in, head, bad);
  }
  if (!bad.empty()) {
    s.record_invalid(head.method, target.host, target.port, bad, in.tunnel);
    co_await in.refuse(400, ProxyError::http_request_error, std::move(bad), true);
    co_return false;
  }
  const Checked& req = std::get<Checked>(checked);
  const std::string method(head.method);
  std::string upstream_head;
  const Lease head_text(s.text_spares(), upstream_head);
  http::append_request_head(upstream_head, head, in.path, target, req.expect_continue, kHttpsPort);
  s.client_bytes().consume(head.head_size);  // `head` views are invalid from here on

  auto& rec = in.rec;
  rec = s.new_record(method, target.host, target.port);
  rec.tunnel = in.tunnel;
  s.request_line().method = method;
  s.request_line().target = in.path;
  auto dial = co_await s.decide_and_dial(target, rec, true, true);
  s.mark_decided(rec);
  if (s.closed()) co_return false;
  // A body that is not forwarded would be read as the next request: close instead.
  const bool close_on_refusal = req.framing.kind != http::BodyKind::none || !req.client_keep_alive;
  if (!dial.ok) {
    s.emit(std::move(rec));
    co_await in.refuse(dial.status, dial.error, std::move(dial.message), close_on_refusal);
    co_return !in.closing && !s.closed();
  }
  std::string why;
  ProxyError error{};
  if (!co_await secure_upstream(in, why, error)) {
    s.request_line().normal.reset();
    rec.status = 502;
    rec.detail = why;
    s.emit(std::move(rec));
    co_await in.refuse(502, error, std::move(why), close_on_refusal);
    co_return !in.closing && !s.closed();
  }
  // Where method/path rules matched the normalised path, that is the path that goes
  // upstream, so that the server reads what the rules read.
  s.apply_normal_path(upstream_head);
  // Last, so that nothing copies the head once a secret is in it; exchange() wipes it as
  // soon as it is sent.
  const auto snap = s.snapshot();
  const bool secret = add_credentials(*snap, target.host, target.port, upstream_head,
                                      in.credentials, rec.credential);
  const bool keep = co_await exchange(in, method, upstream_head, req, rec, secret);
  in.bytes_up += rec.bytes_up;
  in.bytes_down += rec.bytes_down;
  s.emit(std::move(rec));
  co_return keep && !in.closing && !s.closed() && !s.draining();
}

asio::awaitable<void> serve_all(Inspected& in) {
  Session& s = in.s;
  while (!s.draining()) {
    http::RequestHead head;
    if (co_await read_head(in, head) != Head::ok) break;
    s.due_within(s.cfg().idle_timeout);
    const bool more = co_await serve(in, head);
    s.header_spares().give(std::exchange(head.headers, {}));
    if (!more) break;
  }
  if (s.closed()) co_return;
  // close_notify, so that a client reading to the end knows it is the end.
  s.due_within(kGoodbye);
  asio::error_code ec;
  co_await in.tls.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
}

}  // namespace

asio::awaitable<void> inspect(Session& s, const http::Authority& target,
                              decision_log::DecisionRecord& rec) {
  const auto started = Session::clock::now();
  auto in = std::make_unique<Inspected>(s, *s.inspection(), target, rec.id);
  if (co_await s.send("HTTP/1.1 200 Connection established\r\n\r\n") && co_await check_hello(*in) &&
      co_await greet(*in, rec)) {
    co_await serve_all(*in);
  }
  if (in->check.refused()) record_refusal(s, in->check, rec);
  rec.bytes_up = in->bytes_up;
  rec.bytes_down = in->bytes_down;
  s.emit_close(std::move(rec), started);
}

}  // namespace vibepit::proxy
