#include "vibepit/policy/dns_types.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace vibepit::policy {

namespace {
constexpr std::pair<std::string_view, std::uint16_t> kDnsTypes[] = {
    {"A", 1},      {"NS", 2},     {"CNAME", 5},   {"SOA", 6},   {"PTR", 12},   {"HINFO", 13},
    {"MX", 15},    {"TXT", 16},   {"AAAA", 28},   {"SRV", 33},  {"NAPTR", 35}, {"DS", 43},
    {"SSHFP", 44}, {"RRSIG", 46}, {"DNSKEY", 48}, {"TLSA", 52}, {"SVCB", 64},  {"HTTPS", 65},
    {"IXFR", 251}, {"AXFR", 252}, {"ANY", 255},   {"CAA", 257},
};
}  // namespace

std::optional<std::uint16_t> dns_type_from_name(std::string_view name) {
  for (const auto& [text, type] : kDnsTypes) {
    if (name == text) return type;
  }
  // RFC 3597 generic form: TYPE1 .. TYPE65535, no leading zero.
  if (name.size() > 4 && name.size() <= 9 && name.starts_with("TYPE") && name[4] != '0') {
    std::uint32_t n = 0;
    for (char c : name.substr(4)) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (n <= 65535) return static_cast<std::uint16_t>(n);
  }
  return std::nullopt;
}

std::string dns_type_name(std::uint16_t type) {
  for (const auto& [text, t] : kDnsTypes) {
    if (t == type) return std::string(text);
  }
  return "TYPE" + std::to_string(type);
}

}  // namespace vibepit::policy
