// libFuzzer target: vibepit ci's report over a decision log (hosts in it come from the
// sandbox). Every rendering is produced; the JSON parses back; the Markdown and JUnit carry
// no markup the input could have planted; every proposed rule is valid and allows what it
// was learned from.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "vibepit/launcher/ci/ci_report.hpp"
#include "vibepit/launcher/ci/ci_stream.hpp"
#include "vibepit/launcher/ci/learn.hpp"
#include "vibepit/policy/decision.hpp"

using namespace vibepit::launcher;

// The same bytes as the control API's decision stream (vibepit ci reads that): every line
// is a record, a note, the end line or counted as not understood, and the report says why
// it is incomplete in sentences that carry no line of the input.
void check_stream(std::string_view in) {
  CiReport r;
  StreamTally t(r);
  std::size_t lines = 0;
  while (!in.empty()) {
    const auto nl = in.find('\n');
    t.line(in.substr(0, nl));
    ++lines;
    in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
  }
  t.finish();
  CHECK(t.received() <= lines);
  CHECK(r.skipped_lines <= lines);
  const auto problems = t.problems("");
  CHECK(t.ended() || !problems.empty());  // no end line: never complete
  r.incomplete = problems;
  CHECK(nlohmann::json::parse(to_json(r))["complete"].get<bool>() == problems.empty());
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_stream(std::string_view(reinterpret_cast<const char*>(data), size));
  CiReport r;
  r.mode = CiMode::learn;
  add_decision_log(r, std::string_view(reinterpret_cast<const char*>(data), size));
  std::uint64_t decisions = 0;
  for (const auto& d : r.destinations) {
    CHECK(d.allowed + d.denied + d.would_deny == d.count);
    decisions += d.count;
  }
  const Proposal p = propose_rules(r.destinations);
  r.proposal_http = p.allow_http;
  r.proposal_dns = p.allow_dns;
  const auto j = nlohmann::json::parse(to_json(r));
  CHECK(j["totals"]["decisions"].get<std::uint64_t>() == decisions);
  const std::string xml = to_junit(r);
  const std::string md = to_markdown(r);
  CHECK(xml.find("<script") == std::string::npos && md.find("<script") == std::string::npos);

  vibepit::policy::RuleSet rules;
  rules.allow_http = p.allow_http;
  rules.allow_dns = p.allow_dns;
  auto compiled = vibepit::policy::compile(rules, 1);
  auto* snap = std::get_if<std::shared_ptr<const vibepit::policy::Snapshot>>(&compiled);
  CHECK(snap != nullptr);
  for (const auto& d : r.destinations) {
    if (d.would_deny == 0) continue;  // learned entries cover what audit let through
    const auto v = d.protocol == "dns" ? vibepit::policy::decide_dns(d.host, **snap)
                                       : vibepit::policy::decide_http(d.host, d.port, **snap);
    CHECK(v.verdict == vibepit::policy::Verdict::allow || d.host.empty() || d.port == 0 ||
          v.reason == vibepit::policy::Reason::invalid_target ||
          v.reason == vibepit::policy::Reason::blocked_address);
  }
  return 0;
}
