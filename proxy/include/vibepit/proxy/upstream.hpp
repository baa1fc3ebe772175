#pragma once
// Opening the upstream connection for an allowed request: resolve once, keep only the
// addresses that pass classification, dial those in order. This is the only way the proxy
// reaches the outside. The world comes in through two small interfaces (concepts, so no
// virtual calls on the data path), so that a component test can fake it and see exactly
// what would be dialled.
#include <concepts>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/error_code.hpp>
#include <asio/ip/tcp.hpp>

#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/http/authority.hpp"
#include "vibepit/policy/classify.hpp"
#include "vibepit/proxy/outcome.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::proxy {

// Name resolution as a connection sees it: the addresses `host` has. `cached` answers at
// once when it can (a warm name costs no coroutine); `resolve` looks it up, `cancelled`
// when the connection went away while it waited.
template <class R>
concept NameResolver = requires(R& r, const std::string& host, ResolveResult& out) {
  { r.cached(host, out) } -> std::same_as<bool>;
  { r.resolve(host) } -> std::same_as<asio::awaitable<ResolveResult>>;
};

struct DialResult {
  asio::error_code ec;     // empty: connected
  bool timed_out = false;  // the connect deadline passed
  bool cancelled = false;  // the connection went away while it waited
};

// Dialling as a connection sees it: one address at a time, into the connection's upstream
// socket.
template <class D>
concept Dialler = requires(D& d, const asio::ip::tcp::endpoint& to) {
  { d.dial(to) } -> std::same_as<asio::awaitable<DialResult>>;
};

inline constexpr std::size_t kMaxDialAddresses = 8;

// The outcome when every dial failed: the rules allowed it, the destination did not answer.
Outcome dial_failed(Outcome allowed, std::string_view display,
                    const std::vector<policy::IpAddr>& tried, bool any_timeout,
                    const asio::error_code& last_ec, const std::string& last_error);

// `allowed` is decide_http's allow for `target`, decided against the snapshot whose
// classifier is given. Every address dialled is one the classifier passed, from the one
// resolution made here. The outcome goes into `out` (status 200 and out.addr when
// connected; else a refusal), in place: an Outcome is four strings, which each move
// copies. False when the connection went away meanwhile: send nothing, record nothing.
template <NameResolver Resolver, Dialler Dial>
asio::awaitable<bool> open_upstream(const http::Authority& target, policy::Decision allowed,
                                    const policy::Classifier& classifier, Resolver& resolver,
                                    Dial& dialler, Outcome& out) {
  // The target as the client wrote it is text for refusals only: it is made when one is.
  std::vector<policy::IpAddr> candidates;
  if (target.ip) {
    candidates.push_back(*target.ip);  // a literal: decide_http classified it already
  } else {
    ResolveResult r;
    if (!resolver.cached(target.host, r)) r = co_await resolver.resolve(target.host);
    if (r.cancelled) co_return false;
    if (!r.ok) {
      out = resolve_failed(std::move(allowed), target.host, r.error, r.timed_out);
      co_return true;
    }
    // Classify every address; only those that pass may be dialled. No second lookup.
    policy::Selection s = policy::select_dialable(r.addrs, classifier, kMaxDialAddresses);
    if (s.dialable.empty()) {
      out = blocked_after_resolution(std::move(allowed), target.display(), target.host, s);
      co_return true;
    }
    candidates = std::move(s.dialable);
  }

  out = explain(std::move(allowed), {});  // an allow: no text
  bool any_timeout = false;
  std::string last_error;
  asio::error_code last_ec;
  for (const auto& ip : candidates) {
    const DialResult d = co_await dialler.dial(runtime::to_tcp_endpoint(ip, target.port));
    if (d.cancelled) co_return false;
    if (!d.ec) {
      out.addr = ip.to_string();
      co_return true;
    }
    if (d.timed_out) {
      any_timeout = true;
      last_error = "timed out";
    } else {
      last_error = d.ec.message();
      last_ec = d.ec;
    }
  }
  out = dial_failed(std::move(out), target.display(), candidates, any_timeout, last_ec, last_error);
  co_return true;
}

// The decision's fields of a record, from its outcome (and the status, when refused).
void record_outcome(decision_log::DecisionRecord& rec, const Outcome& o);

}  // namespace vibepit::proxy
