// Method and path rules (request_rule.hpp): the grammar, request paths as the rules see
// them, the glob, and the decisions over a snapshot that has such rules.
#include "vibepit/policy/request_rule.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "path_glob_reference.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/rules.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {
namespace {

RequestRule rule(std::string_view methods, std::string_view path) {
  auto r = parse_request_rule(methods, path);
  if (auto* e = std::get_if<std::string>(&r)) ADD_FAILURE() << methods << " " << path << ": " << *e;
  return std::get_if<RequestRule>(&r) ? std::get<RequestRule>(r) : RequestRule{};
}

TEST(RequestRuleGrammar, CanonicalText) {
  EXPECT_EQ(rule("GET,HEAD", "/repos/acme/**").text, "GET,HEAD /repos/acme/**");
  EXPECT_EQ(rule("HEAD,GET,GET", "/a").text, "GET,HEAD /a");
  EXPECT_EQ(rule("*", "/**").text, "* /**");
  EXPECT_EQ(rule("POST", "/").text, "POST /");
  EXPECT_EQ(rule("GET", "/%7euser/%2a/x%3ay").text, "GET /~user/%2A/x%3Ay");
  EXPECT_EQ(rule("GET", "/a/*/b/").text, "GET /a/*/b/");
  EXPECT_EQ(rule("M-SEARCH", "/x").text, "M-SEARCH /x");
}

TEST(RequestRuleGrammar, Errors) {
  struct Case {
    const char *methods, *path, *what;
  };
  const Case cases[] = {
      {"get", "/a", "upper case"},        {"GET,", "/a", "empty method"},
      {"GET,*", "/a", "alone"},           {"G1", "/a", "letters"},
      {"GET", "a/b", "start with '/'"},   {"GET", "", "start with '/'"},
      {"GET", "/a?x=1", "query"},         {"GET", "/a#f", "fragment"},
      {"GET", "/a*/b", "whole segment"},  {"GET", "/***", "whole segment"},
      {"GET", "/a/../b", "'..'"},         {"GET", "/a/./b", "'..'"},
      {"GET", "/a%2Fb", "encoded '/'"},   {"GET", "/a%5cb", "encoded '/'"},
      {"GET", "/a\\b", "'\\'"},           {"GET", "/a%00", "NUL"},
      {"GET", "/a%zz", "two hex digits"}, {"GET", "/a%4", "two hex digits"},
      {"GET", "/a b", "percent-encoded"}, {"GET", "/a\"b", "percent-encoded"},
  };
  for (const auto& c : cases) {
    auto r = parse_request_rule(c.methods, c.path);
    const auto* e = std::get_if<std::string>(&r);
    ASSERT_NE(e, nullptr) << c.methods << " " << c.path;
    EXPECT_NE(e->find(c.what), std::string::npos) << c.methods << " " << c.path << ": " << *e;
  }
  std::string many = "A";
  for (char c = 'B'; c <= 'R'; ++c) many += std::string(",") + c;
  EXPECT_NE(std::get<std::string>(parse_request_rule(many, "/")).find("16"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 65; ++i) deep += "/a";
  EXPECT_NE(std::get<std::string>(parse_request_rule("GET", deep)).find("64"), std::string::npos);
  EXPECT_NE(
      std::get<std::string>(parse_request_rule("GET", "/" + std::string(1024, 'a'))).find("1024"),
      std::string::npos);
}

TEST(RequestRuleGrammar, InAnAllowHttpEntry) {
  auto r = parse_http_rule("API.GitHub.com:443 GET,HEAD /repos/acme/**");
  ASSERT_TRUE(std::holds_alternative<HttpRule>(r)) << std::get<RuleError>(r).message();
  const auto& h = std::get<HttpRule>(r);
  EXPECT_EQ(h.text, "api.github.com:443 GET,HEAD /repos/acme/**");
  ASSERT_TRUE(h.request.has_value());
  EXPECT_EQ(h.request->text, "GET,HEAD /repos/acme/**");
  EXPECT_FALSE(std::get<HttpRule>(parse_http_rule("api.github.com:443")).request.has_value());
  for (const char* bad : {"a.test:443 GET", "a.test:443  GET /x", "a.test:443 GET /x ",
                          " a.test:443", "a.test:443 GET\t/x", "a.test:443 GET /x /y",
                          "a.test:443\tGET /x", "a.test:443 get /x", "foo*.test:443 GET /x"}) {
    auto e = parse_http_rule(bad);
    ASSERT_TRUE(std::holds_alternative<RuleError>(e)) << bad;
    EXPECT_EQ(std::get<RuleError>(e).entry, bad);
    EXPECT_EQ(std::get<RuleError>(e).list, "allow-http");
  }
}

TEST(NormalizePath, Table) {
  struct Case {
    const char *in, *path, *query;
  };
  const Case ok[] = {
      {"/", "/", ""},
      {"/a/b?x=1&y=%2F", "/a/b", "?x=1&y=%2F"},
      {"/a/./b", "/a/b", ""},
      {"/a/b/../c", "/a/c", ""},
      {"/a/b/..", "/a/", ""},
      {"/a/b/.", "/a/b/", ""},
      {"/a//b", "/a//b", ""},
      {"/%7Euser/%41%62%2d%5f%2e", "/~user/Ab-_.", ""},
      {"/x%3ay%2a", "/x%3Ay%2A", ""},
      {"/a/", "/a/", ""},
      {"/a/%2E%2Ex", "/a/..x", ""},  // not a dot segment: an ordinary name
      {"/a/...", "/a/...", ""},
      {"/a?", "/a", "?"},
  };
  for (const auto& c : ok) {
    auto n = normalize_path(c.in);
    EXPECT_EQ(n.error, "") << c.in;
    EXPECT_EQ(n.path, c.path) << c.in;
    EXPECT_EQ(n.query, c.query) << c.in;
  }
  struct Bad {
    const char *in, *what;
  };
  const Bad bad[] = {
      {"", "start with '/'"},
      {"*", "start with '/'"},
      {"a/b", "start with '/'"},
      {"/..", "above the root"},
      {"/a/../..", "above the root"},
      {"/a/%2e%2e/b", "encoded '.'"},
      {"/a/%2E/b", "encoded '.'"},
      {"/a/.%2e", "encoded '.'"},
      {"/a%2Fb", "encoded '/'"},
      {"/a%2fb", "encoded '/'"},
      {"/a%5Cb", "encoded '/'"},
      {"/a\\..\\b", "'\\'"},
      {"/a%00b", "NUL"},
      {"/a%", "two hex digits"},
      {"/a%g0", "two hex digits"},
      {"/a b", "printable ASCII"},
      {"/a\x7f", "printable ASCII"},
      {"/a\xc3\xa9", "printable ASCII"},
      {"/a#frag", "fragment"},
  };
  for (const auto& c : bad) {
    auto n = normalize_path(c.in);
    EXPECT_NE(n.error.find(c.what), std::string::npos) << c.in << ": " << n.error;
  }
  EXPECT_NE(normalize_path("/" + std::string(kMaxRequestPath, 'a')).error.find("longer"),
            std::string::npos);
}

TEST(RequestRuleMatch, Table) {
  const auto acme = rule("GET,HEAD", "/repos/acme/**");
  EXPECT_TRUE(acme.matches("GET", "/repos/acme"));
  EXPECT_TRUE(acme.matches("GET", "/repos/acme/"));
  EXPECT_TRUE(acme.matches("HEAD", "/repos/acme/widget/pulls/1"));
  EXPECT_FALSE(acme.matches("POST", "/repos/acme/widget"));
  EXPECT_FALSE(acme.matches("get", "/repos/acme/widget"));
  EXPECT_FALSE(acme.matches("GET", "/repos/acmex/widget"));
  EXPECT_FALSE(acme.matches("GET", "/gists"));
  EXPECT_FALSE(acme.matches("GET", "/repos"));
  const auto one = rule("*", "/a/*/c");
  EXPECT_TRUE(one.matches("DELETE", "/a/b/c"));
  EXPECT_FALSE(one.matches("GET", "/a//c"));
  EXPECT_FALSE(one.matches("GET", "/a/b/b/c"));
  EXPECT_FALSE(one.matches("GET", "/a/c"));
  const auto root = rule("GET", "/");
  EXPECT_TRUE(root.matches("GET", "/"));
  EXPECT_FALSE(root.matches("GET", "/a"));
  const auto any = rule("GET", "/**");
  EXPECT_TRUE(any.matches("GET", "/"));
  EXPECT_TRUE(any.matches("GET", "/a/b/c/"));
  const auto mid = rule("GET", "/a/**/z/*");
  EXPECT_TRUE(mid.matches("GET", "/a/z/1"));
  EXPECT_TRUE(mid.matches("GET", "/a/b/c/z/1"));
  EXPECT_TRUE(mid.matches("GET", "/a/z/z/z/1"));
  EXPECT_FALSE(mid.matches("GET", "/a/b/z"));
  EXPECT_FALSE(mid.matches("GET", "/a/b/z/1/2"));
}

TEST(RequestRuleMatch, AgreesWithAPlainRecursiveReading) {
  // Every glob of up to four segments over {a, *, **} against every path of up to five
  // segments over {a, b, ""}.
  const std::vector<std::string> parts = {"a", "*", "**"};
  const std::vector<std::string> names = {"a", "b", ""};
  std::vector<std::vector<std::string>> globs = {{}};
  for (int len = 0; len < 4; ++len) {
    const auto n = globs.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (globs[i].size() != static_cast<std::size_t>(len)) continue;
      for (const auto& p : parts) {
        auto g = globs[i];
        g.push_back(p);
        globs.push_back(g);
      }
    }
  }
  std::vector<std::vector<std::string>> seg_lists = {{}};
  std::vector<std::string> paths;
  for (int len = 1; len <= 5; ++len) {
    std::vector<std::vector<std::string>> longer;
    for (const auto& l : seg_lists) {
      for (const auto& s : names) {
        auto m = l;
        m.push_back(s);
        std::string path;
        for (const auto& x : m) path += "/" + x;
        paths.push_back(path);
        longer.push_back(m);
      }
    }
    seg_lists = std::move(longer);
  }
  int checked = 0;
  for (const auto& g : globs) {
    if (g.empty()) continue;
    RequestRule r;
    r.segments = g;
    for (const auto& p : paths) {
      ASSERT_EQ(r.matches_path(p), reference::glob_matches(g, 0, reference::path_segments(p), 0))
          << testing::PrintToString(g) << " " << p;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 120 * 363);
}

std::shared_ptr<const Snapshot> snapshot(std::vector<std::string> http, Mode mode = Mode::enforce) {
  RuleSet rs;
  rs.allow_http = std::move(http);
  rs.mode = mode;
  auto c = compile(rs, 1);
  if (auto* e = std::get_if<std::vector<RuleError>>(&c)) {
    ADD_FAILURE() << e->front().message();
    return nullptr;
  }
  return std::get<std::shared_ptr<const Snapshot>>(c);
}

TEST(RequestDecision, OnlyPathRulesAllowOnlyTheirRequests) {
  auto s = snapshot({"api.github.com:443 GET,HEAD /repos/acme/**", "*.pkg.test:443 * /simple/**"});
  auto tunnel = decide_http("api.github.com", 443, *s);
  EXPECT_EQ(tunnel.verdict, Verdict::allow);
  EXPECT_TRUE(tunnel.inspect);
  EXPECT_TRUE(tunnel.per_request);
  EXPECT_EQ(tunnel.rule, "api.github.com:443 GET,HEAD /repos/acme/**");

  auto ok = decide_request("api.github.com", 443, "GET", "/repos/acme/x", *s);
  EXPECT_EQ(ok.verdict, Verdict::allow);
  EXPECT_EQ(ok.rule, "api.github.com:443 GET,HEAD /repos/acme/**");
  auto gist = decide_request("api.github.com", 443, "POST", "/gists", *s);
  EXPECT_EQ(gist.verdict, Verdict::deny);
  EXPECT_EQ(gist.reason, Reason::not_allowlisted);
  EXPECT_TRUE(gist.inspect);
  EXPECT_EQ(gist.rule, "");
  EXPECT_EQ(decide_request("api.github.com", 80, "GET", "/repos/acme/x", *s).verdict,
            Verdict::deny);
  EXPECT_FALSE(decide_http("api.github.com", 80, *s).inspect);
  EXPECT_EQ(decide_request("a.pkg.test", 443, "PUT", "/simple/x", *s).verdict, Verdict::allow);
  EXPECT_EQ(decide_request("a.pkg.test", 443, "PUT", "/other", *s).verdict, Verdict::deny);
}

TEST(RequestDecision, APlainRuleAllowsEveryRequestButTheHostIsStillInspected) {
  auto s = snapshot({"api.github.com:443 GET /repos/**", "api.github.com:443"});
  auto d = decide_request("api.github.com", 443, "POST", "/gists", *s);
  EXPECT_EQ(d.verdict, Verdict::allow);
  EXPECT_EQ(d.rule, "api.github.com:443");
  EXPECT_TRUE(d.inspect);
  EXPECT_FALSE(d.per_request);
  auto plain_only = snapshot({"api.github.com:443"});
  EXPECT_FALSE(decide_http("api.github.com", 443, *plain_only).inspect);
}

TEST(RequestDecision, AuditModeLetsAnUnmatchedRequestThroughAsWouldDeny) {
  auto s = snapshot({"api.github.com:443 GET /repos/**"}, Mode::audit);
  auto d = decide_request("api.github.com", 443, "POST", "/gists", *s);
  EXPECT_EQ(d.verdict, Verdict::allow);
  EXPECT_TRUE(d.would_deny);
}

TEST(RequestDecision, AddedAtRuntimeAndDeduplicated) {
  auto s = snapshot({"api.github.com:443"});
  ParsedRules more;
  more.allow_http.push_back(std::get<HttpRule>(parse_http_rule("api.github.com:443 GET /x")));
  more.allow_http.push_back(std::get<HttpRule>(parse_http_rule("api.github.com:443 GET /x")));
  auto next = with_added(*s, std::move(more));
  EXPECT_EQ(next->http.size(), 2u);
  EXPECT_TRUE(decide_http("api.github.com", 443, *next).inspect);
  EXPECT_FALSE(decide_http("api.github.com", 443, *s).inspect);
}

}  // namespace
}  // namespace vibepit::policy
