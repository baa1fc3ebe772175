#pragma once
// Request targets and authorities, parsed strictly. A host is either a DNS name
// (normalised) or an IP literal in canonical form; ambiguous numeric hosts are refused.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "vibepit/policy/ip.hpp"

namespace vibepit::http {

struct Authority {
  std::string host;                  // normalised name, or canonical IP text without brackets
  std::optional<policy::IpAddr> ip;  // set when host is an IP literal
  std::uint16_t port = 0;
  std::string display() const;  // "host:port", with brackets around IPv6
};

struct TargetError {
  std::string what;  // e.g. "non-canonical IPv4 address", "missing port", "port out of range"
};

// "host:port" (CONNECT authority-form). The port is required unless default_port is given.
// Rejects userinfo, empty host, bad characters, and numeric hosts that are not a strict
// dotted quad ("2130706433", "0x7f.1", "017700000001", "127.1").
std::variant<Authority, TargetError> parse_authority(std::string_view text,
                                                     std::optional<std::uint16_t> default_port);
// The same into `out`, whose strings keep their capacity: parsing authority after authority
// into one object allocates only when a host outgrows the last. Every field is set anew;
// after an error `out` holds nothing to rely on.
std::optional<TargetError> parse_authority(std::string_view text,
                                           std::optional<std::uint16_t> default_port,
                                           Authority& out);

// The authority of a request target as text fit for a record, for a target that did not
// parse: what lies between the scheme's "//" and the path, query or fragment, after the
// last '@' (no userinfo), at most 256 bytes; "" for origin form ("/path?query"), asterisk
// form and empty targets. No path, query or credential of a request reaches the log.
std::string_view authority_text(std::string_view target);

enum class TargetForm { authority, absolute, origin, asterisk };

struct Target {
  TargetForm form = TargetForm::origin;
  std::string scheme;   // lower case, for absolute form ("http", "https", ...)
  Authority authority;  // for authority and absolute form
  std::string path;     // for absolute form: path and query in origin form ("/" when empty)
};

// Classify and parse a request target. For absolute form, the authority's default port
// follows the scheme (80 for http, 443 for https).
std::variant<Target, TargetError> parse_target(std::string_view method, std::string_view target);
// The same into `out`, as parse_authority's second form: a connection parses each request's
// target into one Target, and a warm keep-alive request allocates nothing for it.
std::optional<TargetError> parse_target(std::string_view method, std::string_view target,
                                        Target& out);

}  // namespace vibepit::http
