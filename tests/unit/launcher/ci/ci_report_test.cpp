// vibepit ci's report: decision records folded into destinations, and the three renderings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "vibepit/launcher/ci/ci_report.hpp"

namespace vibepit::launcher {
namespace {

using Json = nlohmann::json;

// Records as vibepit-proxy writes them (field order and all), for one small job.
constexpr const char* kLog =
    R"({"id":1,"ts":"2026-11-24T10:00:00.000001Z","src":"proxy","event":"decision","client":"10.219.0.3:40000","method":"CONNECT","host":"a.pkg.test","port":443,"verdict":"allow","reason":"allowlisted","rule":"*.pkg.test:443","addr":"198.51.100.10","gen":1,"mode":"enforce","us":900}
{"id":2,"ts":"2026-11-24T10:00:01.000000Z","src":"proxy","event":"decision","client":"10.219.0.3:40002","method":"CONNECT","host":"evil.test","port":443,"verdict":"deny","reason":"not_allowlisted","rule":"","addr":"","status":403,"gen":1,"mode":"enforce","us":40}
{"id":1,"ts":"2026-11-24T10:00:02.000000Z","src":"proxy","event":"close","client":"10.219.0.3:40000","method":"CONNECT","host":"a.pkg.test","port":443,"verdict":"allow","reason":"allowlisted","rule":"*.pkg.test:443","addr":"198.51.100.10","gen":1,"mode":"enforce","bytes_up":517,"bytes_down":4096,"ms":2000}
{"id":3,"ts":"2026-11-24T10:00:03.000000Z","src":"proxy","event":"decision","client":"10.219.0.3:40004","method":"CONNECT","host":"a.pkg.test","port":443,"verdict":"allow","reason":"allowlisted","rule":"*.pkg.test:443","addr":"198.51.100.10","gen":2,"mode":"enforce","us":700}
{"id":4,"ts":"2026-11-24T10:00:04.000000Z","src":"dns","event":"decision","client":"10.219.0.3:5000","transport":"udp","qname":"a.pkg.test","qtype":"A","rcode":"NOERROR","addrs":["198.51.100.10"],"cached":false,"verdict":"allow","reason":"allowlisted","rule":"*.pkg.test","gen":2,"mode":"enforce"}
{"id":5,"ts":"2026-11-24T10:00:05.000000Z","src":"dns","event":"decision","client":"10.219.0.3:5001","transport":"udp","qname":"a.pkg.test","qtype":"AAAA","rcode":"NOERROR","addrs":[],"cached":false,"verdict":"allow","reason":"allowlisted","rule":"*.pkg.test","gen":2,"mode":"enforce"}
{"id":6,"ts":"2026-11-24T10:00:06.000000Z","src":"proxy","event":"decision","client":"10.219.0.3:40006","method":"GET","host":"plain.test","port":80,"verdict":"allow","reason":"not_allowlisted","rule":"","addr":"198.51.100.11","status":200,"gen":2,"mode":"audit","would_deny":true,"bytes_up":80,"bytes_down":300,"ms":3}
)";

const Destination* find(const CiReport& r, std::string_view protocol, std::string_view host) {
  for (const auto& d : r.destinations)
    if (d.protocol == protocol && d.host == host) return &d;
  return nullptr;
}

TEST(CiReport, FoldsRecordsIntoDestinations) {
  CiReport r;
  add_decision_log(r, kLog);
  EXPECT_EQ(r.skipped_lines, 0u);
  ASSERT_EQ(r.destinations.size(), 4u);
  EXPECT_EQ(r.generation, 2u);

  const auto* a = find(r, "connect", "a.pkg.test");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->count, 2u);  // two decisions; the close record adds bytes, not a decision
  EXPECT_EQ(a->allowed, 2u);
  EXPECT_EQ(a->bytes_up, 517u);
  EXPECT_EQ(a->bytes_down, 4096u);
  EXPECT_EQ(a->first, "2026-11-24T10:00:00.000001Z");
  EXPECT_EQ(a->last, "2026-11-24T10:00:03.000000Z");
  EXPECT_EQ(a->verdict, "allow");
  EXPECT_EQ(a->rule, "*.pkg.test:443");
  EXPECT_EQ(a->port, 443);

  const auto* evil = find(r, "connect", "evil.test");
  ASSERT_NE(evil, nullptr);
  EXPECT_EQ(evil->verdict, "deny");
  EXPECT_EQ(evil->reason, "not_allowlisted");

  const auto* dns = find(r, "dns", "a.pkg.test");
  ASSERT_NE(dns, nullptr);
  EXPECT_EQ(dns->count, 2u);
  EXPECT_EQ(dns->port, 53);
  EXPECT_EQ(dns->qtypes, (std::vector<std::string>{"A", "AAAA"}));

