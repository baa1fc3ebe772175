#include "vibepit/proxy/session.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/policy/ip.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/upstream.hpp"
#include "vibepit/proxy/worker.hpp"
#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
constexpr std::size_t kReadChunk = 4096;
// The resolve deadline's margin over the resolver's own time-out, which answers first.
constexpr std::chrono::seconds kResolveGrace{1};

}  // namespace

static_assert(NameResolver<Session> && Dialler<Session>);

Session::Session(Worker& w, tcp::socket client, const tcp::endpoint& peer)
    : w_(w), client_(std::move(client)), upstream_(w.io()), timer_(w.io()) {
  w_.enter(*this);
  // A real host name is longer than std::string's 15 inline characters: one of the
  // worker's strings holds it, and goes back with the session.
  target_.authority.host = w_.text_spares().take();
  auto addr = peer.address();
  client_ip_ = runtime::to_ip_addr(addr);
  client_port_ = peer.port();
  // TCP_NODELAY comes from the listening socket (ProxyServer::listen).
}

Session::~Session() {
  end_hold();
  w_.text_spares().give(std::move(target_.authority.host));
  release_client_bytes();
  w_.leave(*this);
}

void Session::release_client_bytes() {
  if (inbuf_.empty()) w_.read_spares().give(std::exchange(inbuf_, {}));
}

void Session::start() {
  auto self = shared_from_this();
  asio::co_spawn(
      w_.io(), [self] { return self->run(); }, asio::detached);
}

void Session::on_drain() {
  if (phase_ == Phase::wait_request) close_all();
  if (phase_ == Phase::held) wake_hold();  // it answers that the proxy is stopping
}

void Session::drop_upstream() {
  asio::error_code ignored;
  upstream_.close(ignored);
  upstream_host_.clear();
  upstream_port_ = 0;
}

bool Session::draining() const {
  return w_.draining();
}

const config::ProxyConfig& Session::cfg() const {
  return w_.cfg();
}

Spares<std::vector<http::Header>>& Session::header_spares() {
  return w_.header_spares();
}

Spares<std::string>& Session::text_spares() {
  return w_.text_spares();
}

void Session::busy() {
  if (phase_ != Phase::busy) set_deadline(Phase::busy, w_.cfg().idle_timeout);
}

void Session::wait_request() {
  set_deadline(Phase::wait_request, w_.cfg().header_timeout);
}

void Session::due_within(std::chrono::milliseconds d) {
  set_deadline(Phase::busy, d);
}

Inspection* Session::inspection() {
  return w_.inspection();
}

void Session::close_all() {
  closed_ = true;
  asio::error_code ignored;
  client_.close(ignored);
  upstream_.close(ignored);
  timer_.cancel();
  timer_armed_ = false;
  wake_hold();
}

// One timer per connection, armed lazily: a later deadline (activity on a tunnel pushes
// the idle deadline) is a store, and the timer, when it fires early, waits again for the
// rest. Only an earlier deadline re-arms it at once. Its first expiry is no later than the
// shortest deadline a request's phases set (resolve, connect), so that a request which
// goes from its head to its dial in that time re-arms nothing: a re-arm is a cancel, a
// new wait and its operation, 2% of a tunnel's instructions.
void Session::set_deadline(Phase phase, std::chrono::milliseconds d) {
  phase_ = phase;
  timed_out_ = false;
  const auto now = clock::now();
  deadline_ = now + d;
  if (!timer_armed_) {
    const auto& c = w_.cfg();
    const auto first = std::min({c.connect_timeout, c.resolve_timeout + kResolveGrace, d});
    arm_timer(now + first);
  } else if (deadline_ < timer_.expiry()) {
    arm_timer(deadline_);
  }
}

void Session::touch() {
  deadline_ = clock::now() + w_.cfg().idle_timeout;
}

void Session::arm_timer(clock::time_point at) {
  timer_armed_ = true;
  timer_.expires_at(at);  // cancels a wait for a later expiry
  timer_.async_wait([weak = weak_from_this()](const asio::error_code& ec) {
    if (ec) return;  // re-armed or closed: a newer wait, or none, is in charge
    if (auto self = weak.lock()) self->on_timer();
  });
}

