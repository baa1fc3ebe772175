#pragma once
// DNS query type names, as the configuration (dns-qtypes) and the decision log write them.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vibepit::policy {

// "A" -> 1, "TYPE65" -> 65 (RFC 3597); nullopt for names we do not know.
std::optional<std::uint16_t> dns_type_from_name(std::string_view name);
std::string dns_type_name(std::uint16_t type);  // 1 -> "A", 65280 -> "TYPE65280"

}  // namespace vibepit::policy
