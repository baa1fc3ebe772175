// Credentials' public half: the NAME=HOST:PORT[,header=H][,format=F] grammar, the value's
// formatting into secret memory, host matching, and the snapshot operations.
#include "vibepit/policy/credential.hpp"

#include <gtest/gtest.h>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {
namespace {

CredentialSpec spec(std::string_view text) {
  auto r = parse_credential(text);
  if (auto* e = std::get_if<RuleError>(&r)) ADD_FAILURE() << e->message();
  return std::get<CredentialSpec>(r);
}

std::string error_of(std::string_view text) {
  auto r = parse_credential(text);
  if (!std::holds_alternative<RuleError>(r)) return "(accepted)";
  return std::get<RuleError>(r).message();
}

Credential credential(std::string_view text, std::string_view value) {
  auto s = spec(text);
  return Credential{s, header_value(s, value)};
}

TEST(CredentialGrammar, DefaultsToAuthorizationBearer) {
  const auto s = spec("GH_TOKEN=api.github.com:443");
  EXPECT_EQ(s.name, "GH_TOKEN");
  EXPECT_EQ(s.host.text, "api.github.com:443");
  EXPECT_EQ(s.header, "Authorization");
  EXPECT_EQ(s.format, "Bearer {}");
  EXPECT_EQ(s.text(), "GH_TOKEN=api.github.com:443,header=Authorization,format=Bearer {}");
}

TEST(CredentialGrammar, TakesHeaderFormatAndGlobs) {
  const auto s = spec("NPM=*.npmjs.org:4*,header=X-Api-Key,format={}");
  EXPECT_EQ(s.host.text, "*.npmjs.org:4*");
  EXPECT_EQ(s.header, "X-Api-Key");
  EXPECT_EQ(s.format, "{}");
  EXPECT_EQ(spec("P=upload.pypi.org:443,format=basic:__token__").format, "basic:__token__");
  EXPECT_EQ(spec("IP=[2001:db8::1]:443").host.text, "[2001:db8::1]:443");
}

TEST(CredentialGrammar, RefusesWhatCouldRedirectOrInjectAndSaysWhy) {
  EXPECT_NE(error_of("api.github.com:443").find("NAME=HOST:PORT"), std::string::npos);
  EXPECT_NE(error_of("1X=a.test:443").find("start with a digit"), std::string::npos);
  EXPECT_NE(error_of("A-B=a.test:443").find("letters, digits"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,header=Host").find("not one a credential may set"),
            std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,header=transfer-ENCODING").find("may set"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,header=Proxy-Authorization").find("may set"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,header=Bad Name").find("field name"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,format=Bearer").find("exactly once"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,format={}{}").find("exactly once"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,format=basic:a:b").find("may not contain ':'"),
            std::string::npos);
  EXPECT_NE(error_of("A=a.test:443 GET /x").find("host"), std::string::npos);
  EXPECT_NE(error_of("A=10.0.0.1:443").find("host"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,colour=red").find("unknown option \"colour\""),
            std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,header=X,header=Y").find("twice"), std::string::npos);
  EXPECT_NE(error_of("A=a.test:443,").find("empty option"), std::string::npos);
  EXPECT_NE(error_of(std::string("A=a.test:443,format=x{}\r\nEvil: 1")).find("control"),
            std::string::npos);
}

TEST(CredentialGrammar, HandsUnknownOptionsToACallerThatAsks) {
  std::vector<std::pair<std::string, std::string>> extra;
  auto r = parse_credential("A=a.test:443,file=/run/a,header=X-Key,stdin", &extra);
  ASSERT_TRUE(std::holds_alternative<CredentialSpec>(r));
  EXPECT_EQ(std::get<CredentialSpec>(r).header, "X-Key");
  ASSERT_EQ(extra.size(), 2u);
  EXPECT_EQ(extra[0], (std::pair<std::string, std::string>{"file", "/run/a"}));
  EXPECT_EQ(extra[1], (std::pair<std::string, std::string>{"stdin", ""}));
}

TEST(CredentialValue, FormatsBearerRawAndBasic) {
  EXPECT_EQ(header_value(spec("A=a.test:443"), "tok123")->reveal(), "Bearer tok123");
  EXPECT_EQ(header_value(spec("A=a.test:443,format=token {} v2"), "t")->reveal(), "token t v2");
  // RFC 7617's example: Aladdin / open sesame.
  EXPECT_EQ(header_value(spec("A=a.test:443,format=basic:Aladdin"), "open sesame")->reveal(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
  EXPECT_EQ(header_value(spec("A=a.test:443,format=basic:u"), "p")->reveal(), "Basic dTpw");
  EXPECT_EQ(header_value(spec("A=a.test:443,format=basic:"), "ab")->reveal(), "Basic OmFi");
}

TEST(CredentialValue, RefusesAValueThatWouldWriteAnotherLineWithoutQuotingIt) {
  const auto s = spec("A=a.test:443");
  for (std::string_view bad :
       {std::string_view("x\r\nEvil: 1"), std::string_view("a\nb"), std::string_view("a\0b", 3),
        std::string_view(""), std::string_view(" padded")}) {
    try {
      header_value(s, bad);
      ADD_FAILURE() << "accepted a bad value";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      if (bad.size() > 2) {
        EXPECT_EQ(what.find(bad), std::string::npos) << what;
      }
    }
  }
  EXPECT_THROW(header_value(s, std::string(secret::SecretBytes::kMaxValue + 1, 'a')),
               std::invalid_argument);
  EXPECT_NO_THROW(header_value(s, std::string(secret::SecretBytes::kMaxValue, 'a')));
}

TEST(CredentialMatch, ExactWildcardPortAndIp) {
  EXPECT_TRUE(credential_matches(spec("A=api.github.com:443"), "api.github.com", 443));
  EXPECT_FALSE(credential_matches(spec("A=api.github.com:443"), "api.github.com", 80));
  EXPECT_FALSE(credential_matches(spec("A=api.github.com:443"), "evil-api.github.com", 443));
  EXPECT_FALSE(credential_matches(spec("A=api.github.com:443"), "github.com", 443));
  EXPECT_TRUE(credential_matches(spec("A=*.github.com:*"), "x.api.github.com", 8443));
  EXPECT_FALSE(credential_matches(spec("A=*.github.com:*"), "github.com", 443));
  EXPECT_FALSE(credential_matches(spec("A=*.github.com:*"), "evilgithub.com", 443));
  EXPECT_TRUE(credential_matches(spec("A=203.0.113.7:443"), "203.0.113.7", 443));
  EXPECT_FALSE(credential_matches(spec("A=203.0.113.7:443"), "203.0.113.8", 443));
}

std::shared_ptr<const Snapshot> rules(std::vector<std::string> http) {
  RuleSet r;
  r.allow_http = std::move(http);
  return std::get<std::shared_ptr<const Snapshot>>(compile(r, 1));
}

TEST(CredentialSnapshot, MakesItsHostInspectedButAllowsNothing) {
  auto base = rules({"api.test:443"});
  EXPECT_FALSE(decide_http("api.test", 443, *base).inspect);
  auto with = with_credential(*base, credential("A=api.test:443", "s"));
  const auto d = decide_http("API.test.", 443, *with);
  EXPECT_EQ(d.verdict, Verdict::allow);
  EXPECT_TRUE(d.inspect);
  EXPECT_FALSE(d.per_request);
  // A credential for a host no rule allows: still refused.
  auto alone = with_credential(*rules({}), credential("A=api.test:443", "s"));
  EXPECT_EQ(decide_http("api.test", 443, *alone).verdict, Verdict::deny);
  EXPECT_FALSE(decide_http("other.test", 443, *with).inspect);
}

TEST(CredentialSnapshot, ReplacesByNameRemovesAndLeavesTheBaseAsItWas) {
  auto base = rules({"api.test:443"});
  auto one = with_credential(*base, credential("A=api.test:443", "first"));
  auto two = with_credential(*one, credential("A=api.test:443", "second"));
  ASSERT_EQ(two->credentials->size(), 1u);
  EXPECT_EQ(two->credentials->front().value->reveal(), "Bearer second");
  EXPECT_EQ(one->credentials->front().value->reveal(), "Bearer first");
  EXPECT_EQ(without_credential(*two, "B"), nullptr);
  auto none = without_credential(*two, "A");
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->credentials, nullptr);
  EXPECT_FALSE(decide_http("api.test", 443, *none).inspect);
  EXPECT_EQ(base->credentials, nullptr);
}

TEST(CredentialSnapshot, FirstPerHeaderWinsAndConflictsAreFound) {
  auto base = rules({"api.test:443"});
  auto s = with_credential(*base, credential("A=api.test:443", "a"));
  s = with_credential(*s, credential("B=*.test:443", "b"));
  s = with_credential(*s, credential("C=api.test:443,header=X-Key,format={}", "c"));
  std::vector<const Credential*> out;
  credentials_for("Api.Test", 443, *s, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]->spec.name, "A");
  EXPECT_EQ(out[1]->spec.name, "C");
  credentials_for("other.test", 443, *s, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->spec.name, "B");
  credentials_for("api.test", 80, *s, out);
  EXPECT_TRUE(out.empty());
  EXPECT_NE(credential_conflict(*s, spec("D=api.test:443,header=authorization")), nullptr);
  EXPECT_EQ(credential_conflict(*s, spec("A=api.test:443")), nullptr);  // itself: a replacement
  EXPECT_EQ(credential_conflict(*s, spec("D=api.test:8443")), nullptr);
}

}  // namespace
}  // namespace vibepit::policy
