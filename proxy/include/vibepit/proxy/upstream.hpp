#pragma once
// Opening the upstream connection for an allowed request: resolve once, keep only the
// addresses that pass classification, dial those in order. This is the only way the proxy
// reaches the outside. The world is behind two small interfaces, so that a component test
// can fake it and see exactly what would be dialled.
#include <cstddef>
#include <string>

#include <asio/awaitable.hpp>
#include <asio/error_code.hpp>
#include <asio/ip/tcp.hpp>

#include "vibepit/http/authority.hpp"
#include "vibepit/policy/classify.hpp"
#include "vibepit/policy/outcome.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/runtime/decision_log.hpp"

namespace vibepit::proxy {

// Name resolution as a connection sees it.
class NameResolver {
 public:
  virtual ~NameResolver() = default;
  // The addresses `host` has, from a cache when it can. `cancelled` when the connection
  // went away while it waited.
  virtual asio::awaitable<ResolveResult> resolve(const std::string& host) = 0;
};

struct DialResult {
  asio::error_code ec;     // empty: connected
  bool timed_out = false;  // the connect deadline passed
  bool cancelled = false;  // the connection went away while it waited
};

// Dialling as a connection sees it: one address at a time, into the connection's upstream
// socket.
class Dialler {
 public:
  virtual ~Dialler() = default;
  virtual asio::awaitable<DialResult> dial(const asio::ip::tcp::endpoint& to) = 0;
};

inline constexpr std::size_t kMaxDialAddresses = 8;

struct Opened {
  policy::Outcome outcome;  // status 200 and outcome.addr when connected; else a refusal
  bool cancelled = false;   // the connection went away: send nothing, record nothing
};

// `allowed` is decide_http's allow for `target`, decided against the snapshot whose
// classifier is given. Every address dialled is one the classifier passed, from the one
// resolution made here.
asio::awaitable<Opened> open_upstream(const http::Authority& target, policy::Decision allowed,
                                      const policy::Classifier& classifier, NameResolver& resolver,
                                      Dialler& dialler);

// The decision's fields of a record, from its outcome (and the status, when refused).
void record_outcome(runtime::DecisionRecord& rec, const policy::Outcome& o);

}  // namespace vibepit::proxy
