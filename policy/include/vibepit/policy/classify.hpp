#pragma once
// Address classification: the second pure stage of every decision. Every resolved
// address and every IP literal passes through classify() before it may be dialled.
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/ip.hpp"

namespace vibepit::policy {

struct Classification {
  bool blocked = false;
  std::string range;      // the range that blocked it, e.g. "10.0.0.0/8"; empty when allowed
  std::string_view kind;  // "private", "loopback", "link-local", "block-cidr", ...; empty when allowed
  // For IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo):
  // the embedded address that was judged. Empty otherwise.
  std::string embedded;
};

// The ranges that no setting can unblock.
const std::vector<Cidr>& always_blocked_ranges();
// The special-purpose ranges blocked by default.
const std::vector<Cidr>& default_blocked_ranges();

class Classifier {
 public:
  Classifier() = default;
  explicit Classifier(std::vector<Cidr> extra_blocked);  // the `block-cidr` config key

  Classification classify(const IpAddr& addr) const;
  const std::vector<Cidr>& extra_blocked() const { return extra_; }

 private:
  std::vector<Cidr> extra_;
};

}  // namespace vibepit::policy
