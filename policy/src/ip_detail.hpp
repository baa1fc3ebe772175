#pragma once
// Helpers shared by the policy sources; not part of the public interface.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "vibepit/policy/ip.hpp"

namespace vibepit::policy::detail {

// Exactly four decimal parts, each 0..255, no leading zeros, nothing else.
bool parse_dotted_quad(std::string_view text, std::array<std::uint8_t, 4>& out);
// Writes the dotted-quad text of four bytes (at most 15 characters) at p; returns its end.
char* write_v4(char* p, const std::uint8_t* b);
// Appends the dotted-quad text of four bytes (no allocation beyond `out`).
void append_v4(std::string& out, const std::uint8_t* b);
// True when the first `prefix` bits of a and b are equal.
bool prefix_equal(const std::uint8_t* a, const std::uint8_t* b, int prefix);
// True when every bit from `prefix` to `bits` is zero.
bool host_bits_zero(const std::uint8_t* b, int prefix, int bits);

enum class CidrParse { ok, missing_slash, bad_address, bad_prefix, prefix_range, host_bits };
// Parses ADDR/PREFIX into `out`. On prefix_range and host_bits, `out` holds what was read.
CidrParse parse_cidr(std::string_view text, Cidr& out);
// The range of length `prefix` that contains `addr` (host bits cleared).
Cidr truncate(const IpAddr& addr, int prefix);

}  // namespace vibepit::policy::detail