  const auto* plain = find(r, "http", "plain.test");
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->verdict, "would_deny");
  EXPECT_EQ(plain->would_deny, 1u);
  EXPECT_EQ(plain->bytes_down, 300u);

  // Denied first, then would_deny, then allowed.
  EXPECT_EQ(r.destinations[0].verdict, "deny");
  EXPECT_EQ(r.destinations[1].verdict, "would_deny");
}

// vibepit ci reads a long log a block at a time: the pieces fold into the same report.
TEST(CiReport, ALogFedInPiecesGivesTheSameReport) {
  CiReport whole, pieces;
  add_decision_log(whole, kLog);
  const std::string_view log = kLog;
  DecisionLogReader reader(pieces);
  std::size_t start = 0;
  for (std::size_t nl = log.find('\n'); nl != std::string_view::npos; nl = log.find('\n', start)) {
    reader.feed(log.substr(start, nl + 1 - start));  // one line per piece
    start = nl + 1;
  }
  reader.finish();
  EXPECT_EQ(to_json(pieces), to_json(whole));
  EXPECT_EQ(pieces.destinations.size(), 4u);
}

TEST(CiReport, TheWorstVerdictWinsAndNamesItsReason) {
  CiReport r;
  add_decision_log(
      r,
      R"({"src":"proxy","event":"decision","method":"CONNECT","host":"x.test","port":443,"verdict":"allow","reason":"allowlisted","rule":"x.test:443"}
{"src":"proxy","event":"decision","method":"CONNECT","host":"x.test","port":443,"verdict":"deny","reason":"blocked_address","rule":""}
{"src":"proxy","event":"decision","method":"CONNECT","host":"x.test","port":443,"verdict":"allow","reason":"allowlisted","rule":"x.test:443"}
)");
  ASSERT_EQ(r.destinations.size(), 1u);
  EXPECT_EQ(r.destinations[0].verdict, "deny");
  EXPECT_EQ(r.destinations[0].reason, "blocked_address");
  EXPECT_EQ(r.destinations[0].allowed, 2u);
  EXPECT_EQ(r.destinations[0].denied, 1u);
}

TEST(CiReport, OddLinesAreCountedNotFatal) {
  const char* odd[] = {
      "not json",
      "[1,2]",
      R"({"src":"proxy","event":"decision"})",                               // no verdict
      R"({"src":"elsewhere","event":"decision","verdict":"allow"})",         // unknown source
      R"({"src":"proxy","event":"decision","verdict":"maybe","host":"a"})",  // unknown verdict
      R"({"src":"proxy","event":"decision","verdict":"allow","host":"a","port":70000})",
      R"({"src":"proxy","event":"decision","verdict":"allow","host":"a.test","port":443,"ts":)",
  };
  for (const char* line : odd) {
    CiReport r;
    add_decision_log(r, std::string(line) + "\n");
    EXPECT_EQ(r.skipped_lines, 1u) << line;
    EXPECT_TRUE(r.destinations.empty()) << line;
  }
  CiReport r;
  add_decision_log(r, "\n  \n");  // blank lines are not records and not errors
  EXPECT_EQ(r.skipped_lines, 0u);
}

TEST(CiReport, FieldsOfTheWrongTypeReadAsAbsent) {
  // A "would_deny" that is not a boolean is not a would-deny, and not a reason to stop.
  CiReport r;
  add_decision_log(r, R"({"src":"proxy","event":"decision","method":"CONNECT","host":"a.test",)"
                      R"("port":443,"verdict":"allow","would_deny":"yes","gen":"7","ts":5})"
                      "\n");
  ASSERT_EQ(r.destinations.size(), 1u);
  EXPECT_EQ(r.destinations[0].allowed, 1u);
  EXPECT_EQ(r.destinations[0].would_deny, 0u);
  EXPECT_EQ(r.destinations[0].first, "");
  EXPECT_EQ(r.generation, 0u);
}

CiReport sample(CiMode mode) {
  CiReport r;
  r.mode = mode;
  r.project = "/src/app";
  r.command = {"make", "test"};
  r.started = "2026-11-24T10:00:00Z";
  r.finished = "2026-11-24T10:00:09Z";
  r.outcome.status = 0;
  r.fail_on_deny = true;
  r.exit_status = 3;
  r.exit_reason = "the command exited 0, but 1 destination was denied (--fail-on-deny)";
  add_decision_log(r, kLog);
  if (mode == CiMode::learn) r.proposal_http = {"*.pkg.test:443"};
  return r;
}

