#include "vibepit/proxy/response.hpp"

#include "vibepit/http/head.hpp"

namespace vibepit::proxy {

std::string proxy_status_value(ProxyError error, std::string_view message) {
  constexpr std::size_t kMaxDetails = 512;
  std::string out = "vibepit; error=";
  out += error_token(error);
  out += "; details=\"";
  std::size_t kept = 0;
  bool space = false;
  for (char c : message) {
    if (kept >= kMaxDetails) break;
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = kept > 0;  // runs of white space become one space; none leading
      continue;
    }
    if (c < 0x21 || c > 0x7e) continue;  // sf-string: printable ASCII only
    if (space) {
      out += ' ';
      ++kept;
      space = false;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
    ++kept;
  }
  out += '"';
  return out;
}

std::string make_error_response(int status, ProxyError error, std::string_view message, bool close,
                                std::string_view fields) {
  std::string body = "vibepit: ";
  body += message;
  body += '\n';
  std::string out = "HTTP/1.1 " + std::to_string(status) + " ";
  out += http::reason_phrase(status);
  out += "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ";
  out += std::to_string(body.size());
  out += "\r\nCache-Control: no-store\r\nProxy-Status: ";
  out += proxy_status_value(error, message);
  out += "\r\n";
  out += fields;
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  out += body;
  return out;
}

}  // namespace vibepit::proxy
