#pragma once
// Proxy-Authorization with the Basic scheme (RFC 7617, RFC 9110 11.7.1): how a client of a
// shared gateway says which tenant it is. Every HTTP client sends it from a proxy URL with
// a user and password (HTTP_PROXY=http://NAME:TOKEN@host:port). Pure.
#include <cstddef>
#include <span>
#include <string_view>

namespace vibepit::http {

enum class BasicError {
  none,
  not_basic,   // another scheme, or no credentials after "Basic"
  bad_base64,  // not the standard alphabet with its padding
  too_long,    // decodes to more than the buffer holds
  no_colon,    // the decoded text has no ':' between user and password
  control,     // the decoded text has a control byte (RFC 7617: none in user or password)
};

std::string_view describe(BasicError e);

struct BasicCredentials {
  BasicError error = BasicError::none;
  std::string_view user;      // before the first ':'; a view into the caller's buffer
  std::string_view password;  // after it
};

// Decodes a Proxy-Authorization value into `buf` (which the caller wipes when done: the
// password is a secret). The scheme is matched without regard to case; the credentials are
// one token68, with surrounding spaces allowed. A decoded length past buf.size() is
// too_long, whatever the rest.
BasicCredentials parse_basic(std::string_view value, std::span<char> buf);

}  // namespace vibepit::http
