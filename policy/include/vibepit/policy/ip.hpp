#pragma once
// IP addresses and CIDR ranges as plain values: no sockets, no resolver.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vibepit::policy {

// An IPv4 or IPv6 address. IPv4 uses bytes[0..3]; the rest are zero.
// "host:port", with an IPv6 literal (any host holding a ':') in brackets: "[::1]:53".
std::string join_host_port(std::string_view host, std::uint16_t port);
// `host` in brackets when it is IPv6 text ("[2001:db8::1]"), else as it is.
std::string bracket_host(std::string_view host);
// The same two, appended to `out` (no string of their own).
void append_host_port(std::string& out, std::string_view host, std::uint16_t port);
void append_bracketed_host(std::string& out, std::string_view host);

struct IpAddr {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};

  static IpAddr v4_from(std::uint32_t host_order);
  // Strict parse: dotted-quad IPv4 (exactly four decimal parts, no leading zeros,
  // each 0..255) or an IPv6 text form (no brackets, no zone id). Anything else is nullopt,
  // so "2130706433", "0x7f.1", "017700000001" and "127.1" are rejected.
  static std::optional<IpAddr> parse(std::string_view text);
  std::string to_string() const;  // canonical text (RFC 5952 for IPv6)
  // The longest canonical text: "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255".
  static constexpr std::size_t kMaxText = 45;
  // Writes the canonical text to [out, out + kMaxText) and returns its end: no string, no
  // allocation (the decision log's writer formats every record's addresses).
  char* write(char* out) const;
  friend bool operator==(const IpAddr&, const IpAddr&) = default;
};

// For maps keyed by address (the per-client state of rate limits and folded records).
struct IpAddrHash {
  std::size_t operator()(const IpAddr& a) const noexcept {
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(a.bytes.data()), a.bytes.size()));
  }
};

// A CIDR range such as "10.0.0.0/8" or "fc00::/7".
struct Cidr {
  IpAddr base;  // host bits are zero
  int prefix = 0;

  // Strict parse: ADDR/PREFIX with the prefix in range and no host bits set.
  static std::optional<Cidr> parse(std::string_view text);
  bool contains(const IpAddr& addr) const;  // false when the families differ
  std::string to_string() const;
  friend bool operator==(const Cidr&, const Cidr&) = default;
};

}  // namespace vibepit::policy
