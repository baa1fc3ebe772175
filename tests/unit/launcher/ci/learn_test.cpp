// Rule learning: one row per job, the destinations it used and the rules proposed.
#include <gtest/gtest.h>

#include "vibepit/launcher/ci/learn.hpp"
#include "vibepit/launcher/rules/network_file.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::launcher {
namespace {

Destination dest(std::string protocol, std::string host, std::uint16_t port,
                 std::string verdict = "would_deny", std::string rule = "") {
  Destination d;
  d.protocol = std::move(protocol);
  d.host = std::move(host);
  d.port = port;
  d.count = 1;
  d.verdict = verdict;
  (verdict == "deny" ? d.denied : verdict == "would_deny" ? d.would_deny : d.allowed) = 1;
  d.reason = verdict == "allow" ? "allowlisted" : "not_allowlisted";
  d.rule = std::move(rule);
  return d;
}

using Strings = std::vector<std::string>;

TEST(Learn, Table) {
  struct Row {
    const char* what;
    std::vector<Destination> used;
    Strings http, dns;
  } rows[] = {
      {"the issue's job: three names under pkg.test on one port, one elsewhere",
       {dest("connect", "a.pkg.test", 443), dest("connect", "b.pkg.test", 443),
        dest("connect", "c.pkg.test", 443), dest("connect", "api.other.test", 8443),
        dest("dns", "a.pkg.test", 53), dest("dns", "b.pkg.test", 53),
        dest("dns", "api.other.test", 53)},
       {"*.pkg.test:443", "api.other.test:8443"},
       {"*.pkg.test", "api.other.test"}},
      {"one name under a domain stays exact",
       {dest("connect", "registry.npmjs.org", 443)},
       {"registry.npmjs.org:443"},
       {}},
      {"ports stay exact: no wildcard across ports",
       {dest("connect", "a.example.com", 443), dest("http", "b.example.com", 80)},
       {"a.example.com:443", "b.example.com:80"},
       {}},
      {"the apex stays exact beside the wildcard it is not covered by",
       {dest("connect", "example.com", 443), dest("connect", "www.example.com", 443),
        dest("connect", "api.example.com", 443)},
       {"*.example.com:443", "example.com:443"},
       {}},
      {"the Public Suffix List, not the last two labels: co.uk",
       {dest("connect", "a.one.co.uk", 443), dest("connect", "b.two.co.uk", 443)},
       {"a.one.co.uk:443", "b.two.co.uk:443"},
       {}},
      {"a private suffix in the list: each github.io site is its own domain",
       {dest("connect", "alice.github.io", 443), dest("connect", "bob.github.io", 443)},
       {"alice.github.io:443", "bob.github.io:443"},
       {}},
      {"several names under one github.io site",
       {dest("connect", "a.alice.github.io", 443), dest("connect", "b.alice.github.io", 443)},
       {"*.alice.github.io:443"},
       {}},
      {"IP literals stay exact, IPv6 in brackets",
       {dest("connect", "203.0.113.7", 443), dest("connect", "2001:db8::1", 443)},
       {"203.0.113.7:443", "[2001:db8::1]:443"},
       {}},
      {"a destination an existing rule allowed keeps that rule",
       {dest("connect", "x.pkg.test", 443, "allow", "*.pkg.test:443"),
        dest("dns", "x.pkg.test", 53, "allow", "*.pkg.test")},
       {"*.pkg.test:443"},
       {"*.pkg.test"}},
      {"denied destinations are left out: no rule can allow them",
       {dest("connect", "rebind.test", 443, "deny"), dest("dns", "10.0.0.1", 53, "deny")},
       {},
       {}},
      {"DNS-only names go under allow-dns only",
       {dest("dns", "only-dns.test", 53)},
       {},
       {"only-dns.test"}},
      {"nothing used, nothing proposed", {}, {}, {}},
  };
  for (const auto& r : rows) {
    const Proposal p = propose_rules(r.used);
    EXPECT_EQ(p.allow_http, r.http) << r.what;
    EXPECT_EQ(p.allow_dns, r.dns) << r.what;
  }
}

// Whatever the job did, the proposal allows it: compile it and decide every destination.
TEST(Learn, ProposalAllowsEverythingThatWentAhead) {
  const std::vector<Destination> used = {
      dest("connect", "a.pkg.test", 443),      dest("connect", "b.pkg.test", 443),
      dest("connect", "deep.c.pkg.test", 443), dest("connect", "api.other.test", 8443),
      dest("http", "plain.example", 80),       dest("connect", "203.0.113.9", 443),
      dest("dns", "a.pkg.test", 53),           dest("dns", "z.pkg.test", 53),
      dest("dns", "api.other.test", 53)};
  const Proposal p = propose_rules(used);
  policy::RuleSet rules;
  rules.allow_http = p.allow_http;
  rules.allow_dns = p.allow_dns;
  auto compiled = policy::compile(rules, 1);
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<const policy::Snapshot>>(compiled));
  const auto& snap = *std::get<std::shared_ptr<const policy::Snapshot>>(compiled);
  for (const auto& d : used) {
    const auto decision = d.protocol == "dns" ? policy::decide_dns(d.host, snap)
                                              : policy::decide_http(d.host, d.port, snap);
    EXPECT_EQ(decision.verdict, policy::Verdict::allow) << d.protocol << " " << d.host;
  }
  // ... and nothing on another port or another domain.
  EXPECT_EQ(policy::decide_http("a.pkg.test", 80, snap).verdict, policy::Verdict::deny);
  EXPECT_EQ(policy::decide_http("evil.test", 443, snap).verdict, policy::Verdict::deny);
}

TEST(Learn, RegistrableDomain) {
  EXPECT_EQ(registrable_domain("a.b.pkg.test"), "pkg.test");
  EXPECT_EQ(registrable_domain("api.github.com"), "github.com");
  EXPECT_EQ(registrable_domain("x.y.example.co.uk"), "example.co.uk");
  EXPECT_EQ(registrable_domain("co.uk"), std::nullopt);  // a public suffix
  EXPECT_EQ(registrable_domain("203.0.113.7"), std::nullopt);
  EXPECT_EQ(registrable_domain("2001:db8::1"), std::nullopt);
  EXPECT_EQ(registrable_domain(""), std::nullopt);
}

TEST(Learn, YamlReadsBackAsTheProposal) {
  for (const Proposal& p :
       {Proposal{{"*.pkg.test:443", "api.other.test:8443"}, {"*.pkg.test"}}, Proposal{}}) {
    const std::string y = proposal_yaml(p, "a job\nwith a newline");
    const NetworkFile back = parse_network_yaml(y, "proposal");
    EXPECT_EQ(back.allow_http, p.allow_http) << y;
    EXPECT_EQ(back.allow_dns, p.allow_dns) << y;
    EXPECT_TRUE(back.presets.empty());
    EXPECT_NE(y.find("# Proposed by vibepit ci --mode learn from a job with a newline."),
              std::string::npos)
        << y;
  }
}

}  // namespace
}  // namespace vibepit::launcher
