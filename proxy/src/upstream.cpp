#include "vibepit/proxy/upstream.hpp"

#include <utility>
#include <vector>

#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::proxy {

asio::awaitable<Opened> open_upstream(const http::Authority& target, policy::Decision allowed,
                                      const policy::Classifier& classifier, NameResolver& resolver,
                                      Dialler& dialler) {
  const std::string display = target.display();
  std::vector<policy::IpAddr> candidates;
  if (target.ip) {
    candidates.push_back(*target.ip);  // a literal: decide_http classified it already
  } else {
    const ResolveResult r = co_await resolver.resolve(target.host);
    if (r.cancelled) co_return Opened{{}, true};
    if (!r.ok) {
      co_return Opened{
          policy::resolve_failed(std::move(allowed), target.host, r.error, r.timed_out)};
    }
    // Classify every address; only those that pass may be dialled. No second lookup.
    policy::Selection s = policy::select_dialable(r.addrs, classifier, kMaxDialAddresses);
    if (s.dialable.empty()) {
      co_return Opened{
          policy::blocked_after_resolution(std::move(allowed), display, target.host, s)};
    }
    candidates = std::move(s.dialable);
  }

  policy::Outcome o = policy::explain(std::move(allowed), display);
  bool any_timeout = false;
  std::string last_error;
  asio::error_code last_ec;
  for (const auto& ip : candidates) {
    const DialResult d = co_await dialler.dial(runtime::to_tcp_endpoint(ip, target.port));
    if (d.cancelled) co_return Opened{{}, true};
    if (!d.ec) {
      o.addr = ip.to_string();
      co_return Opened{std::move(o)};
    }
    if (d.timed_out) {
      any_timeout = true;
      last_error = "timed out";
    } else {
      last_error = d.ec.message();
      last_ec = d.ec;
    }
  }
  // The rules allowed it; the destination did not answer. The verdict stays allow.
  o.addr = candidates.back().to_string();
  o.detail = "connect failed: " + last_error;
  o.status = any_timeout ? 504 : 502;
  if (any_timeout) {
    o.error = policy::ProxyError::connection_timeout;
  } else if (last_ec == asio::error::connection_refused) {
    o.error = policy::ProxyError::connection_refused;
  } else if (last_ec == asio::error::host_unreachable ||
             last_ec == asio::error::network_unreachable) {
    o.error = policy::ProxyError::destination_ip_unroutable;
  } else {
    o.error = policy::ProxyError::destination_unavailable;
  }
  o.text = "could not connect to " + display + ": " + last_error + " (tried " +
           std::to_string(candidates.size()) + " address" + (candidates.size() == 1 ? "" : "es") +
           ").";
  co_return Opened{std::move(o)};
}

void record_outcome(runtime::DecisionRecord& rec, const policy::Outcome& o) {
  rec.verdict = o.decision.verdict;
  rec.would_deny = o.decision.would_deny;
  rec.reason = o.decision.reason;
  rec.rule = o.decision.rule;
  rec.range = o.decision.range;
  rec.addr = o.addr;
  rec.detail = o.detail;
  if (o.refused()) rec.status = static_cast<std::uint16_t>(o.status);
}

}  // namespace vibepit::proxy
