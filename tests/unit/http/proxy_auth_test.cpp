// Proxy-Authorization: Basic, as clients send it from a proxy URL with a user and password.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/http/proxy_auth.hpp"

namespace vibepit::http {
namespace {

struct Parsed {
  BasicError error;
  std::string user, password;
};

Parsed parse(std::string_view value, std::size_t room = 256) {
  std::string buf(room, '\0');
  const auto c = parse_basic(value, buf);
  return {c.error, std::string(c.user), std::string(c.password)};
}

TEST(ProxyAuthTest, DecodesWhatCurlSends) {
  // curl -x http://alpha:s3cret@proxy: "Basic " + base64("alpha:s3cret").
  auto p = parse("Basic YWxwaGE6czNjcmV0");
  EXPECT_EQ(p.error, BasicError::none);
  EXPECT_EQ(p.user, "alpha");
  EXPECT_EQ(p.password, "s3cret");
  // Any case of the scheme, spaces around, padding of one and two.
  p = parse("  bAsIc   YWxwaGE6czNjcmV0MQ==  ");
  EXPECT_EQ(p.error, BasicError::none);
  EXPECT_EQ(p.password, "s3cret1");
  p = parse("BASIC YWxwaGE6czNjcmV0MTI=");
  EXPECT_EQ(p.password, "s3cret12");
  // The password may hold ':'; the user ends at the first.
  p = parse("Basic YTpiOmM=");
  EXPECT_EQ(p.user, "a");
  EXPECT_EQ(p.password, "b:c");
  p = parse("Basic Og==");  // ":"
  EXPECT_EQ(p.error, BasicError::none);
  EXPECT_EQ(p.user, "");
  EXPECT_EQ(p.password, "");
}

TEST(ProxyAuthTest, RefusesEverythingElseByName) {
  EXPECT_EQ(parse("").error, BasicError::not_basic);
  EXPECT_EQ(parse("Basic").error, BasicError::not_basic);
  EXPECT_EQ(parse("Basic   ").error, BasicError::not_basic);
  EXPECT_EQ(parse("Bearer YWxwaGE6czNjcmV0").error, BasicError::not_basic);
  EXPECT_EQ(parse("BasicYWxwaGE6czNjcmV0").error, BasicError::not_basic);
  EXPECT_EQ(parse("Basic YWxwaGE6czNjcmV").error, BasicError::bad_base64);    // length
  EXPECT_EQ(parse("Basic YWxwaGE6czNjcm!0").error, BasicError::bad_base64);   // alphabet
  EXPECT_EQ(parse("Basic YW=waGE6czNjcmV0").error, BasicError::bad_base64);   // '=' inside
  EXPECT_EQ(parse("Basic YWxw YWE6czNjcmV0").error, BasicError::bad_base64);  // two tokens
  EXPECT_EQ(parse("Basic YR==").error, BasicError::bad_base64);               // padding bits set
  EXPECT_EQ(parse("Basic YWxwaGE=").error, BasicError::no_colon);             // "alpha"
  EXPECT_EQ(parse("Basic YQphOmI=").error, BasicError::control);              // "a\na:b"
  EXPECT_EQ(parse("Basic YTpiAA==").error, BasicError::control);              // "a:b\0"
  EXPECT_EQ(parse("Basic YWxwaGE6czNjcmV0", 11).error, BasicError::too_long);
  EXPECT_EQ(parse("Basic YWxwaGE6czNjcmV0", 12).error, BasicError::none);
  for (auto e : {BasicError::not_basic, BasicError::bad_base64, BasicError::too_long,
                 BasicError::no_colon, BasicError::control}) {
    EXPECT_NE(describe(e), describe(BasicError::none));
  }
}

}  // namespace
}  // namespace vibepit::http
