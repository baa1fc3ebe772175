#pragma once
// Strict HTTP/1.x message-head parsing for the forward proxy. Everything here is pure:
// it reads bytes, it never touches a socket. Views point into the caller's buffer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::http {

struct Header {
  std::string_view name;
  std::string_view value;  // leading and trailing whitespace removed
};

enum class HeadError {
  none,
  too_large,         // head exceeds the limit before its end (431)
  bad_request_line,  // malformed method, target or version
  bad_version,       // not HTTP/1.0 or HTTP/1.1
  bad_header,        // malformed field line or name
  obs_fold,          // a line folded with leading whitespace
  bad_header_bytes,  // a byte not allowed in a field (CTL, NUL, bare CR, ...)
  bad_status_line,   // response only
};

std::string_view describe(HeadError e);

struct RequestHead {
  std::string_view method;
  std::string_view target;
  int version_minor = 1;  // HTTP/1.<minor>
  std::vector<Header> headers;
  std::size_t head_size = 0;  // bytes up to and including the blank line

  // First header with this (case-insensitive) name, or nullopt.
  std::optional<std::string_view> find(std::string_view name) const;
};

struct ResponseHead {
  int version_minor = 1;
  int status = 0;
  std::string_view reason;
  std::vector<Header> headers;
  std::size_t head_size = 0;
  std::optional<std::string_view> find(std::string_view name) const;
};

enum class ParseState { complete, incomplete, error };

struct ParseResult {
  ParseState state = ParseState::incomplete;
  HeadError error = HeadError::none;
};

// Parse the head at the start of `buf`. `incomplete` means read more (unless buf already
// holds max_head bytes, in which case the result is error/too_large). Lines end in CRLF;
// a bare LF line ending is accepted, a bare CR is not.
ParseResult parse_request_head(std::string_view buf, std::size_t max_head, RequestHead& out);
ParseResult parse_response_head(std::string_view buf, std::size_t max_head, ResponseHead& out);

// Byte classes from RFC 9110, shared by the head, framing and chunked parsers.
bool is_tchar(unsigned char c);       // may appear in a token (method, field name, coding)
bool is_field_byte(unsigned char c);  // may appear in a field value: HTAB, SP, VCHAR, obs-text
bool iequals(std::string_view a, std::string_view b);  // ASCII case-insensitive
// The reason phrase for a status that vibepit writes itself; "Error" for any other.
std::string_view reason_phrase(int status);

}  // namespace vibepit::http
