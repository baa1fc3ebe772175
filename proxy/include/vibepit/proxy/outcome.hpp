#pragma once
// What a decision means to the client: the HTTP status, the RFC 9209 error type and the
// text of every refusal. Pure. (Policy decides; this is how the proxy says it.)
//
// An Outcome is the one value a request's decision travels in, from decide_http to the
// response and the record: the decision (verdict, reason, rule, range), what the later
// stages learned (the refused address, the resolver's words), and the status, RFC 9209 error
// type and text the client is sent. The status, error type and text of every refusal come
// from one table keyed by reason (explain()).
#include <string>
#include <string_view>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/select.hpp"

namespace vibepit::proxy {

// The RFC 9209 error types a proxy reports in its Proxy-Status header, so that clients which
// show only headers (a failed CONNECT in curl -v) see why. The names are the RFC's tokens.
enum class ProxyError {
  http_request_error,         // malformed or unsupported request (400, 408, 431)
  http_request_denied,        // the rules do not allow the destination (403)
  destination_ip_prohibited,  // the address is in a blocked range (403)
  dns_error,                  // the name did not resolve (502)
  dns_timeout,                // the upstream DNS servers did not answer (502)
  connection_refused,         // every address refused the connection (502)
  destination_ip_unroutable,  // no route to any address (502)
  destination_unavailable,    // dialling failed for another reason (502)
  connection_timeout,         // every dial timed out (504)
  connection_terminated,      // the upstream connection broke while sending (502)
  http_response_incomplete,   // the upstream closed early or answered invalidly (502)
  tls_certificate_error,      // an inspected upstream's certificate was refused (502)
  tls_protocol_error,         // TLS with an inspected upstream failed otherwise (502)
  proxy_internal_error,       // the proxy cannot take the request now (503)
};

std::string_view error_token(ProxyError error);

struct Outcome {
  policy::Decision decision;
  std::string addr;    // the address dialled, or for blocked_address the one refused
  std::string detail;  // resolve_failed or a failed dial: the resolver's or socket's words
  int status = 200;    // HTTP status for the client
  ProxyError error = ProxyError::proxy_internal_error;  // when status is not 2xx
  std::string text;                                     // what the client is told when refused
  bool refused() const { return status >= 300; }
};

// `decision` explained for `target` ("host:port" as the client wrote it): a denial gets its
// status, error type and text from the table; an allow gets status 200.
Outcome explain(policy::Decision decision, std::string_view target);
// The name did not resolve: the request was not sent. Keeps the allowing decision's rule.
Outcome resolve_failed(policy::Decision allowed, std::string_view host, std::string detail,
                       bool timed_out);
// Every address the name resolved to is blocked.
Outcome blocked_after_resolution(policy::Decision allowed, std::string_view target,
                                 std::string_view host, const policy::Selection& selection);

// Ask mode: what became of a denied request that was offered for holding and not released.
enum class Unheld {
  client_full,  // not held: this client has ask-max-per-client requests held
  table_full,   // not held: ask-max requests are held
  expired,      // held for ask-timeout-ms, and no allow came
  refused,      // the user refused it while held
  ask_off,      // ask mode was turned off while it was held
  shutdown,     // the proxy is stopping
};
// The not_allowlisted refusal of `target`, saying what became of the hold. `limit` is the
// bound (a count) or the time limit (in milliseconds) that the text names. The record's
// short explanation goes in `detail`.
Outcome unheld(policy::Decision denied, std::string_view target, Unheld how, std::uint64_t limit);

}  // namespace vibepit::proxy