void Session::on_timer() {
  timer_armed_ = false;
  if (closed_) return;
  if (clock::now() < deadline_) {
    arm_timer(deadline_);  // not due yet: the deadline moved later, or this was early
    return;
  }
  timed_out_ = true;
  asio::error_code ignored;
  switch (phase_) {
    case Phase::read_head:
      client_.cancel(ignored);  // run() answers 408
      break;
    case Phase::connect:
      upstream_.close(ignored);  // the dial moves on to the next address
      break;
    default:
      close_all();
      break;
  }
}

asio::awaitable<Session::HeadStatus> Session::read_head(http::RequestHead& head) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  const auto limit = w_.cfg().max_request_head;
  for (;;) {
    if (!inbuf_.empty()) {
      // The header index comes from the worker's spares once bytes arrive: a connection
      // waiting for its next request holds none.
      if (head.headers.capacity() == 0) head.headers = w_.header_spares().take();
      auto r = http::parse_request_head(inbuf_, limit, head);
      if (r.state == http::ParseState::complete) co_return HeadStatus::ok;
      if (r.state == http::ParseState::error) {
        if (r.error == http::HeadError::too_large) {
          co_await refuse(431, ProxyError::http_request_error,
                          "request head larger than " + std::to_string(limit) + " bytes", true);
        } else {
          co_await refuse(400, ProxyError::http_request_error,
                          std::string("malformed request: ") + std::string(http::describe(r.error)),
                          true);
        }
        co_return HeadStatus::failed;
      }
    }
    if (phase_ == Phase::wait_request && !inbuf_.empty()) phase_ = Phase::read_head;
    if (inbuf_.capacity() == 0) inbuf_ = w_.read_spares().take();
    auto n = co_await client_.async_read_some(inbuf_.prepare(kReadChunk), tok);
    inbuf_.commit(n);
    if (ec) {
      if (timed_out_ && !inbuf_.empty() && client_.is_open()) {
        co_await refuse(408, ProxyError::http_request_error,
                        "request head not received within the header timeout", true);
        co_return HeadStatus::failed;
      }
      co_return HeadStatus::closed;
    }
    if (phase_ == Phase::wait_request) phase_ = Phase::read_head;
  }
}

asio::awaitable<void> Session::run() {
  auto self = shared_from_this();
  http::Target& target = target_;
  for (;;) {
    set_deadline(Phase::wait_request, w_.cfg().header_timeout);
    if (w_.draining() && inbuf_.empty()) break;
    http::RequestHead head;
    if (co_await read_head(head) != HeadStatus::ok) break;
    set_deadline(Phase::busy, w_.cfg().idle_timeout);

    if (auto err = http::parse_target(head.method, head.target, target)) {
      // The answer quotes the client's own target back; the record keeps its authority only.
      std::string message = "invalid request target \"" + std::string(head.target.substr(0, 256)) +
                            "\": " + err->what;
      co_await refuse_invalid(head.method, std::string(http::authority_text(head.target)), 0,
                              err->what, std::move(message));
      break;
    }
    if (!authenticate(head)) {
      co_await refuse_unauthenticated(head.method, target.authority);
      break;
    }
    if (target.form == http::TargetForm::authority) {
      record_ = new_record("CONNECT", target.authority.host, target.authority.port);
      inbuf_.consume(head.head_size);
      // An idle tunnel keeps no header index: the parser reserves room for 32 headers (1 KiB),
      // and this frame lives as long as the tunnel. It goes back to the worker.
      w_.header_spares().give(std::exchange(head.headers, {}));
      co_await tunnel(*this, target.authority, record_);
      break;
    }
    if (target.form != http::TargetForm::absolute) {
      std::string why =
          "this is a forward proxy: send absolute-form requests (GET http://host/path) or "
          "CONNECT host:port";
      co_await refuse_invalid(head.method, std::string(http::authority_text(head.target)), 0, why,
                              why);
      break;
    }
    if (target.scheme != "http") {
      // Built outside the co_await: GCC 12 mishandles conditional temporaries there.
      std::string why = "unsupported URL scheme \"" + target.scheme + "\"";
      if (target.scheme == "https") {
        why =
            "https:// URLs must be tunnelled: use CONNECT host:443 (set HTTPS_PROXY, not "
            "an http:// URL with an https target)";
      }
      co_await refuse_invalid(head.method, target.authority.host, target.authority.port, why, why);
      break;
    }
    if (!co_await forward_http(*this, head, target)) break;
    w_.header_spares().give(std::exchange(head.headers, {}));
    request_snap_.reset();  // one a refusal before the decision did not take
  }
  close_all();
}

