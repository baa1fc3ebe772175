#pragma once
// Rule sets for the microbenchmarks.
#include <cstdint>
#include <string>

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::bench {

// `n` entries per list, half exact names and half wildcards, each on its own zone.
inline policy::RuleSet rules_of(std::int64_t n) {
  policy::RuleSet rules;
  for (std::int64_t i = 0; i < n; ++i) {
    std::string k = std::to_string(i / 2);
    if (i % 2 == 0) {
      rules.allow_http.push_back("host" + k + ".exact.test:443");
      rules.allow_dns.push_back("host" + k + ".exact.test");
    } else {
      rules.allow_http.push_back("*.zone" + k + ".example.com:8*");
      rules.allow_dns.push_back("*.zone" + k + ".example.com");
    }
  }
  return rules;
}

}  // namespace vibepit::bench
