#pragma once
// Responses the proxy writes itself.
#include <string>
#include <string_view>

#include "vibepit/proxy/outcome.hpp"

namespace vibepit::proxy {

// The RFC 9209 error types, with the refusal table, are in outcome.hpp.
// The Proxy-Status field value: `vibepit; error=TYPE; details="..."`. The details are the
// message as one line of printable ASCII (RFC 8941 sf-string), at most 512 characters.
std::string proxy_status_value(ProxyError error, std::string_view message);
// A complete response with a short text body that says what happened and what to do,
// and the same text in a Proxy-Status header. `fields`, when given, are further header lines,
// each ending in CRLF.
std::string make_error_response(int status, ProxyError error, std::string_view message, bool close,
                                std::string_view fields = {});

}  // namespace vibepit::proxy
