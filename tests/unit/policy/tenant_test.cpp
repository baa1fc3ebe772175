// Tenants: a request is decided by the top-level rules plus its own tenant's, never another's;
// DNS answers the union unless it knows the tenant; tokens are checked whole.
#include <gtest/gtest.h>

#include <cstring>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/tenant.hpp"

namespace vibepit::policy {
namespace {

RuleSet two_tenants() {
  RuleSet rules;
  rules.allow_http = {"shared.test:443"};
  rules.allow_dns = {"shared.test"};
  rules.tenants = {
      {"alpha", {"alpha.test:443", "api.test:443 GET /alpha/**"}, {"alpha.test"}},
      {"beta", {"*.beta.test:80"}, {"*.beta.test"}},
  };
  return rules;
}

std::shared_ptr<Snapshot> compiled(const RuleSet& rules) {
  auto r = compile_mutable(rules, 1);
  if (auto* e = std::get_if<std::vector<RuleError>>(&r)) {
    ADD_FAILURE() << e->front().message();
    return std::make_shared<Snapshot>();
  }
  return std::get<std::shared_ptr<Snapshot>>(std::move(r));
}

secret::SharedSecret token(std::string_view text) {
  auto s = std::make_shared<secret::SecretBytes>(text.size());
  s->append(text);
  return s;
}

TEST(TenantTest, EachTenantGetsTheTopLevelRulesAndItsOwnOnly) {
  auto snap = compiled(two_tenants());
  const TenantId alpha = find_tenant(*snap, "alpha");
  const TenantId beta = find_tenant(*snap, "beta");
  ASSERT_EQ(alpha, 0);
  ASSERT_EQ(beta, 1);
  EXPECT_EQ(find_tenant(*snap, "gamma"), kNoTenant);
  EXPECT_EQ(find_tenant(*snap, "ALPHA"), kNoTenant);  // names are exact

  auto verdict = [&](std::string_view host, std::uint16_t port, TenantId t) {
    return decide_http(host, port, *snap, t).verdict;
  };
  EXPECT_EQ(verdict("shared.test", 443, alpha), Verdict::allow);
  EXPECT_EQ(verdict("shared.test", 443, beta), Verdict::allow);
  EXPECT_EQ(verdict("shared.test", 443, kNoTenant), Verdict::allow);
  EXPECT_EQ(verdict("alpha.test", 443, alpha), Verdict::allow);
  EXPECT_EQ(verdict("alpha.test", 443, beta), Verdict::deny);
  EXPECT_EQ(verdict("alpha.test", 443, kNoTenant), Verdict::deny);
  EXPECT_EQ(verdict("x.beta.test", 80, beta), Verdict::allow);
  EXPECT_EQ(verdict("x.beta.test", 80, alpha), Verdict::deny);
  EXPECT_EQ(decide_http("alpha.test", 443, *snap, alpha).rule, "alpha.test:443");

  // A tenant's method/path rule inspects its host for that tenant only.
  const Decision d = decide_http("api.test", 443, *snap, alpha);
  EXPECT_TRUE(d.inspect);
  EXPECT_TRUE(d.per_request);
  EXPECT_EQ(decide_request("api.test", 443, "GET", "/alpha/x", *snap, alpha).verdict,
            Verdict::allow);
  EXPECT_EQ(decide_request("api.test", 443, "GET", "/beta/x", *snap, alpha).verdict, Verdict::deny);
  EXPECT_EQ(decide_request("api.test", 443, "GET", "/alpha/x", *snap, beta).verdict, Verdict::deny);
  EXPECT_FALSE(decide_http("api.test", 443, *snap, beta).inspect);
}

TEST(TenantTest, DnsAnswersTheUnionUnlessItKnowsTheTenant) {
  auto snap = compiled(two_tenants());
  auto verdict = [&](std::string_view name, TenantId t) {
    return decide_dns(name, *snap, t).verdict;
  };
  EXPECT_EQ(verdict("shared.test", kEveryTenant), Verdict::allow);
  EXPECT_EQ(verdict("alpha.test", kEveryTenant), Verdict::allow);
  EXPECT_EQ(verdict("a.beta.test", kEveryTenant), Verdict::allow);
  EXPECT_EQ(verdict("other.test", kEveryTenant), Verdict::deny);
  EXPECT_EQ(verdict("alpha.test", 0), Verdict::allow);
  EXPECT_EQ(verdict("a.beta.test", 0), Verdict::deny);
  EXPECT_EQ(verdict("shared.test", 1), Verdict::allow);
  EXPECT_EQ(verdict("alpha.test", kNoTenant), Verdict::deny);
  EXPECT_EQ(verdict("shared.test", kNoTenant), Verdict::allow);
}

TEST(TenantTest, RulesAddedForOneTenantReachOnlyIt) {
  auto snap = compiled(two_tenants());
  ParsedRules added;
  added.allow_http.push_back(std::get<HttpRule>(parse_http_rule("late.test:443")));
  added.allow_dns.push_back(std::get<DnsRule>(parse_dns_rule("late.test")));
  auto next = with_added(*snap, std::move(added), 1);
  EXPECT_EQ(decide_http("late.test", 443, *next, 1).verdict, Verdict::allow);
  EXPECT_EQ(decide_http("late.test", 443, *next, 0).verdict, Verdict::deny);
  EXPECT_EQ(decide_http("late.test", 443, *snap, 1).verdict, Verdict::deny);  // base unchanged
  EXPECT_EQ(decide_dns("late.test", *next, 1).verdict, Verdict::allow);
  EXPECT_EQ(decide_dns("late.test", *next, 0).verdict, Verdict::deny);
  EXPECT_EQ(decide_dns("late.test", *next, kEveryTenant).verdict, Verdict::allow);
  EXPECT_EQ(decide_dns("late.test", *snap, kEveryTenant).verdict, Verdict::deny);
  EXPECT_TRUE(has_rule(*next, std::get<HttpRule>(parse_http_rule("late.test:443")), 1));
  EXPECT_FALSE(has_rule(*next, std::get<HttpRule>(parse_http_rule("late.test:443")), 0));
  ASSERT_EQ((*next->tenants)[1].allow_http.size(), 2u);
  EXPECT_EQ((*next->tenants)[1].allow_http[1], "late.test:443");
  EXPECT_THROW(with_added(*snap, {}, 7), std::invalid_argument);
}

TEST(TenantTest, AuthenticationNeedsTheTenantsWholeToken) {
  auto base = compiled(two_tenants());
  EXPECT_EQ(authenticate(*base, "alpha", ""), kNoTenant);  // no token read: nobody is alpha
  auto snap = with_tenant_tokens(*base, {{token("alpha-token-0123456789")}, {}});
  EXPECT_EQ(authenticate(*snap, "alpha", "alpha-token-0123456789"), 0);
  EXPECT_EQ(authenticate(*snap, "alpha", "alpha-token-012345678"), kNoTenant);
  EXPECT_EQ(authenticate(*snap, "alpha", "alpha-token-0123456789x"), kNoTenant);
  EXPECT_EQ(authenticate(*snap, "beta", "alpha-token-0123456789"), kNoTenant);
  EXPECT_EQ(authenticate(*snap, "beta", ""), kNoTenant);
  EXPECT_EQ(authenticate(*snap, "gamma", "alpha-token-0123456789"), kNoTenant);
  // Rules added later keep the tokens.
  auto next = with_added(*snap, {}, 1);
  EXPECT_EQ(authenticate(*next, "alpha", "alpha-token-0123456789"), 0);
  EXPECT_THROW(with_tenant_tokens(*base, {}), std::invalid_argument);
}

TEST(TenantTest, EitherOfTwoTokensProvesTheTenantWhileItChanges) {
  auto base = compiled(two_tenants());
  auto both = with_tenant_tokens(
      *base, {{token("alpha-old-token-0123"), token("alpha-new-token-4567")}, {}});
  EXPECT_EQ(authenticate(*both, "alpha", "alpha-old-token-0123"), 0);
  EXPECT_EQ(authenticate(*both, "alpha", "alpha-new-token-4567"), 0);
  EXPECT_EQ(authenticate(*both, "alpha", "alpha-old-token-0123alpha-new-token-4567"), kNoTenant);
  EXPECT_EQ(authenticate(*both, "alpha", "alpha-new-token-456"), kNoTenant);
  EXPECT_EQ(authenticate(*both, "beta", "alpha-new-token-4567"), kNoTenant);
  // The rotation's end: the new one alone, and the old one proves nothing.
  auto after = with_tenant_tokens(*both, {{token("alpha-new-token-4567")}, {}});
  EXPECT_EQ(authenticate(*after, "alpha", "alpha-new-token-4567"), 0);
  EXPECT_EQ(authenticate(*after, "alpha", "alpha-old-token-0123"), kNoTenant);
}

TEST(TenantTest, ATokenFileHoldsOneOrTwoTokensALine) {
  auto reveal = [](const TenantTokens& t, std::size_t i) {
    return t[i] ? std::string(t[i]->reveal()) : std::string("(none)");
  };
  const auto one = split_tenant_tokens("0123456789abcdef");
  EXPECT_EQ(reveal(one, 0), "0123456789abcdef");
  EXPECT_EQ(reveal(one, 1), "(none)");
  for (const char* text :
       {"0123456789abcdef\nfedcba9876543210", "0123456789abcdef\r\nfedcba9876543210\r"}) {
    const auto two = split_tenant_tokens(text);
    EXPECT_EQ(reveal(two, 0), "0123456789abcdef") << text;
    EXPECT_EQ(reveal(two, 1), "fedcba9876543210") << text;
  }
  const std::string secretish = "s3cr3t-s3cr3t-s3cr3t";
  const struct {
    std::string text;
    std::string error;
  } bad[] = {
      {"", "line 1: a tenant's token has at least 16 characters"},
      {secretish + "\n", "line 2: a tenant's token has at least 16 characters"},
      {secretish + "\n\n" + secretish, "line 2: a tenant's token has at least 16 characters"},
      {secretish + "\n" + secretish + " x",
       "line 2: a tenant's token has only printable ASCII, without spaces"},
      {secretish + "\n" + secretish + "\n" + secretish,
       "more than 2 lines: a tenant has one token, or two while it changes"},
  };
  for (const auto& b : bad) {
    try {
      split_tenant_tokens(b.text);
      ADD_FAILURE() << "accepted: " << b.text;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), b.error);
      EXPECT_EQ(std::string(e.what()).find("s3cr3t"), std::string::npos);
    }
  }
}