decision_log::DecisionRecord Session::new_record(std::string_view method, std::string_view host,
                                                 std::uint16_t port) {
  decision_log::DecisionRecord rec;
  w_.log().reuse_buffers(rec);  // a long host or rule allocates nothing on this thread
  rec.id = w_.log().next_id();
  rec.ts_us = decision_log::now_us();
  rec.client_ip = client_ip_;  // the log's writer formats "address:port"
  rec.client_port = client_port_;
  rec.method = std::string(method);
  rec.host.assign(host);
  rec.port = port;
  rec.tenant = tenant_name_;
  return rec;  // gen and mode come from the snapshot decide_and_dial takes
}

decision_log::DecisionRecord Session::copy_record(const decision_log::DecisionRecord& rec) {
  decision_log::DecisionRecord copy;
  w_.log().reuse_buffers(copy);
  copy = rec;  // each string is copied into the capacity it has
  return copy;
}

void Session::mark_decided(decision_log::DecisionRecord& rec) {
  rec.elapsed_us =
      static_cast<std::uint32_t>(std::max<std::int64_t>(decision_log::now_us() - rec.ts_us, 1));
}

void Session::emit(decision_log::DecisionRecord rec) {
  // Denials past decision-log-per-client are folded into one summary per client and second.
  w_.log().write(std::move(rec), client_ip_, clock::now());
}

void Session::emit_close(decision_log::DecisionRecord rec, clock::time_point started) {
  rec.close = true;
  rec.hold = nullptr;  // the decision record told of the hold
  rec.ts_us = decision_log::now_us();
  rec.ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - started).count());
  emit(std::move(rec));
}

policy::Decision Session::decide(const http::Authority& target, RequestLine* req,
                                 const policy::Snapshot& snap, Outcome* why) {
  policy::Decision d = policy::decide_http(target.host, target.port, snap, tenant_);
  if (d.verdict != policy::Verdict::allow || !d.per_request) return d;
  auto refuse_as = [&](policy::Reason reason, std::string detail) {
    d.verdict = policy::Verdict::deny;
    d.reason = reason;
    d.rule = {};
    if (why != nullptr) why->detail = std::move(detail);
    return policy::apply_mode(std::move(d), snap.rules.mode);
  };
  if (req == nullptr) {
    if (w_.inspection() != nullptr) return d;  // a tunnel to inspect: its requests decide
    return refuse_as(policy::Reason::not_allowlisted,
                     "only method/path rules name " + target.display() +
                         ", and a tunnel to it would hide its requests: this proxy does not "
                         "inspect TLS yet (a plain rule " +
                         target.display() + " allows it whole)");
  }
  req->normal = std::make_unique<policy::NormalPath>(policy::normalize_path(req->target));
  if (!req->normal->error.empty()) {
    return refuse_as(policy::Reason::invalid_target,
                     "the method/path rules cannot match its path: " + req->normal->error);
  }
  return policy::decide_request(target.host, target.port, req->method, req->normal->path, snap,
                                tenant_);
}

void Session::explain_denial(policy::Decision&& d, const http::Authority& target,
                             const RequestLine* req, Outcome& o) {
  std::string why = std::move(o.detail);
  const bool by_request = d.per_request && req != nullptr && req->normal && why.empty();
  o = explain(std::move(d), target.display());
  if (!why.empty()) {
    o.text = "access to " + target.display() + " refused: " + why + ".";
    o.detail = std::move(why);
  } else if (by_request) {
    const std::string what = std::string(req->method) + " " + req->normal->path;
    o.detail = "no method/path rule allows " + what;
    o.text = "access to " + target.display() + " denied: " + what +
             " is not allowed by its method/path rules.\nTo allow it, run: vibepit allow-http '" +
             target.display() + " " + what + "'";
  }
}

std::shared_ptr<const policy::Snapshot> Session::snapshot() const {
  return w_.snapshot();
}

void Session::apply_normal_path(std::string& head) {
  if (!request_line_.normal) return;
  const auto first = head.find(' ');
  const auto second = head.find(' ', first + 1);
  if (first != std::string::npos && second != std::string::npos) {
    const auto& n = *request_line_.normal;
    head.replace(first + 1, second - first - 1, n.path + n.query);
  }
  request_line_.normal.reset();
}

