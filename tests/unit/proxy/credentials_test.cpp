// Credentials on their way upstream: the header set in place of what the client sent, only
// for the credential's host.
#include "vibepit/proxy/credentials.hpp"

#include <gtest/gtest.h>

namespace vibepit::proxy {
namespace {

policy::Credential credential(std::string_view text, std::string_view value) {
  auto spec = std::get<policy::CredentialSpec>(policy::parse_credential(text));
  return {spec, policy::header_value(spec, value)};
}

std::shared_ptr<const policy::Snapshot> with(std::vector<policy::Credential> list) {
  auto snap = std::get<std::shared_ptr<policy::Snapshot>>(policy::compile_mutable({}));
  for (auto& c : list) snap = policy::with_credential(*snap, std::move(c));
  return snap;
}

const std::string kHead =
    "GET /repos HTTP/1.1\r\nHost: api.test\r\nauthorization: Bearer vibepit-secret-GH\r\n"
    "Accept: */*\r\nAUTHORIZATION: again\r\n\r\n";

TEST(RemoveFields, RemovesEveryCaseOfTheNameAndNothingElse) {
  std::string head = kHead;
  remove_fields(head, "Authorization");
  EXPECT_EQ(head, "GET /repos HTTP/1.1\r\nHost: api.test\r\nAccept: */*\r\n\r\n");
  std::string same = head;
  remove_fields(same, "Auth");  // a prefix of a name is another name
  remove_fields(same, "Accept-Encoding");
  EXPECT_EQ(same, head);
}

TEST(AddCredentials, ReplacesThePlaceholderOnItsHostOnly) {
  auto snap = with({credential("GH=api.test:443", "ghp_real"),
                    credential("KEY=api.test:443,header=X-Key,format={}", "k1")});
  std::vector<const policy::Credential*> scratch;
  std::string names;
  std::string head = kHead;
  ASSERT_TRUE(add_credentials(*snap, "api.test", 443, head, scratch, names));
  EXPECT_EQ(head,
            "GET /repos HTTP/1.1\r\nHost: api.test\r\nAccept: */*\r\n"
            "Authorization: Bearer ghp_real\r\nX-Key: k1\r\n\r\n");
  EXPECT_EQ(names, "GH,KEY");

  for (auto [host, port] : {std::pair{"other.test", 443}, std::pair{"api.test", 8443}}) {
    std::string untouched = kHead;
    EXPECT_FALSE(
        add_credentials(*snap, host, static_cast<std::uint16_t>(port), untouched, scratch, names));
    EXPECT_EQ(untouched, kHead);  // the placeholder goes on, a meaningless string
    EXPECT_TRUE(names.empty());
  }
}

TEST(AddCredentials, AddsTheHeaderWhenTheClientSentNone) {
  auto snap = with({credential("GH=*.test:443", "v")});
  std::vector<const policy::Credential*> scratch;
  std::string names;
  std::string head = "GET / HTTP/1.1\r\nHost: x.test\r\n\r\n";
  ASSERT_TRUE(add_credentials(*snap, "X.TEST.", 443, head, scratch, names));
  EXPECT_EQ(head, "GET / HTTP/1.1\r\nHost: x.test\r\nAuthorization: Bearer v\r\n\r\n");
}

TEST(AddCredentials, NoCredentialsNoWork) {
  auto snap = with({});
  std::vector<const policy::Credential*> scratch;
  std::string names = "stale";
  std::string head = kHead;
  EXPECT_FALSE(add_credentials(*snap, "api.test", 443, head, scratch, names));
  EXPECT_EQ(head, kHead);
  EXPECT_TRUE(names.empty());
}

}  // namespace
}  // namespace vibepit::proxy
