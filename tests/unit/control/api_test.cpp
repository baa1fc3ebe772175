#include "vibepit/control/api.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vibepit/control/rule_updater.hpp"
#include "vibepit/policy/decision.hpp"

namespace vibepit::control {
namespace {

using json = nlohmann::json;

// A ring of `n` records numbered 1..n where the first `evicted` are gone.
class FakeFeed : public DecisionFeed {
 public:
  std::uint64_t n = 0, evicted = 0;
  std::vector<Entry> since(std::uint64_t after, std::size_t limit,
                           std::uint64_t& lost) const override {
    lost = after + 1 <= evicted ? evicted - after : 0;
    std::vector<Entry> out;
    for (auto s = std::max(after, evicted) + 1; s <= n && out.size() < limit; ++s) {
      out.push_back({s, "{\"id\":" + std::to_string(s * 10) + "}\n"});
    }
    return out;
  }
  std::uint64_t last_seq() const override { return n; }
};

class FakeStats : public StatsSource {
 public:
  std::string stats_json() const override { return "{\"totals\":{}}\n"; }
  std::string prometheus() const override { return "vibepit_x 1\n"; }
};

// Ask mode's table as a fake: two held requests, and what the API asked of it.
class FakePending : public PendingSource {
 public:
  AskSettings settings{true, 60'000, 64, 1024};
  std::vector<PendingView> held{{11, "CONNECT", "a.test", 443, "172.18.0.3:40000", 1, 1500, 58500},
                                {12, "GET", "b.test", 80, "172.18.0.3:40002", 2, 20, 59980}};
  std::vector<std::uint64_t> refused;

  AskSettings ask() const override { return settings; }
  AskSettings set_ask(std::optional<bool> enabled, std::optional<std::uint64_t> t) override {
    if (enabled) settings.enabled = *enabled;
    if (t) settings.timeout_ms = *t;
    return settings;
  }
  std::vector<PendingView> pending() const override { return held; }
  bool refuse(std::uint64_t id) override {
    for (auto it = held.begin(); it != held.end(); ++it) {
      if (it->id != id) continue;
      held.erase(it);
      refused.push_back(id);
      return true;
    }
    return false;
  }
};

std::shared_ptr<policy::Snapshot> initial() {
  policy::RuleSet rules;
  rules.allow_http = {"example.com:443"};
  rules.allow_dns = {"example.com"};
  return std::get<std::shared_ptr<policy::Snapshot>>(policy::compile_mutable(rules, 1));
}

class ApiTest : public ::testing::Test {
 protected:
  ApiTest()
      : store_(initial()),
        updater_(store_),
        api_(updater_, store_, feed_, stats_, limits()),
        asking_(updater_, store_, feed_, stats_, limits(), &pending_) {}
  static ApiLimits limits() {
    ApiLimits l;
    l.max_entries = 5;
    l.max_page = 50;
    return l;
  }
  ApiResponse call(std::string method, std::string path, std::string body = "",
                   std::vector<std::pair<std::string, std::string>> query = {}) {
    ApiRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.body.assign(body);
    r.query = std::move(query);
    return (with_pending_ ? asking_ : api_).handle(r);
  }
  static json body(const ApiResponse& r) { return json::parse(r.body); }