// decide -> resolve -> select -> dial: one call each (parsing came before).
asio::awaitable<Session::Dial> Session::decide_and_dial(const http::Authority& target,
                                                        decision_log::DecisionRecord& rec,
                                                        bool reuse_ok, bool request) {
  RequestLine* req = request ? &request_line_ : nullptr;
  // One snapshot for the whole decision: the one the request was authenticated under, if
  // it is this connection's first decision since (an inspected tunnel's requests take theirs).
  auto snap = request_snap_ ? std::exchange(request_snap_, nullptr) : w_.snapshot();
  rec.gen = snap->generation;
  rec.mode = snap->rules.mode;
  // The decision lives in the outcome from the start: a second Decision in this frame took
  // it past Asio's recycling limit, and every request paid a malloc and a free for it.
  Outcome o;
  policy::Decision& d = o.decision;
  d = decide(target, req, *snap, &o);
  if (d.verdict == policy::Verdict::deny && d.reason == policy::Reason::not_allowlisted &&
      w_.asking()) {
    switch (co_await hold(target, req, rec, snap, d, o)) {
      case Held::released:
        o.detail.clear();
        break;  // on with the snapshot and decision that allow it
      case Held::refused:
        record_outcome(rec, o);
        co_return Dial{false, o.status, o.error, std::move(o.text)};
      case Held::gone:
        co_return Dial{};
    }
  }
  // A request that method/path rules decided: its path is recorded, as they matched it.
  if (req != nullptr && d.per_request && req->normal) rec.path = req->normal->path;
  if (d.verdict == policy::Verdict::deny) {
    explain_denial(std::move(d), target, req, o);
  } else if (req == nullptr && d.inspect && w_.inspection() != nullptr) {
    // Inspected: nothing is dialled until a request inside is allowed.
    record_outcome(rec, o);
    Dial dial{true, 200, ProxyError::proxy_internal_error, {}};
    dial.inspect = true;
    co_return dial;
  } else if (reuse_ok && upstream_.is_open() && upstream_port_ == target.port &&
             upstream_host_ == target.host) {
    // Keep-alive reuse: the connection was dialled for this same authority, to an address
    // that passed classification then. The decision above was made anew for this request.
    o.status = 200;  // an allow: no text names the target
    o.addr = upstream_addr_;
  } else {
    drop_upstream();
    if (!co_await open_upstream(target, std::move(d), snap->classifier, *this, *this, o)) {
      co_return Dial{};  // the connection went away
    }
    if (reuse_ok && !o.refused()) {  // what a later request may reuse (not a tunnel's)
      upstream_host_ = target.host;
      upstream_port_ = target.port;
      upstream_addr_ = o.addr;
    }
  }
  record_outcome(rec, o);
  co_return Dial{!o.refused(), o.status, o.error, std::move(o.text)};
}

bool Session::cached(const std::string& host, ResolveResult& out) {
  return w_.cached(host, out);
}

asio::awaitable<ResolveResult> Session::resolve(const std::string& host) {
  ResolveResult r;
  set_deadline(Phase::resolve, w_.cfg().resolve_timeout + kResolveGrace);
  r = co_await w_.lookup(host);
  r.cancelled = closed_;
  co_return r;
}

asio::awaitable<DialResult> Session::dial(const tcp::endpoint& to) {
  DialResult r;
  upstream_ = tcp::socket(w_.io());
  set_deadline(Phase::connect, w_.cfg().connect_timeout);
  r.ec = co_await w_.connect(upstream_, to);
  ++upstream_dials_;
  r.cancelled = closed_;
  r.timed_out = timed_out_;
  if (r.cancelled) co_return r;
  set_deadline(Phase::busy, w_.cfg().idle_timeout);
  asio::error_code ignored;
  if (r.ec) {
    upstream_.close(ignored);
  } else {
    upstream_.set_option(tcp::no_delay(true), ignored);
  }
  co_return r;
}

asio::awaitable<bool> Session::send(std::string_view bytes) {
  busy();
  // A response head fits the socket's send buffer as a rule: one send() then, with no
  // operation queued and no turn of the event loop before the coroutine goes on.
  ssize_t n;
  do {
    n = ::send(client_.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) co_return false;
  if (n > 0) bytes.remove_prefix(static_cast<std::size_t>(n));
  if (bytes.empty()) co_return true;
  asio::error_code ec;
  co_await asio::async_write(client_, asio::buffer(bytes),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

}  // namespace vibepit::proxy
