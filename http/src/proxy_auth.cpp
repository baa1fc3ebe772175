#include "vibepit/http/proxy_auth.hpp"

#include <cstdint>

namespace vibepit::http {
namespace {

// The value of a base64 character, or -1.
int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

BasicCredentials fail(BasicError e) {
  BasicCredentials c;
  c.error = e;
  return c;
}

}  // namespace

std::string_view describe(BasicError e) {
  switch (e) {
    case BasicError::none:
      return "no error";
    case BasicError::not_basic:
      return "not the Basic scheme";
    case BasicError::bad_base64:
      return "the credentials are not base64";
    case BasicError::too_long:
      return "the credentials are too long";
    case BasicError::no_colon:
      return "the credentials have no ':' between name and token";
    case BasicError::control:
      return "the credentials have a control character";
  }
  return "unknown error";
}

BasicCredentials parse_basic(std::string_view value, std::span<char> buf) {
  value = trim(value);
  constexpr std::string_view kScheme = "basic";
  if (value.size() <= kScheme.size() || !space(value[kScheme.size()])) {
    return fail(BasicError::not_basic);
  }
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    const char c = value[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c) != kScheme[i])
      return fail(BasicError::not_basic);
  }
  std::string_view b64 = trim(value.substr(kScheme.size()));
  if (b64.empty()) return fail(BasicError::not_basic);
  if (b64.size() % 4 != 0) return fail(BasicError::bad_base64);
  std::size_t pad = 0;
  if (b64.back() == '=') pad = b64[b64.size() - 2] == '=' ? 2 : 1;
  const std::size_t out_size = b64.size() / 4 * 3 - pad;
  if (out_size > buf.size()) return fail(BasicError::too_long);
  std::size_t o = 0;
  for (std::size_t i = 0; i < b64.size(); i += 4) {
    const bool last = i + 4 == b64.size();
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = b64[i + k];
      int s = sextet(c);
      if (s < 0) {
        // '=' only as the last one or two characters of the last group.
        if (c != '=' || !last || k < 4 - pad) return fail(BasicError::bad_base64);
        s = 0;
      }
      v = v << 6 | static_cast<std::uint32_t>(s);
    }
    const char bytes[3] = {static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    const std::size_t n = last ? 3 - pad : 3;
    // Padding bits must be zero: one text, one encoding.
    if (last && pad > 0 && (v & ((1u << (8 * pad)) - 1)) != 0) return fail(BasicError::bad_base64);
    for (std::size_t k = 0; k < n; ++k) buf[o++] = bytes[k];
  }
  const std::string_view text(buf.data(), o);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return fail(BasicError::control);
  }
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return fail(BasicError::no_colon);
  BasicCredentials c;
  c.user = text.substr(0, colon);
  c.password = text.substr(colon + 1);
  return c;
}

}  // namespace vibepit::http
