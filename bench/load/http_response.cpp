#include "http_response.hpp"

#include <charconv>

namespace vibepit::bench {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

bool icontains(std::string_view hay, std::string_view needle) {
  for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (iequals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<ResponseHead> parse_response_head(std::string_view head) {
  // "HTTP/1.x SSS reason\r\n"
  if (head.size() < 12 || head.substr(0, 7) != "HTTP/1." || head[8] != ' ') return std::nullopt;
  ResponseHead r;
  auto code = head.substr(9, 3);
  auto [p, ec] = std::from_chars(code.data(), code.data() + 3, r.status);
  if (ec != std::errc() || p != code.data() + 3 || r.status < 100) return std::nullopt;
  bool http10 = head[7] == '0';
  bool keep_alive = false;

  auto pos = head.find("\r\n");
  while (pos != std::string_view::npos) {
    auto start = pos + 2;
    auto end = head.find("\r\n", start);
    if (end == std::string_view::npos || end == start) break;
    auto line = head.substr(start, end - start);
    pos = end;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    auto name = line.substr(0, colon);
    auto value = trim(line.substr(colon + 1));
    if (iequals(name, "content-length")) {
      std::uint64_t n = 0;
      auto [q, e] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (e != std::errc() || q != value.data() + value.size()) return std::nullopt;
      if (r.content_length && *r.content_length != n) return std::nullopt;
      r.content_length = n;
    } else if (iequals(name, "transfer-encoding")) {
      r.chunked = icontains(value, "chunked");
    } else if (iequals(name, "connection")) {
      if (icontains(value, "close")) r.close = true;
      if (icontains(value, "keep-alive")) keep_alive = true;
    }
  }
  if (http10 && !keep_alive) r.close = true;
  return r;
}

}  // namespace vibepit::bench
