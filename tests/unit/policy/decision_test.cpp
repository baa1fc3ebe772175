// decide_http and decide_dns over one compiled snapshot.
#include <gtest/gtest.h>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/select.hpp"

#include <vector>

namespace vibepit::policy {
namespace {

std::shared_ptr<const Snapshot> snapshot(Mode mode = Mode::enforce) {
  RuleSet rules;
  rules.mode = mode;
  rules.allow_http = {"example.com:443",         "*.example.com:8*", "203.0.113.7:443",
                      "[2001:db8::1]:443",       "100.64.0.1:443",   "198.51.100.7:443",
                      "[::ffff:203.0.113.9]:443"};
  rules.allow_dns = {"example.com", "*.wild.test"};
  rules.block_cidr = {"198.51.100.0/24"};
  return std::get<std::shared_ptr<const Snapshot>>(compile(rules, 1));
}

TEST(DecisionTest, Http) {
  auto snap = snapshot();
  struct Case {
    std::string_view host;
    std::uint16_t port;
    Verdict verdict;
    Reason reason;
    std::string_view rule;
    std::string_view range;
  } cases[] = {
      {"example.com", 443, Verdict::allow, Reason::allowlisted, "example.com:443", ""},   // exact
      {"Example.COM.", 443, Verdict::allow, Reason::allowlisted, "example.com:443", ""},  // norm.
      {"example.com", 80, Verdict::deny, Reason::not_allowlisted, "", ""},  // port misses
      {"a.b.example.com", 8080, Verdict::allow, Reason::allowlisted, "*.example.com:8*", ""},
      {"other.test", 443, Verdict::deny, Reason::not_allowlisted, "", ""},               // no rule
      {"203.0.113.7", 443, Verdict::allow, Reason::allowlisted, "203.0.113.7:443", ""},  // IP
      {"203.0.113.8", 443, Verdict::deny, Reason::not_allowlisted, "", ""},              // other IP
      {"2001:db8::1", 443, Verdict::allow, Reason::allowlisted, "[2001:db8::1]:443", ""},
      {"2001:DB8:0::1", 443, Verdict::allow, Reason::allowlisted, "[2001:db8::1]:443", ""},
      {"[2001:db8::1]", 443, Verdict::allow, Reason::allowlisted, "[2001:db8::1]:443", ""},
      {"::ffff:203.0.113.9", 443, Verdict::allow, Reason::allowlisted, "[::ffff:203.0.113.9]:443",
       ""},  // mapped, public
      {"127.0.0.1", 443, Verdict::deny, Reason::blocked_address, "", "127.0.0.0/8"},  // loopback
      {"10.0.0.1", 443, Verdict::deny, Reason::blocked_address, "", "10.0.0.0/8"},    // private
      {"::1", 443, Verdict::deny, Reason::blocked_address, "", "::1/128"},            // loopback
      {"::ffff:169.254.169.254", 80, Verdict::deny, Reason::blocked_address, "",
       "169.254.0.0/16"},  // mapped metadata
      {"100.64.0.1", 443, Verdict::deny, Reason::blocked_address, "",
       "100.64.0.0/10"},  // allowlisted, yet default-blocked: classification comes first
      {"198.51.100.7", 443, Verdict::deny, Reason::blocked_address, "",
       "198.51.100.0/24"},  // allowlisted, yet in block-cidr
      {"127.1", 443, Verdict::deny, Reason::invalid_target, "", ""},            // short IPv4
      {"0x7f.0.0.1", 443, Verdict::deny, Reason::invalid_target, "", ""},       // hex IPv4
      {"2130706433", 443, Verdict::deny, Reason::invalid_target, "", ""},       // integer IPv4
      {"", 443, Verdict::deny, Reason::invalid_target, "", ""},                 // empty host
      {"example.com", 0, Verdict::deny, Reason::invalid_target, "", ""},        // port 0
      {"exa mple.com", 443, Verdict::deny, Reason::invalid_target, "", ""},     // space
      {"a..example.com", 8080, Verdict::deny, Reason::invalid_target, "", ""},  // empty label
      {".example.com", 8080, Verdict::deny, Reason::invalid_target, "", ""},    // leading dot
      {"fe80::1%eth0", 443, Verdict::deny, Reason::invalid_target, "", ""},     // zone id
  };
  for (const auto& c : cases) {
    Decision d = decide_http(c.host, c.port, *snap);
    EXPECT_EQ(d.verdict, c.verdict) << c.host << ":" << c.port;
    EXPECT_EQ(d.reason, c.reason) << c.host << ":" << c.port << " " << to_string(d.reason);
    EXPECT_EQ(d.rule, c.rule) << c.host << ":" << c.port;
    EXPECT_EQ(d.range, c.range) << c.host << ":" << c.port;
  }
}

TEST(DecisionTest, Dns) {
  auto snap = snapshot();
  struct Case {
    std::string_view qname;
    Verdict verdict;
    Reason reason;
    std::string_view rule;
  } cases[] = {
      {"example.com", Verdict::allow, Reason::allowlisted, "example.com"},    // exact
      {"EXAMPLE.com.", Verdict::allow, Reason::allowlisted, "example.com"},   // normalised
      {"www.example.com", Verdict::deny, Reason::not_allowlisted, ""},        // exact only
      {"a.b.wild.test", Verdict::allow, Reason::allowlisted, "*.wild.test"},  // wildcard depth
      {"wild.test", Verdict::deny, Reason::not_allowlisted, ""},              // apex
      {"203.0.113.7", Verdict::deny, Reason::invalid_target, ""},             // not a name
      {"", Verdict::deny, Reason::invalid_target, ""},                        // empty
      {"a..wild.test", Verdict::deny, Reason::invalid_target, ""},            // empty label
  };
  for (const auto& c : cases) {
    Decision d = decide_dns(c.qname, *snap);
    EXPECT_EQ(d.verdict, c.verdict) << c.qname;
    EXPECT_EQ(d.reason, c.reason) << c.qname;
    EXPECT_EQ(d.rule, c.rule) << c.qname;
    EXPECT_EQ(d.range, "") << c.qname;
  }
}

// Audit mode: what no rule matched goes ahead, marked would_deny; what no rule could ever
// allow (blocked ranges, block-cidr, unparsable targets) is denied exactly as in enforce.
TEST(DecisionTest, AuditHttp) {
  auto snap = snapshot(Mode::audit);
  struct Case {
    std::string_view host;
    std::uint16_t port;
    Verdict verdict;
    Reason reason;
    bool would_deny;
  } cases[] = {
      {"example.com", 443, Verdict::allow, Reason::allowlisted, false},        // a rule matches
      {"example.com", 80, Verdict::allow, Reason::not_allowlisted, true},      // port misses
      {"other.test", 443, Verdict::allow, Reason::not_allowlisted, true},      // no rule
      {"203.0.113.8", 443, Verdict::allow, Reason::not_allowlisted, true},     // public IP, no rule
      {"127.0.0.1", 443, Verdict::deny, Reason::blocked_address, false},       // loopback
      {"10.0.0.1", 443, Verdict::deny, Reason::blocked_address, false},        // private canary
      {"169.254.169.254", 80, Verdict::deny, Reason::blocked_address, false},  // metadata
      {"fd00::1", 443, Verdict::deny, Reason::blocked_address, false},         // ULA
      {"100.64.0.1", 443, Verdict::deny, Reason::blocked_address, false},      // default-blocked
      {"198.51.100.9", 443, Verdict::deny, Reason::blocked_address, false},    // block-cidr
      {"127.1", 443, Verdict::deny, Reason::invalid_target, false},            // short IPv4
      {"", 443, Verdict::deny, Reason::invalid_target, false},                 // empty host
      {"example.com", 0, Verdict::deny, Reason::invalid_target, false},        // port 0
  };
  for (const auto& c : cases) {
    Decision d = decide_http(c.host, c.port, *snap);
    EXPECT_EQ(d.verdict, c.verdict) << c.host << ":" << c.port;
    EXPECT_EQ(d.reason, c.reason) << c.host << ":" << c.port << " " << to_string(d.reason);
    EXPECT_EQ(d.would_deny, c.would_deny) << c.host << ":" << c.port;
  }
}

TEST(DecisionTest, AuditDns) {
  auto snap = snapshot(Mode::audit);
  struct Case {
    std::string_view qname;
    Verdict verdict;
    Reason reason;
    bool would_deny;
  } cases[] = {
      {"example.com", Verdict::allow, Reason::allowlisted, false},         // a rule matches
      {"www.example.com", Verdict::allow, Reason::not_allowlisted, true},  // no rule
      {"203.0.113.7", Verdict::deny, Reason::invalid_target, false},       // not a name
      {"a..wild.test", Verdict::deny, Reason::invalid_target, false},      // empty label
  };
  for (const auto& c : cases) {
    Decision d = decide_dns(c.qname, *snap);
    EXPECT_EQ(d.verdict, c.verdict) << c.qname;
    EXPECT_EQ(d.reason, c.reason) << c.qname;
    EXPECT_EQ(d.would_deny, c.would_deny) << c.qname;
  }
}

TEST(DecisionTest, EnforceNeverMarksWouldDeny) {
  auto snap = snapshot(Mode::enforce);
  EXPECT_FALSE(decide_http("other.test", 443, *snap).would_deny);
  EXPECT_FALSE(decide_dns("other.test", *snap).would_deny);
}

TEST(DecisionTest, ModeNames) {
  EXPECT_EQ(to_string(Mode::enforce), "enforce");
  EXPECT_EQ(to_string(Mode::audit), "audit");
  EXPECT_EQ(parse_mode("audit"), Mode::audit);
  EXPECT_EQ(parse_mode("enforce"), Mode::enforce);
  EXPECT_EQ(parse_mode("Audit"), std::nullopt);
  EXPECT_EQ(parse_mode(""), std::nullopt);
}

TEST(DecisionTest, EmptySnapshotDeniesEverything) {
  Snapshot empty;
  EXPECT_EQ(decide_http("example.com", 443, empty).reason, Reason::not_allowlisted);
  EXPECT_EQ(decide_http("203.0.113.7", 443, empty).reason, Reason::not_allowlisted);
  EXPECT_EQ(decide_dns("example.com", empty).reason, Reason::not_allowlisted);
}

TEST(DecisionTest, Names) {
  EXPECT_EQ(to_string(Verdict::allow), "allow");
  EXPECT_EQ(to_string(Verdict::deny), "deny");
  EXPECT_EQ(to_string(Reason::allowlisted), "allowlisted");
  EXPECT_EQ(to_string(Reason::not_allowlisted), "not_allowlisted");
  EXPECT_EQ(to_string(Reason::blocked_address), "blocked_address");
  EXPECT_EQ(to_string(Reason::resolve_failed), "resolve_failed");
  EXPECT_EQ(to_string(Reason::invalid_target), "invalid_target");
}

}  // namespace
}  // namespace vibepit::policy

