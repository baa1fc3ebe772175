// IP address and CIDR values. Parsing is strict on purpose: the legacy inet_aton forms
// ("127.1", "0x7f.0.0.1", "2130706433", "017700000001") name loopback to a resolver but
// look like harmless names to a careless check, so they are simply not addresses here.
#include "vibepit/policy/ip.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

#include "ip_detail.hpp"

namespace vibepit::policy {
namespace detail {

bool parse_dotted_quad(std::string_view text, std::array<std::uint8_t, 4>& out) {
  std::size_t pos = 0;
  for (int part = 0; part < 4; ++part) {
    if (part > 0) {
      if (pos >= text.size() || text[pos] != '.') return false;
      ++pos;
    }
    std::size_t start = pos;
    unsigned value = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 3) {
      value = value * 10 + static_cast<unsigned>(text[pos] - '0');
      ++pos;
    }
    std::size_t len = pos - start;
    if (len == 0 || value > 255) return false;
    if (len > 1 && text[start] == '0') return false;  // leading zero: octal in inet_aton
    out[static_cast<std::size_t>(part)] = static_cast<std::uint8_t>(value);
  }
  return pos == text.size();
}

char* write_v4(char* p, const std::uint8_t* b) {
  for (int i = 0; i < 4; ++i) {
    if (i > 0) *p++ = '.';
    unsigned v = b[i];
    if (v >= 100) *p++ = static_cast<char>('0' + v / 100);
    if (v >= 10) *p++ = static_cast<char>('0' + (v / 10) % 10);
    *p++ = static_cast<char>('0' + v % 10);
  }
  return p;
}

void append_v4(std::string& out, const std::uint8_t* b) {
  char buf[16];
  out.append(buf, static_cast<std::size_t>(write_v4(buf, b) - buf));
}

bool prefix_equal(const std::uint8_t* a, const std::uint8_t* b, int prefix) {
  int full = prefix / 8;
  if (std::memcmp(a, b, static_cast<std::size_t>(full)) != 0) return false;
  int rest = prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

bool host_bits_zero(const std::uint8_t* b, int prefix, int bits) {
  for (int bit = prefix; bit < bits; ++bit) {
    if (b[bit / 8] & (0x80 >> (bit % 8))) return false;
  }
  return true;
}

CidrParse parse_cidr(std::string_view text, Cidr& out) {
  auto slash = text.find('/');
  if (slash == std::string_view::npos) return CidrParse::missing_slash;
  auto addr = IpAddr::parse(text.substr(0, slash));
  if (!addr) return CidrParse::bad_address;
  std::string_view digits = text.substr(slash + 1);
  if (digits.empty() || digits.size() > 3) return CidrParse::bad_prefix;
  if (digits.size() > 1 && digits[0] == '0') return CidrParse::bad_prefix;
  int prefix = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return CidrParse::bad_prefix;
    prefix = prefix * 10 + (c - '0');
  }
  out.base = *addr;
  out.prefix = prefix;
  int bits = addr->v6 ? 128 : 32;
  if (prefix > bits) return CidrParse::prefix_range;
  if (!host_bits_zero(addr->bytes.data(), prefix, bits)) return CidrParse::host_bits;
  return CidrParse::ok;
}

Cidr truncate(const IpAddr& addr, int prefix) {
  Cidr c;
  c.base = addr;
  c.prefix = prefix;
  int bits = addr.v6 ? 128 : 32;
  for (int bit = prefix; bit < bits; ++bit) {
    c.base.bytes[static_cast<std::size_t>(bit / 8)] &=
        static_cast<std::uint8_t>(~(0x80 >> (bit % 8)));
  }
  return c;
}

}  // namespace detail

