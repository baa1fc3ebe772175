// /v1/secrets: a credential set from a PUT's raw body, listed and removed by name; no answer
// ever holds a value, and a bad one is refused with the reason.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vibepit/control/api.hpp"
#include "vibepit/control/rule_updater.hpp"
#include "vibepit/policy/decision.hpp"

namespace vibepit::control {
namespace {

using json = nlohmann::json;

class NoFeed : public DecisionFeed {
 public:
  std::vector<Entry> since(std::uint64_t, std::size_t, std::uint64_t& lost) const override {
    lost = 0;
    return {};
  }
  std::uint64_t last_seq() const override { return 0; }
};

class NoStats : public StatsSource {
 public:
  std::string stats_json() const override { return "{}\n"; }
  std::string prometheus() const override { return ""; }
};

std::shared_ptr<policy::Snapshot> initial() {
  policy::RuleSet rules;
  rules.allow_http = {"api.test:443"};
  return std::get<std::shared_ptr<policy::Snapshot>>(policy::compile_mutable(rules, 1));
}

constexpr std::string_view kValue = "ghp_s3cr3t_never_shown";

class SecretsApi : public ::testing::Test {
 protected:
  SecretsApi() : store_(initial()), updater_(store_), api_(updater_, store_, feed_, stats_) {}
  ApiResponse call(std::string method, std::string path, std::string_view body = "",
                   std::vector<std::pair<std::string, std::string>> query = {}) {
    ApiRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.body.assign(body);
    r.query = std::move(query);
    auto resp = api_.handle(r);
    EXPECT_EQ(resp.body.find(kValue), std::string::npos) << resp.body;
    return resp;
  }
  policy::SnapshotStore store_;
  RuleUpdater updater_;
  NoFeed feed_;
  NoStats stats_;
  ControlApi api_;
};

TEST_F(SecretsApi, PutSetsTheCredentialAndItsHostIsInspected) {
  const auto gen = store_.generation();
  auto r = call("PUT", "/v1/secrets/GH", kValue, {{"host", "api.test:443"}});
  ASSERT_EQ(r.status, 201) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["name"], "GH");
  EXPECT_EQ(j["host"], "api.test:443");
  EXPECT_EQ(j["header"], "Authorization");
  EXPECT_EQ(j["format"], "Bearer {}");
  EXPECT_EQ(j["replaced"], false);
  EXPECT_EQ(j["generation"], gen + 1);
  auto snap = store_.current();
  ASSERT_TRUE(snap->credentials);
  EXPECT_EQ(snap->credentials->front().value->reveal(), "Bearer " + std::string(kValue));
  EXPECT_TRUE(policy::decide_http("api.test", 443, *snap).inspect);

  auto again = call("PUT", "/v1/secrets/GH", "other",
                    {{"host", "api.test:443"}, {"header", "X-Key"}, {"format", "{}"}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["replaced"], true);
  EXPECT_EQ(store_.current()->credentials->size(), 1u);
}

TEST_F(SecretsApi, ListAndRulesShowNamesAndHostsNeverValues) {
  ASSERT_EQ(call("PUT", "/v1/secrets/GH", kValue, {{"host", "api.test:443"}}).status, 201);
  auto list = json::parse(call("GET", "/v1/secrets").body);
  ASSERT_EQ(list["secrets"].size(), 1u);
  EXPECT_EQ(list["secrets"][0]["name"], "GH");
  EXPECT_TRUE(list["secrets"][0].contains("locked"));
  auto rules = json::parse(call("GET", "/v1/rules").body);
  EXPECT_EQ(rules["credentials"],
            json::array({"GH=api.test:443,header=Authorization,format=Bearer {}"}));
}

TEST_F(SecretsApi, DeleteRemovesByName) {
  ASSERT_EQ(call("PUT", "/v1/secrets/GH", kValue, {{"host", "api.test:443"}}).status, 201);
  EXPECT_EQ(call("DELETE", "/v1/secrets/NOPE").status, 404);
  auto r = call("DELETE", "/v1/secrets/GH");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["removed"], "GH");
  EXPECT_EQ(store_.current()->credentials, nullptr);
  EXPECT_FALSE(policy::decide_http("api.test", 443, *store_.current()).inspect);
}

TEST_F(SecretsApi, RefusesBadInputWithTheReason) {
  struct Row {
    std::string path;
    std::string body;
    std::vector<std::pair<std::string, std::string>> query;
    int status;
    std::string says;
  };
  const std::string multi = std::string(kValue) + "\r\nX-Evil: 1";
  const std::vector<Row> rows = {
      {"/v1/secrets/GH", std::string(kValue), {}, 400, "host=HOST:PORT"},
      {"/v1/secrets/GH", std::string(kValue), {{"host", "api.test"}}, 400, "host"},
      {"/v1/secrets/GH",
       std::string(kValue),
       {{"host", "a.test:443"}, {"colour", "x"}},
       400,
       "unknown query parameter"},
      {"/v1/secrets/9GH", std::string(kValue), {{"host", "a.test:443"}}, 400, "digit"},
      {"/v1/secrets/GH", multi, {{"host", "a.test:443"}}, 400, "control character"},
      {"/v1/secrets/GH", "", {{"host", "a.test:443"}}, 400, "empty"},
      {"/v1/secrets/GH",
       std::string(kValue),
       {{"host", "a.test:443"}, {"header", "Host"}},
       400,
       "may set"},
  };
  for (const auto& row : rows) {
    auto r = call("PUT", row.path, row.body, row.query);
    EXPECT_EQ(r.status, row.status) << row.path << " " << r.body;
    EXPECT_NE(r.body.find(row.says), std::string::npos) << r.body;
  }
  EXPECT_EQ(store_.current()->credentials, nullptr);
  EXPECT_EQ(call("POST", "/v1/secrets").status, 405);
  EXPECT_EQ(call("GET", "/v1/secrets/GH").status, 405);
}

TEST_F(SecretsApi, TwoCredentialsMayNotSetOneHeaderOnOneHost) {
  ASSERT_EQ(call("PUT", "/v1/secrets/A", kValue, {{"host", "api.test:443"}}).status, 201);
  auto r =
      call("PUT", "/v1/secrets/B", "x", {{"host", "api.test:443"}, {"header", "authorization"}});
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body.find("credential A already sets"), std::string::npos) << r.body;
}

TEST(FrameRequest, APutNeedsAContentLengthAndItsBodyIsKept) {
  ApiRequest req;
  auto f = frame_request("PUT /v1/secrets/GH?host=a.test:443 HTTP/1.1\r\n\r\n", {}, req);
  EXPECT_EQ(f.state, FrameState::error);
  EXPECT_EQ(f.status, 411);
  const std::string put =
      "PUT /v1/secrets/GH?host=a.test%3A443 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
  f = frame_request(put, {}, req);
  ASSERT_EQ(f.state, FrameState::complete);
  EXPECT_EQ(std::string_view(req.body), "abc");
  EXPECT_EQ(req.query.at(0).second, "a.test:443");
}

}  // namespace
}  // namespace vibepit::control
