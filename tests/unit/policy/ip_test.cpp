// IpAddr and Cidr: strict parsing and canonical text.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>

#include "vibepit/policy/ip.hpp"

namespace vibepit::policy {
namespace {

TEST(IpAddrTest, ParsesAndPrintsCanonically) {
  struct Case {
    std::string_view in;
    std::string_view canonical;  // empty: must be rejected
  } cases[] = {
      {"203.0.113.7", "203.0.113.7"},                    // plain dotted quad
      {"0.0.0.0", "0.0.0.0"},                            // zero parts are a single '0'
      {"255.255.255.255", "255.255.255.255"},            // largest parts
      {"127.1", ""},                                     // inet_aton short form
      {"2130706433", ""},                                // inet_aton single integer
      {"017700000001", ""},                              // octal integer
      {"0x7f.0.0.1", ""},                                // hex part
      {"0x7f000001", ""},                                // hex integer
      {"010.0.0.1", ""},                                 // leading zero (octal in inet_aton)
      {"256.0.0.1", ""},                                 // part out of range
      {"1.2.3.4.", ""},                                  // trailing dot
      {"1.2.3", ""},                                     // three parts
      {"1.2.3.4.5", ""},                                 // five parts
      {"1..3.4", ""},                                    // empty part
      {"1.2.3.4 ", ""},                                  // trailing space
      {" 1.2.3.4", ""},                                  // leading space
      {"1.2.3.-4", ""},                                  // sign
      {"1.2.3.1000", ""},                                // four digits
      {"", ""},                                          // empty
      {"2001:db8::1", "2001:db8::1"},                    // compressed
      {"2001:DB8:0:0:0:0:0:1", "2001:db8::1"},           // upper case, uncompressed
      {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"},  // a single zero word stays
      {"2001:0db8::0001", "2001:db8::1"},                // leading zeros dropped
      {"1:0:0:2:0:0:0:3", "1:0:0:2::3"},                 // longest run compressed
      {"1:0:0:2:0:0:3:4", "1::2:0:0:3:4"},               // first run wins a tie
      {"::", "::"},                                      // unspecified
      {"::1", "::1"},                                    // loopback
      {"1::", "1::"},                                    // trailing run
      {"::ffff:192.0.2.1", "::ffff:192.0.2.1"},          // mapped keeps the dotted tail
      {"::ffff:c000:201", "::ffff:192.0.2.1"},           // mapped written in hex
      {"::192.0.2.1", "::c000:201"},                     // compatible is printed in hex
      {"64:ff9b::192.0.2.1", "64:ff9b::c000:201"},       // NAT64 in hex
      {"::ffff:1.2.3.04", ""},                           // leading zero in the tail
      {"[2001:db8::1]", ""},                             // brackets belong to the caller
      {"fe80::1%eth0", ""},                              // zone ids are refused
      {"2001:db8::1::2", ""},                            // two "::"
      {"2001:db8:::1", ""},                              // ":::"
      {"12345::1", ""},                                  // five hex digits
      {"1:2:3:4:5:6:7:8:9", ""},                         // nine words
      {"g::1", ""},                                      // not hex
  };
  for (const auto& c : cases) {
    auto ip = IpAddr::parse(c.in);
    if (c.canonical.empty()) {
      EXPECT_FALSE(ip.has_value()) << c.in;
      continue;
    }
    ASSERT_TRUE(ip.has_value()) << c.in;
    EXPECT_EQ(ip->to_string(), c.canonical) << c.in;
    auto again = IpAddr::parse(ip->to_string());
    ASSERT_TRUE(again.has_value()) << c.in;
    EXPECT_EQ(*again, *ip) << c.in;
  }
}

// write() is the writer thread's formatter (to_string() is made from it): it keeps within
// kMaxText for the longest texts of each form and touches nothing after what it returns.
TEST(IpAddrTest, WriteStaysWithinItsBound) {
  for (std::string_view text : {"255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                                "::ffff:255.255.255.255", "1:0:1:0:1:0:1:0", "::"}) {
    const auto ip = IpAddr::parse(text);
    ASSERT_TRUE(ip.has_value()) << text;
    char buf[IpAddr::kMaxText + 8];
    std::fill(std::begin(buf), std::end(buf), '#');
    const char* end = ip->write(buf);
    ASSERT_LE(end - buf, static_cast<std::ptrdiff_t>(IpAddr::kMaxText)) << text;
    EXPECT_EQ(std::string_view(buf, static_cast<std::size_t>(end - buf)), text);
    EXPECT_TRUE(std::all_of(end, std::cend(buf), [](char c) { return c == '#'; })) << text;
  }
}

TEST(IpAddrTest, V4FromHostOrder) {
  IpAddr a = IpAddr::v4_from(0xCB007107);
  EXPECT_FALSE(a.v6);
  EXPECT_EQ(a.to_string(), "203.0.113.7");
  EXPECT_EQ(a, *IpAddr::parse("203.0.113.7"));
}

TEST(CidrTest, ParsesStrictly) {
  struct Case {
    std::string_view in;
    std::string_view canonical;  // empty: must be rejected
  } cases[] = {
      {"10.0.0.0/8", "10.0.0.0/8"},          // plain
      {"0.0.0.0/0", "0.0.0.0/0"},            // everything
      {"203.0.113.7/32", "203.0.113.7/32"},  // one host
      {"fc00::/7", "fc00::/7"},              // IPv6
      {"2001:DB8::/32", "2001:db8::/32"},    // canonical text
      {"::/0", "::/0"},                      // all of IPv6
      {"10.0.0.1/8", ""},                    // host bits set
      {"fc00::1/7", ""},                     // host bits set (IPv6)
      {"10.0.0.0/33", ""},                   // prefix too long for IPv4
      {"::/129", ""},                        // prefix too long for IPv6
      {"10.0.0.0/08", ""},                   // leading zero in the prefix
      {"10.0.0.0/", ""},                     // empty prefix
      {"10.0.0.0", ""},                      // no prefix
      {"10.0.0.0/+8", ""},                   // sign
      {"10/8", ""},                          // short address
      {"10.0.0.0/8/8", ""},                  // two slashes
  };
  for (const auto& c : cases) {
    auto cidr = Cidr::parse(c.in);
    if (c.canonical.empty()) {
      EXPECT_FALSE(cidr.has_value()) << c.in;
      continue;
    }
    ASSERT_TRUE(cidr.has_value()) << c.in;
    EXPECT_EQ(cidr->to_string(), c.canonical) << c.in;
  }
}

TEST(CidrTest, Contains) {
  struct Case {
    std::string_view cidr;
    std::string_view addr;
    bool inside;
  } cases[] = {
      {"172.16.0.0/12", "172.16.0.0", true},       // first address
      {"172.16.0.0/12", "172.31.255.255", true},   // last address
      {"172.16.0.0/12", "172.32.0.0", false},      // just past the end
      {"172.16.0.0/12", "172.15.255.255", false},  // just before the start
      {"0.0.0.0/0", "203.0.113.7", true},          // everything
      {"fe80::/10", "febf:ffff::1", true},         // partial-byte prefix, inside
      {"fe80::/10", "fec0::1", false},             // partial-byte prefix, outside
      {"::/0", "203.0.113.7", false},              // families differ
      {"10.0.0.0/8", "::ffff:10.0.0.1", false},    // no implicit mapping in contains()
      {"2001:db8::1/128", "2001:db8::1", true},    // one host
      {"2001:db8::1/128", "2001:db8::2", false},   // the next host
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Cidr::parse(c.cidr)->contains(*IpAddr::parse(c.addr)), c.inside)
        << c.cidr << " " << c.addr;
  }
}

}  // namespace
}  // namespace vibepit::policy

namespace vibepit::policy {
namespace {

TEST(JoinHostPort, BracketsIpv6Only) {
  EXPECT_EQ(join_host_port("203.0.113.7", 443), "203.0.113.7:443");
  EXPECT_EQ(join_host_port("example.com", 80), "example.com:80");
  EXPECT_EQ(join_host_port("::1", 53), "[::1]:53");
  EXPECT_EQ(join_host_port("2001:db8::1", 65535), "[2001:db8::1]:65535");
  EXPECT_EQ(join_host_port(IpAddr::parse("::ffff:10.0.0.1")->to_string(), 1),
            "[::ffff:10.0.0.1]:1");
}

}  // namespace
}  // namespace vibepit::policy
