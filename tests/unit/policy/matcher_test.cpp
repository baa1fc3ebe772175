// Matching: exact names, wildcard depth, the apex, ports, IP literals, and which rule wins.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <variant>

#include "vibepit/policy/matcher.hpp"

namespace vibepit::policy {
namespace {

DnsMatcher dns_matcher(std::initializer_list<std::string_view> entries) {
  DnsMatcher m;
  for (auto e : entries) m.add(std::get<DnsRule>(parse_dns_rule(e)));
  return m;
}

HttpMatcher http_matcher(std::initializer_list<std::string_view> entries) {
  HttpMatcher m;
  for (auto e : entries) m.add(std::get<HttpRule>(parse_http_rule(e)));
  return m;
}

TEST(DnsMatcherTest, Matches) {
  const DnsMatcher m = dns_matcher(
      {"example.com", "*.wild.test", "*.b.wild.test", "*.deep.test", "deep.test", "Mixed.Case"});
  struct Case {
    std::string_view name;
    std::string_view rule;  // empty: no match
  } cases[] = {
      {"example.com", "example.com"},        // exact
      {"www.example.com", ""},               // an exact rule covers no subdomain
      {"ample.com", ""},                     // a suffix that is no label boundary
      {"com", ""},                           // a parent
      {"a.wild.test", "*.wild.test"},        // wildcard, depth 1
      {"a.b.c.d.wild.test", "*.wild.test"},  // wildcard, any depth
      {"wild.test", ""},                     // the apex is not matched by a wildcard
      {"xwild.test", ""},                    // suffix must start at a label
      {"a.b.wild.test", "*.wild.test"},      // two wildcards match: the first added wins
      {"deep.test", "deep.test"},            // apex via its own exact rule
      {"x.deep.test", "*.deep.test"},        // subdomain via the wildcard
      {"mixed.case", "mixed.case"},          // rules are stored in lower case
      {"", ""},                              // empty name
  };
  for (const auto& c : cases) {
    const DnsRule* r = m.match(c.name);
    if (c.rule.empty()) {
      EXPECT_EQ(r, nullptr) << c.name << " matched " << (r ? r->text : "");
    } else {
      ASSERT_NE(r, nullptr) << c.name;
      EXPECT_EQ(r->text, c.rule) << c.name;
    }
  }
}

TEST(DnsMatcherTest, AddRejectsDuplicatesAndCounts) {
  DnsMatcher m;
  EXPECT_TRUE(m.add(std::get<DnsRule>(parse_dns_rule("example.com"))));
  EXPECT_FALSE(m.add(std::get<DnsRule>(parse_dns_rule("EXAMPLE.com."))));  // same canonical text
  EXPECT_TRUE(m.add(std::get<DnsRule>(parse_dns_rule("*.example.com"))));  // a different rule
  EXPECT_EQ(m.size(), 2u);
}

TEST(DnsMatcherTest, FirstAddedWildcardWinsWhicheverIsMoreSpecific) {
  // The more specific wildcard added first wins too: order, not depth, decides.
  const DnsMatcher m = dns_matcher({"*.b.wild.test", "*.wild.test"});
  EXPECT_EQ(m.match("a.b.wild.test")->text, "*.b.wild.test");
  EXPECT_EQ(m.match("a.c.wild.test")->text, "*.wild.test");
}

TEST(DnsMatcherTest, WildcardsOfDifferentDepths) {
  // The walk skips suffixes outside the label counts of the wildcard keys; every depth in
  // between must still be probed.
  const DnsMatcher m = dns_matcher({"*.a.b.c.test", "*.test", "*.m.test", "exact.x.y.z.test"});
  struct Case {
    std::string_view name;
    std::string_view rule;  // empty: no match
  } cases[] = {
      {"x.a.b.c.test", "*.a.b.c.test"},          // deepest key (4 labels)
      {"q.x.a.b.c.test", "*.a.b.c.test"},        // below the deepest key
      {"y.test", "*.test"},                      // shallowest key (1 label)
      {"x.y.z.w.v.test", "*.test"},              // deeper than any key, shallow key matches
      {"a.b.c.test", "*.test"},                  // the apex of the deep key, via the shallow one
      {"n.m.test", "*.test"},                    // both match: the first added wins
      {"exact.x.y.z.test", "exact.x.y.z.test"},  // exact, also under *.test: exact wins
      {"test", ""},                              // the apex of *.test
  };
  for (const auto& c : cases) {
    const DnsRule* r = m.match(c.name);
    if (c.rule.empty()) {
      EXPECT_EQ(r, nullptr) << c.name;
    } else {
      ASSERT_NE(r, nullptr) << c.name;
      EXPECT_EQ(r->text, c.rule) << c.name;
    }
  }
  const DnsMatcher only_deep = dns_matcher({"*.a.b.c.test"});
  EXPECT_EQ(only_deep.match("b.c.test"), nullptr);    // shallower than the window
  EXPECT_EQ(only_deep.match("z.b.c.test"), nullptr);  // same depth as the key's apex
  EXPECT_NE(only_deep.match("z.y.x.a.b.c.test"), nullptr);
}

TEST(HttpMatcherTest, Matches) {
  const HttpMatcher m = http_matcher({
      "example.com:443",
      "*.example.com:8*",
      "api.example.com:443",
      "any.test:*",
      "*.wild.test:443",
      "*.b.wild.test:*",
      "203.0.113.7:443",
      "[2001:db8::1]:8443",
      "multi.test:80",
      "multi.test:443",
  });
  struct Case {
    std::string_view host;
    std::uint16_t port;
    std::string_view rule;  // empty: no match
  } cases[] = {
      {"example.com", 443, "example.com:443"},          // exact name and port
      {"example.com", 80, ""},                          // exact name, other port
      {"example.com", 8080, ""},                        // the wildcard does not cover its apex
      {"www.example.com", 8080, "*.example.com:8*"},    // wildcard, glob
      {"www.example.com", 80, "*.example.com:8*"},      // glob 8*
      {"www.example.com", 8443, "*.example.com:8*"},    // glob 8*
      {"www.example.com", 443, ""},                     // glob 8* does not match 443
      {"a.b.c.d.example.com", 80, "*.example.com:8*"},  // depth
      {"api.example.com", 443, "api.example.com:443"},  // exact wins over wildcard
      {"api.example.com", 8080, "*.example.com:8*"},    // exact name, its port missed
      {"any.test", 1, "any.test:*"},                    // any port, lowest
      {"any.test", 65535, "any.test:*"},                // any port, highest
      {"x.any.test", 443, ""},                          // an exact rule is not a wildcard
      {"a.b.wild.test", 443, "*.wild.test:443"},        // both match: the first added wins
      {"a.b.wild.test", 22, "*.b.wild.test:*"},         // only the later one matches port 22
      {"203.0.113.7", 443, "203.0.113.7:443"},          // IPv4 literal
      {"203.0.113.7", 80, ""},                          // other port
      {"203.0.113.8", 443, ""},                         // other address
      {"2001:db8::1", 8443, "[2001:db8::1]:8443"},      // IPv6 literal, canonical text key
      {"multi.test", 80, "multi.test:80"},              // several globs on one name
      {"multi.test", 443, "multi.test:443"},            // the second glob
      {"multi.test", 8080, ""},                         // neither
      {"other.test", 443, ""},                          // nothing
  };
  for (const auto& c : cases) {
    const HttpRule* r = m.match(c.host, c.port);
    if (c.rule.empty()) {
      EXPECT_EQ(r, nullptr) << c.host << ":" << c.port << " matched " << (r ? r->text : "");
    } else {
      ASSERT_NE(r, nullptr) << c.host << ":" << c.port;
      EXPECT_EQ(r->text, c.rule) << c.host << ":" << c.port;
    }
  }
}

TEST(HttpMatcherTest, FirstAddedWinsOnOneName) {
  const HttpMatcher m = http_matcher({"example.com:*", "example.com:443"});
  EXPECT_EQ(m.match("example.com", 443)->text, "example.com:*");
  const HttpMatcher w = http_matcher({"*.example.com:4*", "*.example.com:443"});
  EXPECT_EQ(w.match("a.example.com", 443)->text, "*.example.com:4*");
}

TEST(HttpMatcherTest, AddRejectsDuplicates) {
  HttpMatcher m;
  EXPECT_TRUE(m.add(std::get<HttpRule>(parse_http_rule("example.com:443"))));
  EXPECT_FALSE(m.add(std::get<HttpRule>(parse_http_rule("Example.com.:443"))));
  EXPECT_TRUE(m.add(std::get<HttpRule>(parse_http_rule("example.com:80"))));
  EXPECT_TRUE(m.add(std::get<HttpRule>(parse_http_rule("example.com:8**"))));  // new: "8*"
  EXPECT_FALSE(m.add(std::get<HttpRule>(parse_http_rule("example.com:8*"))));  // now a dup
  EXPECT_TRUE(m.add(std::get<HttpRule>(parse_http_rule("[2001:db8::1]:443"))));
  EXPECT_FALSE(m.add(std::get<HttpRule>(parse_http_rule("[2001:DB8:0::1]:443"))));
  EXPECT_EQ(m.size(), 4u);
}

TEST(HttpMatcherTest, ManyRulesStillMatchTheRightOne) {
  HttpMatcher m;
  for (int i = 0; i < 5000; ++i) {
    std::string n = std::to_string(i);
    m.add(std::get<HttpRule>(parse_http_rule("host" + n + ".test:443")));
    m.add(std::get<HttpRule>(parse_http_rule("*.zone" + n + ".test:8*")));
  }
  EXPECT_EQ(m.size(), 10000u);
  EXPECT_EQ(m.match("host4999.test", 443)->text, "host4999.test:443");
  EXPECT_EQ(m.match("a.b.zone17.test", 8080)->text, "*.zone17.test:8*");
  EXPECT_EQ(m.match("host5000.test", 443), nullptr);
  EXPECT_EQ(m.match("zone17.test", 8080), nullptr);
}

}  // namespace
}  // namespace vibepit::policy
