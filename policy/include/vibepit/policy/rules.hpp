#pragma once
// The rule grammar (ARCHITECTURE.md "Rule grammar"): parsing and validation only.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/name.hpp"
#include "vibepit/policy/request_rule.hpp"

namespace vibepit::policy {

// Why an entry was rejected. message() names the entry and the rule it breaks, e.g.
//   allow-http entry "*.:443": empty label in domain
struct RuleError {
  std::string list;   // "allow-http", "allow-dns" or "block-cidr"
  std::string entry;  // the entry as given
  std::string what;   // what is wrong
  std::string message() const;
};

// A domain pattern: `example.com` (exact) or `*.example.com` (any subdomain, not the apex).
struct DomainPattern {
  std::string name;  // normalised: ASCII lower case, no trailing dot; for a wildcard, the suffix
  bool wildcard = false;
  std::string to_string() const;  // canonical text: "example.com" or "*.example.com"
};

struct DnsRule {
  DomainPattern domain;
  std::string text;  // canonical entry text
};

struct HttpRule {
  enum class Kind { domain, ip };
  Kind kind = Kind::domain;
  DomainPattern domain;   // when kind == domain
  IpAddr ip;              // when kind == ip
  std::string port_glob;  // digits and '*', e.g. "443", "8*", "*"
  // Methods and a path glob (`api.github.com:443 GET,HEAD /repos/acme/**`): the rule allows
  // only the requests they match, and its host:port is inspected. None: a plain rule, which
  // allows every request and tunnel to its host:port.
  std::optional<RequestRule> request;
  // Canonical entry text, e.g. "*.example.com:443", "[2001:db8::1]:443",
  // "api.github.com:443 GET,HEAD /repos/acme/**".
  std::string text;
};

std::variant<DnsRule, RuleError> parse_dns_rule(std::string_view entry);
// `DOMAIN:PORT`, or `DOMAIN:PORT METHODS PATH` (one space between the three parts). Also
// rejects an IP literal inside an always-blocked range, naming the range.
std::variant<HttpRule, RuleError> parse_http_rule(std::string_view entry);
std::variant<Cidr, RuleError> parse_block_cidr(std::string_view entry);

// True when the decimal port matches a glob of digits and '*' ('*' matches any run of digits).
bool port_glob_matches(std::string_view glob, std::uint16_t port);

}  // namespace vibepit::policy
