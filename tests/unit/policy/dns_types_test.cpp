#include "vibepit/policy/dns_types.hpp"

#include <gtest/gtest.h>

namespace vibepit::policy {
namespace {

TEST(DnsTypes, DnsTypeNamesRoundTrip) {
  EXPECT_EQ(dns_type_from_name("HTTPS"), 65);
  EXPECT_EQ(dns_type_name(65), "HTTPS");
  EXPECT_EQ(dns_type_from_name("TYPE1234"), 1234);
  EXPECT_EQ(dns_type_name(1234), "TYPE1234");
  EXPECT_FALSE(dns_type_from_name("TYPE0123"));  // RFC 3597: no leading zero
  EXPECT_FALSE(dns_type_from_name("TYPE65536"));
  EXPECT_FALSE(dns_type_from_name("a"));  // type names are upper case
}

}  // namespace
}  // namespace vibepit::policy
