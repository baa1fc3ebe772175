#pragma once
// One client connection. The session reads request heads and routes each one; what it
// shares with the two request handlers is the connection itself: the client and upstream
// sockets, one deadline timer, the decision (decide -> resolve -> select -> dial) and the
// records. The handlers are their own units over that interface: tunnel.cpp (CONNECT) and
// http_forward.cpp (absolute-form HTTP, keep-alive). A session lives on its worker's
// thread; it is kept alive by its own coroutines.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/http/authority.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/policy/request_rule.hpp"
#include "vibepit/proxy/byte_buffer.hpp"
#include "vibepit/proxy/outcome.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/spares.hpp"
#include "vibepit/proxy/upstream.hpp"
#include "vibepit/runtime/pending.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::proxy {

class Inspection;
class TunnelCheck;
class Worker;

class Session : public std::enable_shared_from_this<Session> {
 public:
  using clock = std::chrono::steady_clock;

  Session(Worker& w, asio::ip::tcp::socket client, const asio::ip::tcp::endpoint& peer);
  ~Session();
  void start();
  // Called when the server drains: close now if no request is in progress.
  void on_drain();

  // ---- What the request handlers use.

  // The outcome of decide -> resolve -> select -> dial for one request.
  struct Dial {
    bool ok = false;
    int status = 0;  // HTTP status to send when !ok
    ProxyError error = ProxyError::proxy_internal_error;
    std::string message;
    // A CONNECT allowed for inspection (a method/path rule names its host:port): nothing
    // was dialled; each request inside is decided and dialled on its own.
    bool inspect = false;
  };
  // A plain-HTTP request as method/path rules see it (policy/request_rule.hpp).
  struct RequestLine {
    std::string_view method;
    std::string_view target;  // the path and query as the client sent them
    // When method/path rules decided it: its normalised path and query, with which it goes
    // upstream. Null otherwise (on the heap: a forwarding frame stays under Asio's
    // recycling limit, and only such requests pay for it).
    std::unique_ptr<policy::NormalPath> normal;
  };
  // Decide `target` against the current rules (with `request`, the plain-HTTP request in
  // request_line(): where only method/path rules name the host:port, its method and path
  // decide); when allowed, make upstream() a connection to an address that passed
  // classification (or keep the open one, when `reuse_ok` and it was dialled for the same
  // authority). Fills the decision's fields of `rec`.
  asio::awaitable<Dial> decide_and_dial(const http::Authority& target,
                                        decision_log::DecisionRecord& rec, bool reuse_ok,
                                        bool request = false);
  // The record of the request in progress (a tunnel's, or a forwarded request's), kept here
  // for the frame's sake as request_line() is.
  decision_log::DecisionRecord& record() { return record_; }
  // The plain-HTTP request being decided: forward_http sets it before decide_and_dial. Here
  // and not in the handler's frame, which it would take past Asio's recycling limit.
  RequestLine& request_line() { return request_line_; }
  // When method/path rules decided the request: its request line's target in `head` (as
  // http::append_request_head writes it) becomes the normalised path and query.
  void apply_normal_path(std::string& head);
  asio::awaitable<bool> send(std::string_view bytes);  // to the client, under the deadline
  // An error response. Message by value: it must live in the coroutine frame across the
  // write. With `close`, the client's side is shut down after it.
  asio::awaitable<void> refuse(int status, ProxyError error, std::string message, bool close);
  // A request refused before any rule is asked, because it or its target is invalid: one
  // deny record (invalid_target, with `detail`), then a 400 with `message` that closes the
  // connection. `method` and `host` may view the request head: they are copied first.
  asio::awaitable<void> refuse_invalid(std::string_view method, std::string host,
                                       std::uint16_t port, std::string detail, std::string message);
  // Its record alone, for a refusal sent another way: inside an inspected connection,
  // whose CONNECT's id is `tunnel`.
  void record_invalid(std::string_view method, std::string_view host, std::uint16_t port,
                      std::string detail, std::uint64_t tunnel = 0);

