// The FORWARD rule of a session's bridge: what is inserted, and finding it again in
// `iptables -S FORWARD` (iptables-nft 1.8.9 quotes the comment, legacy does not), never
// someone else's rule.
#include "vibepit/launcher/session/bridge_rule.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace vibepit::launcher;
using Args = std::vector<std::string>;

TEST(BridgeRuleTest, OnlyTrafficThatEntersAndLeavesTheOneBridge) {
  EXPECT_EQ(bridge_rule_args("-I", "podman1", "0123456789ab"),
            (Args{"-w", "5", "-I", "FORWARD", "-i", "podman1", "-o", "podman1", "-m", "comment",
                  "--comment", "vibepit-session:0123456789ab", "-j", "ACCEPT"}));
  for (const char* bad : {"", "podman1 -j", "a/b", "0123456789abcdef", "-o", "x;y"})
    EXPECT_THROW(bridge_rule_args("-I", bad, "s"), std::invalid_argument) << bad;
}

TEST(BridgeRuleTest, FindsTheRulesItMadeAndNoOthers) {
  const std::string listing =
      "-P FORWARD DROP\n"
      "-A FORWARD -i podman1 -o podman1 -m comment --comment \"vibepit-session:aaa\" -j "
      "ACCEPT\n"
      "-A FORWARD -j NETAVARK_ISOLATION_1\n"
      "-A FORWARD -j DOCKER-USER\n"
      "-A FORWARD -i br-x -o br-x -j ACCEPT\n"  // Docker's
      "-A FORWARD -i podman2 -o podman3 -m comment --comment vibepit-session:b -j ACCEPT\n"  // not
                                                                                             // ours
      "-A FORWARD -i podman4 -o podman4 -m comment --comment other:b -j ACCEPT\n"
      "-A FORWARD -i podman5 -o podman5 -m comment --comment vibepit-session:bbb -j DROP\n"
      "-A FORWARD -i podman9 -o podman9 -m comment --comment vibepit-session:ccc -j ACCEPT";
  const auto rules = bridge_rules_in(listing);
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].first, "aaa");
  EXPECT_EQ(rules[0].second, bridge_rule_args("-D", "podman1", "aaa"));
  EXPECT_EQ(rules[1].first, "ccc");
  EXPECT_EQ(rules[1].second, bridge_rule_args("-D", "podman9", "ccc"));
  EXPECT_TRUE(bridge_rules_in("").empty());
}