  policy::SnapshotStore store_;
  RuleUpdater updater_;
  FakeFeed feed_;
  FakeStats stats_;
  FakePending pending_;
  ControlApi api_;
  ControlApi asking_;          // the same, with ask mode's table
  bool with_pending_ = false;  // call() asks asking_
};

TEST_F(ApiTest, HealthAndRulesShowTheLiveSnapshot) {
  auto h = call("GET", "/v1/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(body(h)["status"], "ok");
  auto r = body(call("GET", "/v1/rules"));
  EXPECT_EQ(r["generation"], store_.generation());
  EXPECT_EQ(r["allow-http"], json::array({"example.com:443"}));
  EXPECT_EQ(r["allow-dns"], json::array({"example.com"}));
  EXPECT_TRUE(r["block-cidr"].empty());
}

TEST_F(ApiTest, TheInspectionCaCertificateIsServedWhenThereIsOne) {
  auto none = call("GET", "/v1/inspect-ca");
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(none.body.find("no inspection CA"), std::string::npos);
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  api_.set_inspect_ca(pem);
  auto got = call("GET", "/v1/inspect-ca");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.content_type, "application/x-pem-file");
  EXPECT_EQ(got.body, pem);
  auto post = call("POST", "/v1/inspect-ca", pem);
  EXPECT_EQ(post.status, 405);
}

TEST_F(ApiTest, AddIsIdempotentAndPublishesOneGeneration) {
  auto gen = store_.generation();
  auto r = call("POST", "/v1/allow-http",
                R"({"entries":["API.GitHub.com.:443","example.com:443","api.github.com:443"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = body(r);
  EXPECT_EQ(j["added"], json::array({"api.github.com:443"}));  // canonical form
  EXPECT_EQ(j["existing"], json::array({"example.com:443", "api.github.com:443"}));
  EXPECT_EQ(j["generation"], gen + 1);
  EXPECT_EQ(store_.generation(), gen + 1);
  // The very next decision sees the rule.
  auto snap = store_.current();
  EXPECT_EQ(policy::decide_http("api.github.com", 443, *snap).verdict, policy::Verdict::allow);

  // Nothing new: no new generation.
  auto again = body(call("POST", "/v1/allow-http", R"({"entries":["api.github.com:443"]})"));
  EXPECT_TRUE(again["added"].empty());
  EXPECT_EQ(again["generation"], gen + 1);
  EXPECT_EQ(store_.generation(), gen + 1);
}

TEST_F(ApiTest, DnsRulesReachTheDnsMatcher) {
  auto r = call("POST", "/v1/allow-dns", R"({"entries":["*.pypi.org"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto snap = store_.current();
  EXPECT_EQ(policy::decide_dns("files.pypi.org", *snap).verdict, policy::Verdict::allow);
  EXPECT_EQ(policy::decide_dns("pypi.org", *snap).verdict, policy::Verdict::deny);  // apex
}

TEST_F(ApiTest, RulesCanBeATenantsOwn) {
  // Without tenants, naming one is an error that says so.
  auto none = call("POST", "/v1/allow-http", R"({"entries":["a.test:443"],"tenant":"alpha"})");
  EXPECT_EQ(none.status, 400);
  EXPECT_NE(none.body.find("has none"), std::string::npos) << none.body;
  EXPECT_TRUE(body(call("GET", "/v1/rules"))["tenants"].empty());

  policy::RuleSet rules;
  rules.allow_http = {"example.com:443"};
  rules.tenants = {{"alpha", {"a.test:443"}, {}}, {"beta", {}, {"b.test"}}};
  store_.publish(std::get<std::shared_ptr<policy::Snapshot>>(policy::compile_mutable(rules)));
  auto r = call("POST", "/v1/allow-http", R"({"entries":["late.test:443"],"tenant":"beta"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body(r)["added"], json::array({"late.test:443"}));
  auto snap = store_.current();
  EXPECT_EQ(policy::decide_http("late.test", 443, *snap, 1).verdict, policy::Verdict::allow);
  EXPECT_EQ(policy::decide_http("late.test", 443, *snap, 0).verdict, policy::Verdict::deny);
  EXPECT_EQ(policy::decide_http("late.test", 443, *snap).verdict, policy::Verdict::deny);
  // The same entry for the top level is new there: a tenant's rule is not the top level's.
  auto top = body(call("POST", "/v1/allow-http", R"({"entries":["late.test:443"]})"));
  EXPECT_EQ(top["added"], json::array({"late.test:443"}));
  auto dns = call("POST", "/v1/allow-dns", R"({"entries":["*.late.test"],"tenant":"alpha"})");
  ASSERT_EQ(dns.status, 200) << dns.body;
  auto shown = body(call("GET", "/v1/rules"))["tenants"];
  EXPECT_EQ(shown["alpha"]["allow-http"], json::array({"a.test:443"}));
  EXPECT_EQ(shown["alpha"]["allow-dns"], json::array({"*.late.test"}));
  EXPECT_EQ(shown["beta"]["allow-http"], json::array({"late.test:443"}));
  EXPECT_EQ(shown["beta"]["allow-dns"], json::array({"b.test"}));
  for (const char* bad : {R"({"entries":["x.test:443"],"tenant":"gamma"})",
                          R"({"entries":["x.test:443"],"tenant":7})"}) {
    auto refused = call("POST", "/v1/allow-http", bad);
    EXPECT_EQ(refused.status, 400) << bad;
    EXPECT_NE(refused.body.find("must name a tenant"), std::string::npos) << refused.body;
  }
}

TEST_F(ApiTest, ModeSwitchesToAuditAndBack) {
  EXPECT_EQ(body(call("GET", "/v1/rules"))["mode"], "enforce");
  auto gen = store_.generation();
  auto r = call("POST", "/v1/mode", R"({"mode":"audit"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body(r)["changed"], true);
  EXPECT_EQ(body(r)["generation"], gen + 1);
  auto rules = body(call("GET", "/v1/rules"));
  EXPECT_EQ(rules["mode"], "audit");
  EXPECT_EQ(rules["allow-http"], json::array({"example.com:443"}));  // the rules stay
  auto d = policy::decide_http("other.example", 443, *store_.current());
  EXPECT_EQ(d.verdict, policy::Verdict::allow);
  EXPECT_TRUE(d.would_deny);
  // The same mode again publishes nothing.
  auto again = body(call("POST", "/v1/mode", R"({"mode":"audit"})"));
  EXPECT_EQ(again["changed"], false);
  EXPECT_EQ(store_.generation(), gen + 1);
  ASSERT_EQ(call("POST", "/v1/mode", R"({"mode":"enforce"})").status, 200);
  EXPECT_EQ(policy::decide_http("other.example", 443, *store_.current()).verdict,
            policy::Verdict::deny);
}

TEST_F(ApiTest, ModeRefusesAnythingElse) {
  auto gen = store_.generation();
  for (const char* bad : {R"({"mode":"learn"})", R"({"mode":1})", R"({"mode":"audit","x":1})",
                          R"(["audit"])", "not json", ""}) {
    auto r = call("POST", "/v1/mode", bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("enforce"), std::string::npos) << r.body;
  }
  EXPECT_EQ(call("GET", "/v1/mode").status, 405);
  EXPECT_EQ(store_.generation(), gen);
}

TEST_F(ApiTest, OneBadEntryAppliesNothing) {
  auto gen = store_.generation();
  auto r =
      call("POST", "/v1/allow-http", R"({"entries":["good.example:443","*:443","10.1.2.3:443"]})");
  EXPECT_EQ(r.status, 400);
  auto j = body(r);
  ASSERT_EQ(j["errors"].size(), 2u);
  EXPECT_EQ(j["errors"][0]["entry"], "*:443");
  EXPECT_EQ(j["errors"][1]["entry"], "10.1.2.3:443");
  EXPECT_NE(j["errors"][1]["error"].get<std::string>().find("10.0.0.0/8"), std::string::npos);
  EXPECT_NE(j["error"].get<std::string>().find("nothing was applied"), std::string::npos);
  EXPECT_EQ(store_.generation(), gen);
  EXPECT_EQ(policy::decide_http("good.example", 443, *store_.current()).verdict,
            policy::Verdict::deny);
}

// One row per malformed body: status and a fragment of the error message.
TEST_F(ApiTest, MalformedBodies) {
  struct Row {
    const char* body;
    int status;
    const char* says;
  } rows[] = {
      {"", 400, "not valid JSON"},
      {"{", 400, "not valid JSON"},
      {"[]", 400, "must be {\"entries\""},
      {R"({"entries":"a.com:1"})", 400, "must be {\"entries\""},
      {R"({"entries":[]})", 400, "is empty"},
      {R"({"entries":[1]})", 400, "entries[0] is not a string"},
      {R"({"entries":["a.com:1"],"x":1})", 400, "unknown key \"x\""},
      {R"({"entries":["a:1","b:1","c:1","d:1","e:1","f:1"]})", 413, "too many entries"},
  };
  for (const auto& row : rows) {
    auto r = call("POST", "/v1/allow-http", row.body);
    EXPECT_EQ(r.status, row.status) << row.body;
    EXPECT_NE(body(r)["error"].get<std::string>().find(row.says), std::string::npos)
        << row.body << " -> " << r.body;
  }
}

TEST_F(ApiTest, RoutingErrors) {
  EXPECT_EQ(call("GET", "/nope").status, 404);
  auto r = call("GET", "/v1/allow-http");
  EXPECT_EQ(r.status, 405);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0], (std::pair<std::string, std::string>{"Allow", "POST"}));
  EXPECT_EQ(call("POST", "/v1/rules", "{}").status, 405);
  EXPECT_EQ(call("DELETE", "/v1/health").status, 405);
}

TEST_F(ApiTest, DecisionsPageAndReportLoss) {
  feed_.n = 10;
  feed_.evicted = 4;
  auto first = body(call("GET", "/v1/decisions", "", {{"limit", "3"}}));
  EXPECT_EQ(first["lost"], 0);  // a first read has not fallen behind
  ASSERT_EQ(first["records"].size(), 3u);
  EXPECT_EQ(first["records"][0]["seq"], 5);
  EXPECT_EQ(first["records"][0]["id"], 50);
  EXPECT_EQ(first["next"], 7);

  auto behind = body(call("GET", "/v1/decisions", "", {{"after", "1"}}));
  EXPECT_EQ(behind["lost"], 3);  // 2, 3 and 4 were evicted
  EXPECT_EQ(behind["records"].size(), 6u);
  EXPECT_EQ(behind["next"], 10);

  auto none = body(call("GET", "/v1/decisions", "", {{"after", "10"}}));
  EXPECT_TRUE(none["records"].empty());
  EXPECT_EQ(none["next"], 10);
}

TEST_F(ApiTest, DecisionQueryValidation) {
  EXPECT_EQ(call("GET", "/v1/decisions", "", {{"limit", "0"}}).status, 400);
  EXPECT_EQ(call("GET", "/v1/decisions", "", {{"limit", "51"}}).status, 400);
  EXPECT_EQ(call("GET", "/v1/decisions", "", {{"after", "-1"}}).status, 400);
  EXPECT_EQ(call("GET", "/v1/decisions", "", {{"follow", "yes"}}).status, 400);
  EXPECT_EQ(call("GET", "/v1/decisions", "", {{"colour", "1"}}).status, 400);
}

TEST_F(ApiTest, FollowStartsNowUnlessToldOtherwise) {
  feed_.n = 7;
  auto r = call("GET", "/v1/decisions", "", {{"follow", "1"}});
  EXPECT_TRUE(r.follow);
  EXPECT_EQ(r.follow_after, 7u);
  EXPECT_EQ(r.content_type, "application/x-ndjson");
  auto from = call("GET", "/v1/decisions", "", {{"follow", "1"}, {"after", "2"}});
  EXPECT_EQ(from.follow_after, 2u);
  auto wire = serialize(r, true);
  EXPECT_NE(wire.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_EQ(wire.find("Content-Length"), std::string::npos);
}

TEST(FeedLine, PutsTheSequenceFirst) {
  EXPECT_EQ(feed_line({7, "{\"id\":1}\n"}), "{\"seq\":7,\"id\":1}\n");
  EXPECT_EQ(feed_line({8, "{}\n"}), "{\"seq\":8}\n");
}

// Framing: one row per request text, with the outcome.
TEST(Frame, Table) {
  ApiLimits limits;
  limits.max_head = 256;
  limits.max_body = 16;
  struct Row {
    std::string text;
    FrameState state;
    int status;  // for errors
  } rows[] = {
      {"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", FrameState::complete, 0},
      {"GET /v1/health HTTP/1.1\r\nHost: x\r\n", FrameState::incomplete, 0},
      {"POST /v1/allow-dns HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}", FrameState::incomplete, 0},
      {"POST /v1/allow-dns HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", FrameState::complete, 0},
      {"POST /v1/allow-dns HTTP/1.1\r\n\r\n", FrameState::error, 411},
      {"POST /x HTTP/1.1\r\nContent-Length: 17\r\n\r\n", FrameState::error, 413},
      {"POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", FrameState::error,
       400},
      {"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", FrameState::error, 400},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", FrameState::error, 501},
      {"GET http://a/ HTTP/1.1\r\n\r\n", FrameState::error, 400},
      {"GET /%zz HTTP/1.1\r\n\r\n", FrameState::error, 400},
      {"GET /a?x=%4 HTTP/1.1\r\n\r\n", FrameState::error, 400},
      {"GARBAGE\r\n\r\n", FrameState::error, 400},
      {"GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n", FrameState::error, 431},
  };
  for (const auto& row : rows) {
    ApiRequest req;
    auto f = frame_request(row.text, limits, req);
    EXPECT_EQ(f.state, row.state) << row.text;
    if (row.state == FrameState::error) {
      EXPECT_EQ(f.status, row.status) << row.text;
      EXPECT_FALSE(f.error.empty());
    }
  }
}

TEST(Frame, ParsesQueryBodyAndKeepAlive) {
  ApiLimits limits;
  ApiRequest req;
  std::string text =
      "POST /v1/allow-http?a=1&b=x%20y&&c HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
      "GET /next HTTP/1.0\r\n\r\n";
  auto f = frame_request(text, limits, req);
  ASSERT_EQ(f.state, FrameState::complete);
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.path, "/v1/allow-http");
  EXPECT_EQ(req.body, "{}");
  EXPECT_TRUE(req.keep_alive);
  ASSERT_EQ(req.query.size(), 3u);
  EXPECT_EQ(req.query[1], (std::pair<std::string, std::string>{"b", "x y"}));
  EXPECT_EQ(req.query[2], (std::pair<std::string, std::string>{"c", ""}));
  // The next request in the same buffer: HTTP/1.0 closes by default.
  ApiRequest next;
  auto g = frame_request(std::string_view(text).substr(f.consumed), limits, next);
  ASSERT_EQ(g.state, FrameState::complete);
  EXPECT_EQ(next.path, "/next");
  EXPECT_FALSE(next.keep_alive);
}

TEST(Serialize, ErrorsAreJsonWithLength) {
  auto r = error_response(404, "no \"such\" thing");
  auto wire = serialize(r, false);
  EXPECT_EQ(wire.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_NE(wire.find("Content-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(wire.find("Connection: close\r\n"), std::string::npos);
  auto body_at = wire.find("\r\n\r\n") + 4;
  EXPECT_EQ(json::parse(wire.substr(body_at))["error"], "no \"such\" thing");
  EXPECT_NE(wire.find("Content-Length: " + std::to_string(wire.size() - body_at)),
            std::string::npos);
}

TEST_F(ApiTest, PendingListsHeldRequestsWithTheAskSettings) {
  EXPECT_EQ(call("GET", "/v1/pending").status, 404);  // a proxy without the table
  with_pending_ = true;
  auto r = call("GET", "/v1/pending");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = body(r);
  EXPECT_EQ(
      j["ask"],
      json({{"enabled", true}, {"timeout_ms", 60000}, {"max_per_client", 64}, {"max", 1024}}));
  ASSERT_EQ(j["pending"].size(), 2u);
  EXPECT_EQ(j["pending"][0], json({{"id", 11},
                                   {"method", "CONNECT"},
                                   {"host", "a.test"},
                                   {"port", 443},
                                   {"client", "172.18.0.3:40000"},
                                   {"since_us", 1},
                                   {"waited_ms", 1500},
                                   {"expires_in_ms", 58500}}));
  EXPECT_EQ(call("POST", "/v1/pending").status, 405);
}

TEST_F(ApiTest, RefuseAnswersOneHeldRequest) {
  with_pending_ = true;
  auto r = call("POST", "/v1/pending/refuse", R"({"id": 12})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body(r), json({{"refused", 12}}));
  EXPECT_EQ(pending_.refused, std::vector<std::uint64_t>{12});
  r = call("POST", "/v1/pending/refuse", R"({"id": 12})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no request 12 is held"), std::string::npos) << r.body;
  for (const char* bad : {"", "{}", R"({"id": -1})", R"({"id": "11"})", R"({"id": 11, "x": 1})"}) {
    EXPECT_EQ(call("POST", "/v1/pending/refuse", bad).status, 400) << bad;
  }
  EXPECT_EQ(call("GET", "/v1/pending/refuse").status, 405);
  EXPECT_EQ(pending_.held.size(), 1u);
}

TEST_F(ApiTest, AskSettingsAreReadAndChanged) {
  with_pending_ = true;
  EXPECT_EQ(body(call("GET", "/v1/ask"))["enabled"], true);
  auto r = call("POST", "/v1/ask", R"({"timeout_ms": 5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body(r)["timeout_ms"], 5000);
  EXPECT_EQ(body(r)["enabled"], true);
  r = call("POST", "/v1/ask", R"({"enabled": false})");
  EXPECT_EQ(body(r)["enabled"], false);
  for (const char* bad : {"{}", R"({"enabled": 1})", R"({"timeout_ms": 0})",
                          R"({"timeout_ms": 86400001})", R"({"timeout": 5})", "[]"}) {
    EXPECT_EQ(call("POST", "/v1/ask", bad).status, 400) << bad;
  }
  EXPECT_EQ(pending_.settings.timeout_ms, 5000u);
  EXPECT_EQ(call("DELETE", "/v1/ask").status, 405);
}

TEST_F(ApiTest, EveryPublishedUpdateIsAnnounced) {
  int published = 0;
  updater_.on_publish([&] { ++published; });
  call("POST", "/v1/allow-http", R"({"entries": ["new.test:443"]})");
  EXPECT_EQ(published, 1);
  call("POST", "/v1/allow-http", R"({"entries": ["new.test:443"]})");  // nothing new
  EXPECT_EQ(published, 1);
  call("POST", "/v1/allow-dns", R"({"entries": ["new.test"]})");
  call("POST", "/v1/mode", R"({"mode": "audit"})");
  EXPECT_EQ(published, 3);
}

}  // namespace
}  // namespace vibepit::control