  asio::ip::tcp::socket& client() { return client_; }
  asio::ip::tcp::socket& upstream() { return upstream_; }
  ByteBuffer& client_bytes() { return inbuf_; }    // read from the client, not consumed
  ByteBuffer& upstream_bytes() { return upbuf_; }  // read from upstream, not consumed
  // The client's read buffer goes back to the worker, unless bytes are waiting in it (a
  // tunnel keeps none while it is open).
  void release_client_bytes();
  void drop_upstream();  // close the upstream connection: it must not be reused
  void close_all();
  bool closed() const { return closed_; }
  bool draining() const;
  const config::ProxyConfig& cfg() const;
  // The worker's buffers a request borrows and gives back (spares.hpp).
  Spares<std::vector<http::Header>>& header_spares();
  Spares<std::string>& text_spares();

  void busy();   // a request is in progress: the idle deadline applies
  void touch();  // bytes moved on a tunnel or body: push the idle deadline
  // An inspected connection's deadlines (inspect.cpp): waiting for its next request (the
  // header time-out, and a drain closes it), and a step that must end within `d`.
  void wait_request();
  void due_within(std::chrono::milliseconds d);
  // TLS inspection, when the proxy has it (config: always), or null.
  Inspection* inspection();
  // The rules in force (the worker's thread's view of the store).
  std::shared_ptr<const policy::Snapshot> snapshot() const;
  // Upstream connections dialled so far: a change says upstream() is a new connection.
  std::uint64_t upstream_dials() const { return upstream_dials_; }

  // A record of this client's request for `host`:`port`; the decision fills the rest.
  // Its buffers are those of records already written (FoldingLog::reuse_buffers).
  decision_log::DecisionRecord new_record(std::string_view method, std::string_view host,
                                          std::uint16_t port);
  // A copy of `rec` in such buffers, for a record written while `rec` goes on (a tunnel's
  // decision, whose close record follows).
  decision_log::DecisionRecord copy_record(const decision_log::DecisionRecord& rec);
  void mark_decided(decision_log::DecisionRecord& rec);  // elapsed_us: arrival to decision
  void emit(decision_log::DecisionRecord rec);
  void emit_close(decision_log::DecisionRecord rec, clock::time_point started);

  // ---- The world as open_upstream sees it (NameResolver, Dialler): the worker's lookup
  // and connect, under this connection's deadlines.
  bool cached(const std::string& host, ResolveResult& out);
  asio::awaitable<ResolveResult> resolve(const std::string& host);
  asio::awaitable<DialResult> dial(const asio::ip::tcp::endpoint& to);

 private:
  enum class Phase { wait_request, read_head, resolve, connect, busy, held };
  enum class HeadStatus { ok, closed, failed };
  enum class Held { released, refused, gone };
  struct HoldState {
    explicit HoldState(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;  // expires when the hold should look again; a wake cancels it
    std::shared_ptr<runtime::PendingTable::Entry> entry;
    bool gone = false;           // the client hung up
    bool bytes_waiting = false;  // the client sent bytes past its request
  };

  // Ask mode (hold.cpp): hold a request that no rule allows until an allow covers it (then
  // `snap` and `d` are the snapshot and decision that allow it: released), or it is refused,
  // expires or the proxy stops (`o` is the refusal and `rec` says how: refused), or the
  // client goes away (its record written, the connection closed: gone).
  asio::awaitable<Held> hold(const http::Authority& target, RequestLine* req,
                             decision_log::DecisionRecord& rec,
                             std::shared_ptr<const policy::Snapshot>& snap, policy::Decision& d,
                             Outcome& o);
  // The rules' decision on `target` (and `req`'s method and path where they matter): see
  // decide_and_dial. A tunnel to a host:port that only method/path rules name is refused:
  // its requests cannot be seen without TLS inspection. `why`, for such refusals and for a
  // request path the rules cannot match, gets the client's text and the record's detail.
  policy::Decision decide(const http::Authority& target, RequestLine* req,
                          const policy::Snapshot& snap, Outcome* why);
  // The refusal of a denied decision, in `o` (whose detail holds decide's `why`).
  static void explain_denial(policy::Decision&& d, const http::Authority& target,
                             const RequestLine* req, Outcome& o);
  // Offer the request to the pending table; when held, write the held event.
  std::shared_ptr<runtime::PendingTable::Entry> enter_hold(const http::Authority& target,
                                                           const decision_log::DecisionRecord& rec,
                                                           runtime::PendingTable::Admit& admit);
  void wake_hold();     // on this thread: the held request looks again
  void end_hold();      // leave the pending table, if in it (a session destroyed while held)
  void watch_client();  // while held: notice the client hanging up
  void on_client_readable(const asio::error_code& ec);
  bool client_hung_up();  // its FIN has arrived (TCP state), bytes before it or not

