// Just enough of an HTTP/1.x response head to frame the body and reuse the connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace vibepit::bench {

struct ResponseHead {
  int status = 0;
  std::optional<std::uint64_t> content_length;
  bool chunked = false;
  bool close = false;  // Connection: close, or HTTP/1.0 without keep-alive
  // The body runs until the peer closes (no length, not chunked, and a status with a body).
  bool until_close() const {
    bool no_body = status / 100 == 1 || status == 204 || status == 304;
    return !no_body && !chunked && !content_length;
  }
  std::uint64_t body_length() const {
    bool no_body = status / 100 == 1 || status == 204 || status == 304;
    return no_body ? 0 : content_length.value_or(0);
  }
};

// Parses a head that ends with "\r\n\r\n"; nullopt when it is not a response head.
std::optional<ResponseHead> parse_response_head(std::string_view head);

}  // namespace vibepit::bench
