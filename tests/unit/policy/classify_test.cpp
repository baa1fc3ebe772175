// The address classifier, in the style of smokescreen's TestClassifyAddr: one row per
// address, with the reason in a comment. Boundaries sit just inside and just outside.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/policy/classify.hpp"

namespace vibepit::policy {
namespace {

struct Case {
  std::string_view addr;
  std::string_view range;     // empty: allowed
  std::string_view kind;      // empty: allowed
  std::string_view embedded;  // the embedded IPv4 that was judged, if any
};

void check(const Classifier& c, const Case& row) {
  auto ip = IpAddr::parse(row.addr);
  ASSERT_TRUE(ip.has_value()) << row.addr;
  Classification got = c.classify(*ip);
  EXPECT_EQ(got.blocked, !row.range.empty()) << row.addr;
  EXPECT_EQ(got.range, row.range) << row.addr;
  EXPECT_EQ(got.kind, row.kind) << row.addr;
  EXPECT_EQ(got.embedded, row.embedded) << row.addr;
}

TEST(ClassifyTest, Ipv4) {
  const Case cases[] = {
      {"203.0.113.7", "", "", ""},                                 // documentation, public
      {"198.51.100.1", "", "", ""},                                // documentation, public
      {"93.184.216.34", "", "", ""},                               // public
      {"9.255.255.255", "", "", ""},                               // just below 10/8
      {"10.0.0.0", "10.0.0.0/8", "private", ""},                   // first of 10/8
      {"10.255.255.255", "10.0.0.0/8", "private", ""},             // last of 10/8
      {"11.0.0.0", "", "", ""},                                    // just above 10/8
      {"172.15.255.255", "", "", ""},                              // just below 172.16/12
      {"172.16.0.0", "172.16.0.0/12", "private", ""},              // first of 172.16/12
      {"172.31.255.255", "172.16.0.0/12", "private", ""},          // last of 172.16/12
      {"172.32.0.0", "", "", ""},                                  // just above 172.16/12
      {"192.167.255.255", "", "", ""},                             // below 192.168/16
      {"192.168.0.0", "192.168.0.0/16", "private", ""},            // first of 192.168/16
      {"192.168.255.255", "192.168.0.0/16", "private", ""},        // last of 192.168/16
      {"192.169.0.0", "", "", ""},                                 // above 192.168/16
      {"126.255.255.255", "", "", ""},                             // below 127/8
      {"127.0.0.0", "127.0.0.0/8", "loopback", ""},                // first of 127/8
      {"127.0.0.1", "127.0.0.0/8", "loopback", ""},                // the loopback
      {"127.255.255.255", "127.0.0.0/8", "loopback", ""},          // last of 127/8
      {"128.0.0.0", "", "", ""},                                   // above 127/8
      {"169.253.255.255", "", "", ""},                             // below 169.254/16
      {"169.254.0.0", "169.254.0.0/16", "link-local", ""},         // first of 169.254/16
      {"169.254.169.254", "169.254.0.0/16", "link-local", ""},     // cloud metadata
      {"169.254.255.255", "169.254.0.0/16", "link-local", ""},     // last of 169.254/16
      {"169.255.0.0", "", "", ""},                                 // above 169.254/16
      {"0.0.0.0", "0.0.0.0/8", "unspecified", ""},                 // unspecified
      {"0.255.255.255", "0.0.0.0/8", "unspecified", ""},           // last of 0/8
      {"1.0.0.0", "", "", ""},                                     // above 0/8
      {"100.63.255.255", "", "", ""},                              // below 100.64/10
      {"100.64.0.0", "100.64.0.0/10", "shared-address", ""},       // first of 100.64/10
      {"100.127.255.255", "100.64.0.0/10", "shared-address", ""},  // last of 100.64/10
      {"100.128.0.0", "", "", ""},                                 // above 100.64/10
      {"191.255.255.255", "", "", ""},                             // below 192.0.0/24
      {"192.0.0.0", "192.0.0.0/24", "ietf-protocol", ""},          // first of 192.0.0/24
      {"192.0.0.255", "192.0.0.0/24", "ietf-protocol", ""},        // last of 192.0.0/24
      {"192.0.1.0", "", "", ""},                                   // above 192.0.0/24
      {"192.0.2.1", "", "", ""},                                   // TEST-NET-1, public
      {"198.17.255.255", "", "", ""},                              // below 198.18/15
      {"168.63.129.16", "168.63.129.16/32", "cloud-host", ""},     // Azure's host endpoint
      {"168.63.129.17", "", "", ""},                               // its neighbour is public
      {"198.18.0.0", "198.18.0.0/15", "benchmarking", ""},         // first of 198.18/15
      {"198.19.255.255", "198.18.0.0/15", "benchmarking", ""},     // last of 198.18/15
      {"198.20.0.0", "", "", ""},                                  // above 198.18/15
      {"198.51.100.7", "", "", ""},                                // TEST-NET-2, public
      {"203.0.113.7", "", "", ""},                                 // TEST-NET-3, public
      {"223.255.255.255", "", "", ""},                             // below multicast
      {"224.0.0.0", "224.0.0.0/4", "multicast", ""},               // first multicast
      {"239.255.255.255", "224.0.0.0/4", "multicast", ""},         // last multicast
      {"240.0.0.0", "240.0.0.0/4", "reserved", ""},                // first reserved
      {"255.255.255.254", "240.0.0.0/4", "reserved", ""},          // reserved
      {"255.255.255.255", "240.0.0.0/4", "reserved", ""},          // limited broadcast
  };
  Classifier c;
  for (const auto& row : cases) check(c, row);
}

TEST(ClassifyTest, Ipv6) {
  const Case cases[] = {
      {"2001:db8::1", "", "", ""},                              // documentation, public
      {"2606:4700::1111", "", "", ""},                          // public
      {"::", "::/128", "unspecified", ""},                      // unspecified
      {"::1", "::1/128", "loopback", ""},                       // loopback
      {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", "", ""},  // just below fc00::/7
      {"fc00::", "fc00::/7", "unique-local", ""},               // first unique-local
      {"fd12:3456::1", "fc00::/7", "unique-local", ""},         // typical ULA
      {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7", "unique-local", ""},  // last ULA
      {"fe00::", "", "", ""},                                   // between ULA and link-local
      {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", "", ""},  // just below fe80::/10
      {"fe80::", "fe80::/10", "link-local", ""},                // first link-local
      {"fe80::1", "fe80::/10", "link-local", ""},               // typical link-local
      {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::/10", "link-local", ""},  // last
      {"fec0::", "fec0::/10", "site-local", ""},  // deprecated site-local
      {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::/10", "site-local", ""},  // its last
      {"100::", "100::/64", "discard", ""},                     // discard-only, first
      {"100::ffff:ffff:ffff:ffff", "100::/64", "discard", ""},  // discard-only, last
      {"100:0:0:1::", "", "", ""},                              // just above 100::/64
      {"::ffff:0:a00:1", "::ffff:0:0:0/96", "siit", ""},        // SIIT (IPv4-translated)
      {"::ffff:0:cb00:7107", "::ffff:0:0:0/96", "siit", ""},    // even a public IPv4 inside
      {"::fffe:ffff:0:0", "", "", ""},                          // outside both ::ffff forms
      {"ff00::", "ff00::/8", "multicast", ""},                  // first multicast
      {"ff02::1", "ff00::/8", "multicast", ""},                 // all nodes
      {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::/8", "multicast", ""},  // last
  };
  Classifier c;
  for (const auto& row : cases) check(c, row);
}

TEST(ClassifyTest, EmbeddedIpv4) {
  const Case cases[] = {
      // IPv4-mapped ::ffff:0:0/96
      {"::ffff:127.0.0.1", "127.0.0.0/8", "loopback", "127.0.0.1"},  // mapped loopback
      {"::ffff:10.1.2.3", "10.0.0.0/8", "private", "10.1.2.3"},      // mapped private
      {"::ffff:169.254.169.254", "169.254.0.0/16", "link-local", "169.254.169.254"},
      {"::ffff:0.0.0.0", "0.0.0.0/8", "unspecified", "0.0.0.0"},  // mapped 0.0.0.0
      {"::ffff:100.64.0.1", "100.64.0.0/10", "shared-address", "100.64.0.1"},
      {"::ffff:203.0.113.7", "", "", "203.0.113.7"},  // mapped public
      // IPv4-compatible ::/96 (:: and ::1 are judged as IPv6, see the Ipv6 test)
      {"::127.0.0.1", "127.0.0.0/8", "loopback", "127.0.0.1"},  // compat loopback
      {"::10.0.0.1", "10.0.0.0/8", "private", "10.0.0.1"},      // compat private
      {"::2", "0.0.0.0/8", "unspecified", "0.0.0.2"},           // compat 0.0.0.2
      {"::203.0.113.7", "", "", "203.0.113.7"},                 // compat public
      // NAT64 64:ff9b::/96
      {"64:ff9b::127.0.0.1", "127.0.0.0/8", "loopback", "127.0.0.1"},             // NAT64 loopback
      {"64:ff9b::a9fe:a9fe", "169.254.0.0/16", "link-local", "169.254.169.254"},  // metadata
      {"64:ff9b::203.0.113.7", "", "", "203.0.113.7"},                            // NAT64 public
      // local-use NAT64 64:ff9b:1::/48 in the /96 layout: judged by the IPv4 address
      {"64:ff9b:1::a00:1", "10.0.0.0/8", "private", "10.0.0.1"},
      {"64:ff9b:1::cb00:7107", "", "", "203.0.113.7"},
      // other layouts (/48, /56, /64) place the IPv4 address by prefix length: refused whole
      {"64:ff9b:1:cb00:71:700::", "64:ff9b:1::/48", "nat64-local", ""},
      {"64:ff9b:1:0:a:0:100::", "64:ff9b:1::/48", "nat64-local", ""},
      {"64:ff9b:2::a00:1", "", "", ""},  // outside both NAT64 prefixes
      // 6to4 2002::/16, the IPv4 address in bytes 2..5
      {"2002:7f00:1::", "127.0.0.0/8", "loopback", "127.0.0.1"},         // 6to4 loopback
      {"2002:c0a8:101::1", "192.168.0.0/16", "private", "192.168.1.1"},  // 6to4 private
      {"2002:cb00:7107::1", "", "", "203.0.113.7"},                      // 6to4 public
      // Teredo 2001::/32: server in bytes 4..7, client in bytes 12..15 XOR 0xff
      {"2001:0:cb00:7107::80ff:fffe", "127.0.0.0/8", "loopback", "127.0.0.1"},  // client
      {"2001:0:a00:1::34ff:8ef8", "10.0.0.0/8", "private", "10.0.0.1"},         // server blocked
      {"2001:0:cb00:7107::34ff:8ef8", "", "", "203.0.113.7"},                   // both public
      {"2001:1::1", "", "", ""},                                                // not 2001::/32
  };
  Classifier c;
  for (const auto& row : cases) check(c, row);
}

TEST(ClassifyTest, BlockCidr) {
  Classifier c({*Cidr::parse("198.51.100.0/24"), *Cidr::parse("2001:db8:bad::/48")});
  const Case cases[] = {
      {"198.51.100.0", "198.51.100.0/24", "block-cidr", ""},       // first of the extra range
      {"198.51.100.255", "198.51.100.0/24", "block-cidr", ""},     // last of the extra range
      {"198.51.101.0", "", "", ""},                                // just outside
      {"198.51.99.255", "", "", ""},                               // just outside, below
      {"10.0.0.1", "10.0.0.0/8", "private", ""},                   // built-in ranges remain
      {"2001:db8:bad::1", "2001:db8:bad::/48", "block-cidr", ""},  // IPv6 extra range
      {"2001:db8:bae::1", "", "", ""},                             // just outside
      {"::ffff:198.51.100.9", "198.51.100.0/24", "block-cidr", "198.51.100.9"},  // mapped
      {"64:ff9b::c633:6409", "198.51.100.0/24", "block-cidr", "198.51.100.9"},   // NAT64
      {"2002:c633:6409::1", "198.51.100.0/24", "block-cidr", "198.51.100.9"},    // 6to4
  };
  for (const auto& row : cases) check(c, row);
  EXPECT_EQ(c.extra_blocked().size(), 2u);
}

TEST(ClassifyTest, BlockCidrCoversEmbeddingPrefixItself) {
  // A block-cidr over an embedding prefix blocks it even when the embedded address is public.
  Classifier c({*Cidr::parse("2002::/16")});
  check(c, {"2002:cb00:7107::1", "2002::/16", "block-cidr", "203.0.113.7"});
}

TEST(ClassifyTest, BlockEverything) {
  Classifier c({*Cidr::parse("0.0.0.0/0"), *Cidr::parse("::/0")});
  check(c, {"203.0.113.7", "0.0.0.0/0", "block-cidr", ""});
  check(c, {"2001:db8::1", "::/0", "block-cidr", ""});
  check(c, {"127.0.0.1", "127.0.0.0/8", "loopback", ""});  // the built-in range is named first
}

TEST(ClassifyTest, AlwaysBlockedOnly) {
  const Case cases[] = {
      {"127.0.0.1", "127.0.0.0/8", "loopback", ""},                        // always
      {"172.16.0.1", "172.16.0.0/12", "private", ""},                      // always
      {"100.64.0.1", "", "", ""},                                          // default only
      {"224.0.0.1", "", "", ""},                                           // default only
      {"0.0.0.0", "", "", ""},                                             // default only
      {"::", "", "", ""},                                                  // default only
      {"::1", "::1/128", "loopback", ""},                                  // always
      {"fe80::1", "fe80::/10", "link-local", ""},                          // always
      {"ff02::1", "", "", ""},                                             // default only
      {"::ffff:192.168.0.1", "192.168.0.0/16", "private", "192.168.0.1"},  // embedded
      {"::ffff:100.64.0.1", "", "", "100.64.0.1"},                         // embedded, default only
  };
  for (const auto& row : cases) {
    Classification got = classify_always_blocked(*IpAddr::parse(row.addr));
    EXPECT_EQ(got.range, row.range) << row.addr;
    EXPECT_EQ(got.kind, row.kind) << row.addr;
    EXPECT_EQ(got.embedded, row.embedded) << row.addr;
  }
}

TEST(ClassifyTest, RangeLists) {
  std::vector<std::string> always, defaults;
  for (const auto& c : always_blocked_ranges()) always.push_back(c.to_string());
  for (const auto& c : default_blocked_ranges()) defaults.push_back(c.to_string());
  EXPECT_EQ(always, (std::vector<std::string>{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                              "127.0.0.0/8", "169.254.0.0/16", "::1/128",
                                              "fc00::/7", "fe80::/10"}));
  EXPECT_EQ(defaults,
            (std::vector<std::string>{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "198.18.0.0/15",
                                      "224.0.0.0/4", "240.0.0.0/4", "168.63.129.16/32", "::/128",
                                      "fec0::/10", "::ffff:0:0:0/96", "100::/64", "ff00::/8"}));
}

}  // namespace
}  // namespace vibepit::policy