namespace vibepit::policy {
namespace {

// The addresses a name resolved to: every blocked one is refused, the first named with its
// range; the rest are kept in the resolver's order, at most `limit` of them.
TEST(SelectDialable, RefusesEveryBlockedAddressAndKeepsTheOrder) {
  Classifier classifier;
  const std::vector<IpAddr> addrs = {*IpAddr::parse("198.51.100.7"), *IpAddr::parse("10.0.0.1"),
                                     *IpAddr::parse("203.0.113.9"), *IpAddr::parse("127.0.0.1"),
                                     *IpAddr::parse("198.51.100.8")};
  const Selection s = select_dialable(addrs, classifier, 2);
  ASSERT_EQ(s.dialable.size(), 2u);
  EXPECT_EQ(s.dialable[0].to_string(), "198.51.100.7");
  EXPECT_EQ(s.dialable[1].to_string(), "203.0.113.9");
  ASSERT_TRUE(s.first_blocked.has_value());
  EXPECT_EQ(s.first_blocked->to_string(), "10.0.0.1");
  EXPECT_FALSE(s.range.empty());

  const std::vector<IpAddr> blocked = {*IpAddr::parse("169.254.169.254"), *IpAddr::parse("::1")};
  const Selection none = select_dialable(blocked, classifier, 8);
  EXPECT_TRUE(none.dialable.empty());
  EXPECT_EQ(none.first_blocked->to_string(), "169.254.169.254");
}

}  // namespace
}  // namespace vibepit::policy
