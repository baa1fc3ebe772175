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
    // A tunnel's first bytes are checked after its 200: these close it rather than answer.
    {Reason::sni_mismatch, 403, ProxyError::http_request_denied},
    {Reason::no_sni, 403, ProxyError::http_request_denied},
    {Reason::not_tls, 403, ProxyError::http_request_denied},
    {Reason::bad_client_hello, 403, ProxyError::http_request_denied},
    // A shared gateway's client without valid Proxy-Authorization (with Proxy-Authenticate).
    {Reason::unauthenticated, 407, ProxyError::http_request_denied},
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
    case Reason::sni_mismatch:
      o.text = "access to " + t + " refused: the TLS ClientHello names another host.";
      break;
    case Reason::no_sni:
      o.text = "access to " + t + " refused: the TLS ClientHello names no host.";
      break;
    case Reason::not_tls:
      o.text = "access to " + t + " refused: only TLS may be tunnelled.";
      break;
    case Reason::bad_client_hello:
      o.text = "access to " + t + " refused: a malformed TLS ClientHello.";
      break;
    case Reason::unauthenticated:
      o.text = "access to " + t +
               " refused: this proxy is shared by tenants; send Proxy-Authorization: Basic "
               "with your tenant's name and token (a proxy URL http://NAME:TOKEN@host:port "
               "does).";
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
    case ProxyError::tls_certificate_error:
      return "tls_certificate_error";
    case ProxyError::tls_protocol_error:
      return "tls_protocol_error";
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

Outcome unheld(Decision denied, std::string_view target, Unheld how, std::uint64_t limit) {
  Outcome o = explain(std::move(denied), target);
  const std::string t(target), n = std::to_string(limit);
  const std::string allow = ".\nTo allow it, run: vibepit allow-http " + t;
  switch (how) {
    case Unheld::client_full:
      o.detail = "not held: " + n + " requests of this client are held (ask-max-per-client)";
      o.text = "access to " + t + " denied: not allowlisted, and not held for a decision: " + n +
               " requests of this client are waiting already (ask-max-per-client)" + allow;
      break;
    case Unheld::table_full:
      o.detail = "not held: " + n + " requests are held (ask-max)";
      o.text = "access to " + t + " denied: not allowlisted, and not held for a decision: " + n +
               " requests are waiting already (ask-max)" + allow;
      break;
    case Unheld::expired: {
      const std::string time = limit % 1000 ? n + " ms" : std::to_string(limit / 1000) + " s";
      o.detail = "held " + time + " and no allow came (ask-timeout-ms)";
      o.text = "access to " + t + " denied: not allowlisted, and no allow came in the " + time +
               " it was held for a decision" + allow;
      break;
    }
    case Unheld::refused:
      o.detail = "refused by the user while held";
      o.text = "access to " + t + " denied: refused by the user while it was held for a decision.";
      break;
    case Unheld::ask_off:
      o.detail = "ask mode was turned off while held";
      o.text = "access to " + t +
               " denied: not allowlisted; ask mode was turned off while it was held" + allow;
      break;
    case Unheld::shutdown:
      o.status = 503;
      o.error = ProxyError::proxy_internal_error;
      o.detail = "the proxy stopped while it was held";
      o.text = "the proxy is shutting down; the request to " + t +
               " was held for a decision and is not sent.";
      break;
  }
  return o;
}

}  // namespace vibepit::proxy