TEST(TenantTest, NamesAndRulesAreCheckedWhole) {
  for (const char* bad : {"", "-a", ".a", "a:b", "a b", "ä", "a/b"}) {
    EXPECT_FALSE(tenant_name_problem(bad).empty()) << bad;
  }
  EXPECT_FALSE(tenant_name_problem(std::string(65, 'a')).empty());
  for (const char* good : {"a", "team-1", "Team_2.x", "9"}) {
    EXPECT_TRUE(tenant_name_problem(good).empty()) << good;
  }
  RuleSet rules = two_tenants();
  rules.tenants.push_back({"alpha", {}, {}});
  rules.tenants.push_back({"gamma", {"*:443"}, {}});
  auto r = compile(rules, 1);
  ASSERT_TRUE(std::holds_alternative<std::vector<RuleError>>(r));
  const auto& errors = std::get<std::vector<RuleError>>(r);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].list, "tenants");
  EXPECT_NE(errors[0].message().find("two tenants"), std::string::npos);
  EXPECT_EQ(errors[1].list, "tenant gamma allow-http");
}

TEST(TenantTest, NoTenantsMeansNoList) {
  RuleSet rules;
  rules.allow_http = {"a.test:443"};
  auto snap = compiled(rules);
  EXPECT_EQ(snap->tenants, nullptr);
  EXPECT_EQ(authenticate(*snap, "a", "b"), kNoTenant);
  EXPECT_EQ(decide_http("a.test", 443, *snap, 3).verdict, Verdict::allow);  // unknown id: top level
}

}  // namespace
}  // namespace vibepit::policy
