#pragma once
// One client connection: read a request head, decide, resolve once, dial only addresses
// that passed, then relay (CONNECT) or forward requests (absolute-form HTTP, keep-alive).
// A session lives on its worker's thread; it is kept alive by its own coroutines.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/http/authority.hpp"
#include "vibepit/http/body.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/upstream.hpp"
#include "vibepit/runtime/decision_log.hpp"

namespace vibepit::proxy {

struct Worker;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& w, asio::ip::tcp::socket client, const asio::ip::tcp::endpoint& peer);
  ~Session();
  void start();
  // Called when the server drains: close now if no request is in progress.
  void on_drain();

 private:
  using clock = std::chrono::steady_clock;
  enum class Phase { wait_request, read_head, resolve, connect, busy };
  enum class HeadStatus { ok, closed, failed };

  // The outcome of decide -> resolve -> classify -> dial for one request.
  struct Dial {
    bool ok = false;
    int status = 0;  // HTTP status to send when !ok
    ProxyError error = ProxyError::proxy_internal_error;
    std::string message;
  };

  asio::awaitable<void> run();
  asio::awaitable<HeadStatus> read_head(http::RequestHead& head);
  asio::awaitable<void> handle_connect(const http::Authority& target, runtime::DecisionRecord& rec);
  // Returns true when the client connection may carry another request.
  asio::awaitable<bool> handle_http(const http::RequestHead& head, const http::Target& target);
  asio::awaitable<Dial> decide_and_dial(const http::Authority& target, runtime::DecisionRecord& rec,
                                        bool reuse_ok);
  asio::awaitable<bool> send(std::string_view bytes);  // to the client, with a deadline
  // Message by value: it must live in the coroutine frame across the write.
  asio::awaitable<void> refuse(int status, ProxyError error, std::string message, bool close);
  asio::awaitable<bool> forward_request_body(const http::Framing& framing, std::uint64_t& bytes,
                                             std::string& framing_error);
  asio::awaitable<bool> forward_response(std::string_view method, bool client_keep_alive,
                                         bool& keep_client, runtime::DecisionRecord& rec);

  // The world as open_upstream sees it (NameResolver, Dialler): the worker's resolver and
  // this connection's upstream socket, under this connection's deadlines.
 public:
  asio::awaitable<ResolveResult> resolve(const std::string& host);
  asio::awaitable<DialResult> dial(const asio::ip::tcp::endpoint& to);

 private:
  runtime::DecisionRecord new_record(std::string_view method, const http::Authority& target);
  void mark_decided(runtime::DecisionRecord& rec);  // elapsed_us: arrival to decision
  void emit(runtime::DecisionRecord rec);
  void emit_close(runtime::DecisionRecord rec, clock::time_point started);
  // Deadlines: one per phase, enforced by this connection's timer.
  void set_deadline(Phase phase, std::chrono::milliseconds d);
  void touch();  // activity on a tunnel or body: push the idle deadline
  void arm_timer();
  void on_timer();  // the timer fired: wait on, or act on the passed deadline
  void close_all();

  Worker& w_;
  asio::ip::tcp::socket client_;
  asio::ip::tcp::socket upstream_;
  std::string upstream_key_;  // "host:port" the open upstream connection was dialled for
  std::string upstream_addr_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  clock::time_point deadline_ = clock::time_point::max();
  Phase phase_ = Phase::wait_request;
  bool timed_out_ = false;
  bool closed_ = false;
  std::string client_text_;
  std::string inbuf_;  // bytes read from the client not yet consumed
  std::string upbuf_;  // bytes read from upstream not yet consumed
};

}  // namespace vibepit::proxy
