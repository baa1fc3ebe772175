// The watched rules file's shape: network.yaml's keys plus tenants, every error naming the
// file, line and column; and how its rules join the configuration's.
#include <gtest/gtest.h>

#include "vibepit/config/rules_file.hpp"

namespace vibepit::config {
namespace {

TEST(RulesFileTest, ReadsTheTopLevelAndEachTenant) {
  const auto f = parse_rules_file(
      "# comment\n"
      "allow-http: [a.test:443, 'b.test:443 GET /x/**']\n"
      "allow-dns:\n  - a.test\n"
      "tenants:\n"
      "  team-a:\n    allow-http: [c.test:443]\n"
      "  team-b: {}\n"
      "  team-c:\n",
      "rules.yaml");
  EXPECT_EQ(f.allow_http, (std::vector<std::string>{"a.test:443", "b.test:443 GET /x/**"}));
  EXPECT_EQ(f.allow_dns, (std::vector<std::string>{"a.test"}));
  ASSERT_EQ(f.tenants.size(), 3u);
  EXPECT_EQ(f.tenants[0].name, "team-a");
  EXPECT_EQ(f.tenants[0].allow_http, (std::vector<std::string>{"c.test:443"}));
  EXPECT_TRUE(f.tenants[1].allow_http.empty() && f.tenants[2].allow_dns.empty());
  // Empty and comment-only files hold no rules.
  EXPECT_TRUE(parse_rules_file("", "r").allow_http.empty());
  EXPECT_TRUE(parse_rules_file("# nothing\n", "r").tenants.empty());
}

TEST(RulesFileTest, ErrorsNameTheFileLineAndProblem) {
  struct Case {
    const char* text;
    const char* words;
  } cases[] = {
      {"allow-http: [a.test:443\n", "rules.yaml:"},
      {"- a\n- b\n", "top level must be a mapping"},
      {"allow-https: [a.test:443]\n", "unknown key \"allow-https\""},
      {"allow-http: a.test:443\n", "allow-http must be a list"},
      {"allow-http: [[a]]\n", "entries must be strings"},
      {"allow-dns: [a]\nallow-dns: [b]\n", "appears twice"},
      {"presets: [github]\n", "unknown key \"presets\""},
      {"tenants: [a, b]\n", "tenants must map"},
      {"tenants:\n  a: [x]\n", "must be a mapping"},
      {"tenants:\n  a:\n    tenants: {}\n", "rules.yaml:3:5: unknown key \"tenants\""},
      {"tenants:\n  a: {}\n  a: {}\n", "appears twice"},
      {"tenants:\n  [a]: {}\n", "name must be a string"},
  };
  for (const auto& c : cases) {
    try {
      parse_rules_file(c.text, "rules.yaml");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const RulesFileError& e) {
      EXPECT_NE(std::string(e.what()).find(c.words), std::string::npos)
          << c.text << " -> " << e.what();
    }
  }
}

TEST(RulesFileTest, MergesIntoTheConfigurationsRules) {
  policy::RuleSet base;
  base.allow_http = {"base.test:443"};
  base.tenants = {{"team-a", {"a0.test:443"}, {}}, {"team-b", {}, {}}};
  const auto f = parse_rules_file(
      "allow-http: [file.test:443]\ntenants:\n  team-b:\n    allow-dns: [b.test]\n", "r");
  const auto merged = merge_rules(base, f);
  EXPECT_EQ(merged.allow_http, (std::vector<std::string>{"base.test:443", "file.test:443"}));
  EXPECT_EQ(merged.tenants[0].allow_http, (std::vector<std::string>{"a0.test:443"}));
  EXPECT_EQ(merged.tenants[1].allow_dns, (std::vector<std::string>{"b.test"}));
  const auto stranger = parse_rules_file("tenants:\n  team-z: {}\n", "r");
  EXPECT_THROW(merge_rules(base, stranger), RulesFileError);
}

}  // namespace
}  // namespace vibepit::config
