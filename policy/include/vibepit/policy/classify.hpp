#pragma once
// Address classification: the second pure stage of every decision. Every resolved
// address and every IP literal passes through classify() before it may be dialled.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/ip.hpp"

namespace vibepit::policy {

struct Classification {
  bool blocked = false;
  std::string range;  // the range that blocked it, e.g. "10.0.0.0/8"; empty when allowed
  std::string_view
      kind;  // "private", "loopback", "link-local", "block-cidr", ...; empty when allowed
  // For IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo):
  // the embedded address that was judged. Empty otherwise.
  std::string embedded;
};

// The ranges that no setting can unblock.
const std::vector<Cidr>& always_blocked_ranges();
// The special-purpose ranges blocked by default.
const std::vector<Cidr>& default_blocked_ranges();

// Judges `addr` (and any IPv4 address it embeds) against the always-blocked ranges only.
// Used to refuse an allow-http IP literal at load.
Classification classify_always_blocked(const IpAddr& addr);

class Classifier {
 public:
  Classifier() = default;
  explicit Classifier(std::vector<Cidr> extra_blocked);  // the `block-cidr` config key

  Classification classify(const IpAddr& addr) const;
  const std::vector<Cidr>& extra_blocked() const { return extra_; }

 private:
  friend Classification classify_always_blocked(const IpAddr& addr);
  Classification classify_impl(const IpAddr& addr, bool always_only) const;
  bool judge_v4(std::uint32_t addr, bool always_only, Classification& out) const;

  struct V4Range {
    std::uint32_t base;
    std::uint32_t mask;
    std::size_t index;  // into extra_
  };
  std::vector<Cidr> extra_;
  std::vector<V4Range> extra_v4_;      // the IPv4 part of extra_, as masks
  std::vector<std::size_t> extra_v6_;  // indices of the IPv6 part of extra_
};

}  // namespace vibepit::policy
