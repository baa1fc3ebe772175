// Outcomes: one table of what each refusal means to the client.
#include "vibepit/proxy/outcome.hpp"

#include <utility>

namespace vibepit::proxy {

using policy::Decision;
using policy::Reason;
using policy::Verdict;
namespace {

struct Row {
  Reason reason;
  int status;
  ProxyError error;
};

// Keyed by reason: the status and error type of every refusal. (allowlisted is not a
// refusal; it is here so that the table is total.)
constexpr Row kTable[] = {
    {Reason::allowlisted, 200, ProxyError::proxy_internal_error},
    {Reason::not_allowlisted, 403, ProxyError::http_request_denied},
    {Reason::blocked_address, 403, ProxyError::destination_ip_prohibited},
    {Reason::resolve_failed, 502, ProxyError::dns_error},
    {Reason::invalid_target, 400, ProxyError::http_request_error},
    {Reason::rate_limited, 429, ProxyError::http_request_denied},
    {Reason::overloaded, 503, ProxyError::proxy_internal_error},
};

const Row& row(Reason r) {
  for (const Row& x : kTable) {
    if (x.reason == r) return x;
  }
  return kTable[0];
}

// Fills status, error and text for o.decision (denied), from the table. In place: an
// Outcome is four strings, and each move of one copies them (a tunnel's decision moved it
// a dozen times).
void finish(Outcome& o, std::string_view target, std::string_view host) {
  const Decision& d = o.decision;
  if (d.verdict == Verdict::allow) {
    o.status = 200;
    return;
  }
  const Row& r = row(d.reason);
  o.status = r.status;
  o.error = r.error;
  const std::string t(target);
  switch (d.reason) {
    case Reason::not_allowlisted:
      o.text =
          "access to " + t + " denied: not allowlisted.\nTo allow it, run: vibepit allow-http " + t;
      break;
    case Reason::blocked_address:
      o.text = "access to " + t + " denied: " +
               (o.addr.empty() ? std::string("the address is")
                               : std::string(host) + " resolves to " + o.addr + ",") +
               " in the blocked range " + d.range + ". No rule can allow it.";
      break;
    case Reason::resolve_failed:
      o.text = "could not resolve " + std::string(host) + " (" + o.detail +
               "); the request was not sent.";
      break;
    case Reason::invalid_target:
      o.text = "access to " + t + " refused: not a valid host name or address.";
      break;
    case Reason::rate_limited:
      o.text = "access to " + t + " refused: over the rate limit; retry later.";
      break;
    case Reason::overloaded:
      o.text = "access to " + t + " refused: the proxy is overloaded; retry later.";
      break;
    case Reason::allowlisted:
      break;
  }
}

}  // namespace

std::string_view error_token(ProxyError error) {
  switch (error) {
    case ProxyError::http_request_error:
      return "http_request_error";
    case ProxyError::http_request_denied:
      return "http_request_denied";
    case ProxyError::destination_ip_prohibited:
      return "destination_ip_prohibited";
    case ProxyError::dns_error:
      return "dns_error";
    case ProxyError::dns_timeout:
      return "dns_timeout";
    case ProxyError::connection_refused:
      return "connection_refused";
    case ProxyError::destination_ip_unroutable:
      return "destination_ip_unroutable";
    case ProxyError::destination_unavailable:
      return "destination_unavailable";
    case ProxyError::connection_timeout:
      return "connection_timeout";
    case ProxyError::connection_terminated:
      return "connection_terminated";
    case ProxyError::http_response_incomplete:
      return "http_response_incomplete";
    case ProxyError::proxy_internal_error:
      return "proxy_internal_error";
  }
  return "proxy_internal_error";
}

Outcome explain(Decision decision, std::string_view target) {
  Outcome o;
  o.decision = std::move(decision);
  finish(o, target, {});
  return o;
}

Outcome resolve_failed(Decision allowed, std::string_view host, std::string detail,
                       bool timed_out) {
  Outcome o;
  o.decision = std::move(allowed);
  o.decision.verdict = Verdict::deny;
  o.decision.reason = Reason::resolve_failed;
  o.detail = std::move(detail);
  finish(o, {}, host);
  if (timed_out) o.error = ProxyError::dns_timeout;
  return o;
}

Outcome blocked_after_resolution(Decision allowed, std::string_view target, std::string_view host,
                                 const policy::Selection& selection) {
  Outcome o;
  o.decision = std::move(allowed);
  o.decision.verdict = Verdict::deny;
  o.decision.reason = Reason::blocked_address;
  o.decision.range = selection.range;
  if (selection.first_blocked) o.addr = selection.first_blocked->to_string();
  finish(o, target, host);
  return o;
}

}  // namespace vibepit::proxy