IpAddr IpAddr::v4_from(std::uint32_t host_order) {
  IpAddr a;
  a.bytes[0] = static_cast<std::uint8_t>(host_order >> 24);
  a.bytes[1] = static_cast<std::uint8_t>(host_order >> 16);
  a.bytes[2] = static_cast<std::uint8_t>(host_order >> 8);
  a.bytes[3] = static_cast<std::uint8_t>(host_order);
  return a;
}

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text.find(':') == std::string_view::npos) {
    std::array<std::uint8_t, 4> quad{};
    if (!detail::parse_dotted_quad(text, quad)) return std::nullopt;
    IpAddr a;
    std::memcpy(a.bytes.data(), quad.data(), 4);
    return a;
  }
  // The longest IPv6 text is 45 characters ("ffff:...:255.255.255.255"). Only hex digits,
  // ':' and '.' may appear, so brackets and zone ids ("%eth0") never reach inet_pton.
  if (text.size() > 45) return std::nullopt;
  char buf[46];
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
              c == ':' || c == '.';
    if (!ok) return std::nullopt;
    buf[i] = c;
  }
  buf[text.size()] = '\0';
  // An embedded IPv4 tail must be a strict dotted quad too (glibc already refuses
  // leading zeros there, but say so here rather than depend on it).
  if (auto dot = text.find('.'); dot != std::string_view::npos) {
    auto colon = text.rfind(':');
    std::array<std::uint8_t, 4> quad{};
    if (!detail::parse_dotted_quad(text.substr(colon + 1), quad)) return std::nullopt;
  }
  IpAddr a;
  a.v6 = true;
  if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
  return a;
}

std::string IpAddr::to_string() const {
  char buf[kMaxText];
  return std::string(buf, write(buf));
}

char* IpAddr::write(char* p) const {
  if (!v6) return detail::write_v4(p, bytes.data());
  std::uint16_t words[8];
  for (std::size_t i = 0; i < 8; ++i) {
    words[i] = static_cast<std::uint16_t>(bytes[2 * i] << 8 | bytes[2 * i + 1]);
  }
  // IPv4-mapped addresses keep the dotted tail (RFC 5952 section 5).
  bool mapped = words[0] == 0 && words[1] == 0 && words[2] == 0 && words[3] == 0 && words[4] == 0 &&
                words[5] == 0xffff;
  int n_words = mapped ? 6 : 8;
  // RFC 5952: compress the longest run of two or more zero words, the first on a tie.
  int best = -1, best_len = 0;
  for (int i = 0; i < n_words;) {
    if (words[i] != 0) {
      ++i;
      continue;
    }
    int j = i;
    while (j < n_words && words[j] == 0) ++j;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < 2) best = -1;
  static constexpr char kHex[] = "0123456789abcdef";
  char* const start = p;
  for (int i = 0; i < n_words;) {
    if (i == best) {
      *p++ = ':';
      *p++ = ':';
      i += best_len;
      continue;
    }
    if (i > 0 && i != best + best_len) *p++ = ':';  // after "::" no separator is needed
    unsigned w = words[i];
    bool started = false;
    for (int shift = 12; shift >= 0; shift -= 4) {
      unsigned nib = (w >> shift) & 0xf;
      if (nib != 0 || started || shift == 0) {
        *p++ = kHex[nib];
        started = true;
      }
    }
    ++i;
  }
  if (mapped) {
    if (p == start || p[-1] != ':') *p++ = ':';
    p = detail::write_v4(p, bytes.data() + 12);
  }
  return p;
}

std::optional<Cidr> Cidr::parse(std::string_view text) {
  Cidr c;
  if (detail::parse_cidr(text, c) != detail::CidrParse::ok) return std::nullopt;
  return c;
}

bool Cidr::contains(const IpAddr& addr) const {
  if (addr.v6 != base.v6) return false;
  return detail::prefix_equal(addr.bytes.data(), base.bytes.data(), prefix);
}

std::string Cidr::to_string() const {
  std::string out = base.to_string();
  out += '/';
  out += std::to_string(prefix);
  return out;
}

void append_bracketed_host(std::string& out, std::string_view host) {
  if (host.find(':') == std::string_view::npos) {
    out.append(host);
    return;
  }
  out.push_back('[');
  out.append(host);
  out.push_back(']');
}

void append_host_port(std::string& out, std::string_view host, std::uint16_t port) {
  append_bracketed_host(out, host);
  char digits[6];
  const auto end = std::to_chars(digits, digits + sizeof digits, port).ptr;
  out.push_back(':');
  out.append(digits, static_cast<std::size_t>(end - digits));
}

std::string bracket_host(std::string_view host) {
  std::string out;
  out.reserve(host.size() + 2);
  append_bracketed_host(out, host);
  return out;
}

std::string join_host_port(std::string_view host, std::uint16_t port) {
  std::string out;
  out.reserve(host.size() + 8);
  append_host_port(out, host, port);
  return out;
}

}  // namespace vibepit::policy
