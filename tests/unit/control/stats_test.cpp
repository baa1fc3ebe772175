#include "vibepit/control/stats.hpp"

#include <cctype>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace vibepit::control {
namespace {

using json = nlohmann::json;

decision_log::DecisionRecord proxy_decision(std::string host, policy::Verdict v, int status) {
  decision_log::DecisionRecord r;
  r.host = std::move(host);
  r.verdict = v;
  r.reason =
      v == policy::Verdict::allow ? policy::Reason::allowlisted : policy::Reason::not_allowlisted;
  r.status = static_cast<std::uint16_t>(status);
  r.elapsed_us = 150;
  return r;
}

decision_log::DecisionRecord dns_answer(std::string host, bool cached) {
  decision_log::DecisionRecord r;
  r.src = "dns";
  r.host = std::move(host);
  r.verdict = policy::Verdict::allow;
  r.reason = policy::Reason::allowlisted;
  r.rcode = "NOERROR";
  r.cached = cached;
  r.elapsed_us = 40;
  return r;
}

TEST(DecisionStats, AHoldIsCountedOnceAsADecisionAndItsEndingApart) {
  DecisionStats s(100);
  auto held = proxy_decision("a.test", policy::Verdict::deny, 0);
  held.hold = "held";
  auto released = proxy_decision("a.test", policy::Verdict::allow, 200);
  released.hold = "released";
  auto expired = proxy_decision("b.test", policy::Verdict::deny, 403);
  expired.hold = "expired";
  s.observe(held);
  s.observe(released);
  s.observe(held);
  s.observe(expired);
  auto j = json::parse(s.stats_json());
  EXPECT_EQ(j["totals"]["decisions"], 2);  // the held events are not decisions
  EXPECT_EQ(j["totals"]["allow"], 1);
  EXPECT_EQ(j["holds"], json({{"held", 2}, {"released", 1}, {"expired", 1}}));
  const auto text = s.prometheus();
  EXPECT_NE(text.find("vibepit_holds_total{outcome=\"held\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vibepit_holds_total{outcome=\"released\"} 1\n"), std::string::npos);
}

TEST(DecisionStats, CountsTotalsBytesAndCacheHits) {
  DecisionStats s(100);
  s.observe(proxy_decision("a.test", policy::Verdict::allow, 200));
  s.observe(proxy_decision("b.test", policy::Verdict::deny, 403));
  auto close = proxy_decision("a.test", policy::Verdict::allow, 200);
  close.close = true;
  close.bytes_up = 100;
  close.bytes_down = 5000;
  close.ms = 1200;
  s.observe(close);
  s.observe(dns_answer("a.test", false));
  s.observe(dns_answer("a.test", true));
  s.observe(dns_answer("a.test", true));
  s.observe(dns_answer("a.test", true));

  auto j = json::parse(s.stats_json());
  EXPECT_EQ(j["totals"]["decisions"], 6);
  EXPECT_EQ(j["totals"]["allow"], 5);
  EXPECT_EQ(j["totals"]["deny"], 1);
  EXPECT_EQ(j["totals"]["tunnels_closed"], 1);
  EXPECT_EQ(j["bytes"]["up"], 100);
  EXPECT_EQ(j["bytes"]["down"], 5000);
  EXPECT_DOUBLE_EQ(j["dns"]["cache_hit_rate"].get<double>(), 0.75);
  EXPECT_EQ(j["hosts"]["a.test"]["allow"], 5);
  EXPECT_EQ(j["hosts"]["a.test"]["bytes_down"], 5000);
  EXPECT_EQ(j["hosts"]["b.test"]["deny"], 1);
  EXPECT_EQ(j["http_status"]["403"], 1);
}

// A flood of distinct names: memory stays bounded, and the rest is counted as "(other)".
TEST(DecisionStats, HostTableIsBounded) {
  DecisionStats s(50);
  for (int i = 0; i < 10'000; ++i) {
    s.observe(proxy_decision("r" + std::to_string(i) + ".flood.test", policy::Verdict::deny, 403));
  }
  EXPECT_EQ(s.tracked_hosts(), 50u);
  auto j = json::parse(s.stats_json());
  EXPECT_EQ(j["hosts"].size(), 50u);
  EXPECT_EQ(j["other"]["decisions"], 10'000 - 50);
  EXPECT_EQ(j["other"]["deny"], 10'000 - 50);
  EXPECT_EQ(j["totals"]["deny"], 10'000);
}

// Every sample line is `name{labels} value`; buckets are cumulative and end at the count.
// `name{label="value",...} number`, with the escapes of the text format inside values.
// (Written out: GCC 12 under ASan warns inside std::regex.)
bool valid_sample(const std::string& line) {
  std::size_t i = 0;
  while (i < line.size() && (std::islower(static_cast<unsigned char>(line[i])) || line[i] == '_'))
    ++i;
  if (i == 0) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::size_t start = i;
      while (i < line.size() &&
             (std::islower(static_cast<unsigned char>(line[i])) || line[i] == '_'))
        ++i;
      if (i == start || line.compare(i, 2, "=\"") != 0) return false;
      i += 2;
      while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
      if (i >= line.size()) return false;
      ++i;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') return false;
  auto value = line.substr(i + 1);
  return !value.empty() && value.find_first_not_of("0123456789.e+-") == std::string::npos;
}

TEST(DecisionStats, SampleValidatorRejectsBadLines) {
  EXPECT_TRUE(valid_sample("a_b{x=\"1\",y=\"q\\\"z\"} 3"));
  EXPECT_FALSE(valid_sample("a_b{x=1} 3"));
  EXPECT_FALSE(valid_sample("a_b{x=\"1\" 3"));
  EXPECT_FALSE(valid_sample("a_b 3x"));
}

TEST(DecisionStats, PrometheusExposition) {
  DecisionStats s;
  auto r = proxy_decision("we\"ird\\host", policy::Verdict::allow, 200);
  s.observe(r);
  r.elapsed_us = 20'000'000;  // beyond the last finite bucket
  s.observe(r);
  s.observe(dns_answer("a.test", true));
  auto text = s.prometheus();
  std::istringstream in(text);
  std::string line;
  std::uint64_t last_bucket = 0;
  bool saw_inf = false;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) == 0) continue;
    EXPECT_TRUE(valid_sample(line)) << line;
    if (line.rfind("vibepit_decision_seconds_bucket{src=\"proxy\"", 0) == 0) {
      auto v = std::stoull(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(v, last_bucket) << line;
      last_bucket = v;
      if (line.find("+Inf") != std::string::npos) {
        saw_inf = true;
        EXPECT_EQ(v, 2u);
      }
    }
  }
  EXPECT_TRUE(saw_inf);
  EXPECT_NE(text.find("vibepit_decision_seconds_bucket{src=\"proxy\",le=\"0.00025\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("vibepit_dns_cache_hits_total 1"), std::string::npos);
}

}  // namespace
}  // namespace vibepit::control