  asio::awaitable<void> run();
  asio::awaitable<HeadStatus> read_head(http::RequestHead& head);
  // A shared gateway's client says which tenant it is on every request (tenant.hpp): true
  // when `head` proves it (tenant_ is then that tenant's), or when there are no tenants.
  bool authenticate(const http::RequestHead& head);
  // The 407 with Proxy-Authenticate that a request without such proof gets, after its deny
  // record (reason unauthenticated); the connection closes.
  asio::awaitable<void> refuse_unauthenticated(std::string_view method,
                                               const http::Authority& target);
  // Deadlines: one per phase, enforced by this connection's timer.
  void set_deadline(Phase phase, std::chrono::milliseconds d);
  void arm_timer(clock::time_point at);
  void on_timer();  // the timer fired: wait on, or act on the passed deadline

  friend class Worker;
  struct Links {
    Session* prev = nullptr;
    Session* next = nullptr;
  };
  Links links_;  // the worker's list of open sessions

  Worker& w_;
  asio::ip::tcp::socket client_;
  asio::ip::tcp::socket upstream_;
  // The authority the open upstream connection was dialled for.
  std::string upstream_host_;
  std::uint16_t upstream_port_ = 0;
  std::string upstream_addr_;
  std::uint64_t upstream_dials_ = 0;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  clock::time_point deadline_ = clock::time_point::max();
  Phase phase_ = Phase::wait_request;
  bool timed_out_ = false;
  bool closed_ = false;
  policy::IpAddr client_ip_;
  std::uint16_t client_port_ = 0;
  // The tenant the client's last request proved it is, and its name for the records.
  policy::TenantId tenant_ = policy::kNoTenant;
  std::string tenant_name_;
  // The Proxy-Authorization value that proved tenant_, and the generation it was checked
  // under; wiped when the session ends (it holds the token, encoded).
  secret::WipedString proven_;
  std::uint64_t proven_generation_ = 0;
  // The snapshot the request being read was authenticated under: decide_and_dial decides by
  // it too and lets it go, and run() drops it after each request (an idle keep-alive
  // connection holds none).
  std::shared_ptr<const policy::Snapshot> request_snap_;
  ByteBuffer inbuf_;
  ByteBuffer upbuf_;
  // Each request's target is parsed into this one, whose strings keep their capacity: a
  // warm keep-alive request allocates nothing for its host and path. Here and not in
  // run()'s frame, as is the record of the request in progress (a tunnel's lives as long
  // as the tunnel; a forwarded request's pushed forward_http's frame past the limit): the
  // session's memory comes from the worker's pool, where a frame of over 1 KiB went to
  // malloc's slow path.
  http::Target target_;
  RequestLine request_line_;
  decision_log::DecisionRecord record_;
  std::unique_ptr<HoldState> hold_;  // while a request is held (ask mode)
};

// The request handlers, one unit each.
// CONNECT: decide and dial, answer, then relay until either side ends.
// `rec` lives in the caller's frame: a tunnel's frame stays small while it is open.
asio::awaitable<void> tunnel(Session& s, const http::Authority& target,
                             decision_log::DecisionRecord& rec);
// The SNI check's refusal of a tunnel: a deny record with the tunnel's id, and `rec`, its
// close record to come, says the same.
void record_refusal(Session& s, const TunnelCheck& check, decision_log::DecisionRecord& rec);
// An inspected CONNECT, allowed and answered 200 (inspect.cpp): the SNI check, TLS with the
// client, then each request decided, recorded and forwarded over TLS to upstream. Writes
// `rec` as the connection's close record.
asio::awaitable<void> inspect(Session& s, const http::Authority& target,
                              decision_log::DecisionRecord& rec);
// One absolute-form HTTP request, whose head is still at the front of client_bytes().
// Returns true when the client connection may carry another request.
asio::awaitable<bool> forward_http(Session& s, const http::RequestHead& head,
                                   const http::Target& target);

}  // namespace vibepit::proxy