TEST(CiReport, JsonDocument) {
  const Json j = Json::parse(to_json(sample(CiMode::learn)));
  EXPECT_EQ(j["kind"], "vibepit-ci-report");
  EXPECT_EQ(j["version"], kCiReportVersion);
  EXPECT_EQ(j["mode"], "learn");
  EXPECT_EQ(j["command"], Json::array({"make", "test"}));
  EXPECT_EQ(j["command_exit"]["status"], 0);
  EXPECT_TRUE(j["command_exit"]["interrupted"].is_null());
  EXPECT_EQ(j["exit_status"], 3);
  EXPECT_EQ(j["totals"]["destinations"], 4);
  EXPECT_EQ(j["totals"]["denied"], 1);
  EXPECT_EQ(j["totals"]["would_deny"], 1);
  EXPECT_EQ(j["totals"]["allowed"], 2);
  EXPECT_EQ(j["totals"]["decisions"], 6);
  EXPECT_EQ(j["totals"]["bytes_down"], 4396);
  EXPECT_EQ(j["destinations"][0]["host"], "evil.test");
  EXPECT_EQ(j["destinations"][0]["verdict"], "deny");
  EXPECT_FALSE(j["destinations"][0].contains("qtypes"));  // DNS only
  EXPECT_EQ(j["proposal"]["allow-http"], Json::array({"*.pkg.test:443"}));
  EXPECT_FALSE(Json::parse(to_json(sample(CiMode::enforce))).contains("proposal"));
}

TEST(CiReport, InterruptedRunSaysSo) {
  CiReport r = sample(CiMode::enforce);
  r.outcome = {};
  r.outcome.interrupted = "SIGTERM";
  const Json j = Json::parse(to_json(r));
  EXPECT_TRUE(j["command_exit"]["status"].is_null());
  EXPECT_EQ(j["command_exit"]["interrupted"], "SIGTERM");
  EXPECT_NE(to_markdown(r).find("interrupted (SIGTERM)"), std::string::npos);
}

TEST(CiReport, MarkdownTable) {
  const std::string md = to_markdown(sample(CiMode::enforce));
  EXPECT_NE(md.find("## vibepit ci: egress report (enforce)"), std::string::npos) << md;
  EXPECT_NE(md.find("`make test`: the command exited 0."), std::string::npos) << md;
  EXPECT_NE(md.find("| ❌ denied | `evil.test:443` | connect | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ✅ allowed | `a.pkg.test:443` | connect | 2 | 517 B | 4.0 KiB |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("vibepit ci exits 3"), std::string::npos) << md;
}

// A hostile target cannot break out of its table cell or inject markup.
TEST(CiReport, HostileHostsAreDefused) {
  CiReport r;
  add_decision_log(
      r,
      R"({"src":"proxy","event":"decision","method":"CONNECT","host":"x|<script>`[a](b)\u0001","port":443,"verdict":"deny","reason":"invalid_target","rule":""})"
      "\n");
  ASSERT_EQ(r.destinations.size(), 1u);
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("`x??script??[a]?b??:443`"), std::string::npos) << md;
  const std::string xml = to_junit(r);
  EXPECT_EQ(xml.find("<script>"), std::string::npos) << xml;
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
}

TEST(CiReport, JunitOneFailurePerDeniedDestination) {
  const std::string xml = to_junit(sample(CiMode::audit));
  EXPECT_NE(xml.find("<testsuites name=\"vibepit ci\" tests=\"4\" failures=\"1\" errors=\"0\" "
                     "skipped=\"1\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<testcase classname=\"vibepit.egress.connect\" name=\"evil.test:443\">\n"
                     "      <failure type=\"not_allowlisted\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("vibepit allow-http evil.test:443"), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"plain.test:80\">\n      <skipped"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"vibepit.egress.dns\" name=\"a.pkg.test\"></testcase>"),
            std::string::npos)
      << xml;
}

TEST(CiReport, AnIncompleteReportSaysWhyInEveryForm) {
  CiReport r = sample(CiMode::enforce);
  EXPECT_TRUE(Json::parse(to_json(r))["complete"].get<bool>());
  r.incomplete = {"3 decision records were dropped by the proxy",
                  "error from elsewhere: [click](http://x.test) <b>`|"};
  r.records_dropped = 3;
  const auto j = Json::parse(to_json(r));
  EXPECT_FALSE(j["complete"].get<bool>());
  EXPECT_EQ(j["incomplete_reasons"].size(), 2u);
  EXPECT_EQ(j["records"]["dropped"], 3);

  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("This report is incomplete"), std::string::npos) << md;
  EXPECT_NE(md.find("- 3 decision records were dropped by the proxy\n"), std::string::npos) << md;
  // Bytes from elsewhere open no markup: no link, no HTML, no code span, no table cell.
  for (const char* bad : {"[click]", "](", "<b>", "`|"})
    EXPECT_EQ(md.find(bad), std::string::npos) << bad << "\n" << md;

  const std::string xml = to_junit(r);
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"vibepit.report\" name=\"complete\">"),
            std::string::npos)
      << xml;
}

TEST(CiReport, Modes) {
  for (CiMode m : {CiMode::enforce, CiMode::audit, CiMode::learn})
    EXPECT_EQ(parse_ci_mode(to_string(m)), m);
  EXPECT_EQ(parse_ci_mode("block"), std::nullopt);
}

}  // namespace
}  // namespace vibepit::launcher
