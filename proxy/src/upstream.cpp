#include "vibepit/proxy/upstream.hpp"

namespace vibepit::proxy {

Outcome dial_failed(Outcome o, std::string_view display, const std::vector<policy::IpAddr>& tried,
                    bool any_timeout, const asio::error_code& last_ec,
                    const std::string& last_error) {
  // The rules allowed it; the destination did not answer. The verdict stays allow.
  o.addr = tried.back().to_string();
  o.detail = "connect failed: " + last_error;
  o.status = any_timeout ? 504 : 502;
  if (any_timeout) {
    o.error = ProxyError::connection_timeout;
  } else if (last_ec == asio::error::connection_refused) {
    o.error = ProxyError::connection_refused;
  } else if (last_ec == asio::error::host_unreachable ||
             last_ec == asio::error::network_unreachable) {
    o.error = ProxyError::destination_ip_unroutable;
  } else {
    o.error = ProxyError::destination_unavailable;
  }
  o.text = "could not connect to " + std::string(display) + ": " + last_error + " (tried " +
           std::to_string(tried.size()) + " address" + (tried.size() == 1 ? "" : "es") + ").";
  return o;
}

void record_outcome(decision_log::DecisionRecord& rec, const Outcome& o) {
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
