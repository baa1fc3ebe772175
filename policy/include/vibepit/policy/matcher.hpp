#pragma once
// Rule matching whose cost does not grow with the number of rules: a hash of exact names
// plus a hash of wildcard suffixes, walked label by label from the query name.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vibepit/policy/rules.hpp"

namespace vibepit::policy {

class DnsMatcher {
 public:
  // Returns false (and changes nothing) when an equal rule is already present.
  bool add(DnsRule rule);
  // `name` must already be normalised (normalize_name). nullptr when nothing matches.
  const DnsRule* match(std::string_view name) const;
  std::size_t size() const { return count_; }

 private:
  std::unordered_map<std::string, DnsRule> exact_;
  std::unordered_map<std::string, DnsRule> suffix_;  // key: the suffix after "*."
  std::size_t count_ = 0;
};

class HttpMatcher {
 public:
  bool add(HttpRule rule);
  // `host` is a normalised name or canonical IP text (IpAddr::to_string, no brackets).
  const HttpRule* match(std::string_view host, std::uint16_t port) const;
  std::size_t size() const { return count_; }

 private:
  // Several port globs may share one name, so each key holds a short list.
  std::unordered_map<std::string, std::vector<HttpRule>> exact_;
  std::unordered_map<std::string, std::vector<HttpRule>> suffix_;
  std::size_t count_ = 0;
};

}  // namespace vibepit::policy
