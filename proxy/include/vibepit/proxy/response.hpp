#pragma once
// Responses the proxy writes itself.
#include <string>
#include <string_view>

namespace vibepit::proxy {

// The RFC 9209 error types the proxy reports in its Proxy-Status header, so that clients
// which show only headers (a failed CONNECT in curl -v, a browser's proxy error page) see
// why. The names are the RFC's tokens.
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
  proxy_internal_error,       // the proxy cannot take the request now (503)
};

std::string_view error_token(ProxyError error);
// The Proxy-Status field value: `vibepit; error=TYPE; details="..."`. The details are the
// message as one line of printable ASCII (RFC 8941 sf-string), at most 512 characters.
std::string proxy_status_value(ProxyError error, std::string_view message);
// A complete response with a short text body that says what happened and what to do,
// and the same text in a Proxy-Status header.
std::string make_error_response(int status, ProxyError error, std::string_view message, bool close);

}  // namespace vibepit::proxy
