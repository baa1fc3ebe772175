// Decision records folded into destinations, and the report as versioned JSON.
#include "vibepit/launcher/ci/ci_report.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

namespace vibepit::launcher {
namespace {

using Json = nlohmann::json;

int severity(std::string_view verdict) {
  return verdict == "deny" ? 2 : verdict == "would_deny" ? 1 : 0;
}

// The record's string field, or "" when it is missing or not a string.
std::string text(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The record's boolean field, or false when it is missing or not a boolean.
bool flag(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::uint64_t number(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

Json destination_json(const Destination& d) {
  Json j = {{"protocol", d.protocol},
            {"host", d.host},
            {"port", d.port},
            {"count", d.count},
            {"allowed", d.allowed},
            {"denied", d.denied},
            {"would_deny", d.would_deny},
            {"first", d.first},
            {"last", d.last},
            {"bytes_up", d.bytes_up},
            {"bytes_down", d.bytes_down},
            {"verdict", d.verdict},
            {"reason", d.reason},
            {"rule", d.rule}};
  if (d.protocol == "dns") j["qtypes"] = d.qtypes;
  return j;
}

Json or_null(const std::string& s) {
  return s.empty() ? Json(nullptr) : Json(s);
}

}  // namespace

std::string_view to_string(CiMode m) {
  switch (m) {
    case CiMode::enforce:
      return "enforce";
    case CiMode::audit:
      return "audit";
    case CiMode::learn:
      return "learn";
  }
  return "enforce";
}

std::optional<CiMode> parse_ci_mode(std::string_view text) {
  for (CiMode m : {CiMode::enforce, CiMode::audit, CiMode::learn})
    if (text == to_string(m)) return m;
  return std::nullopt;
}

std::uint64_t CiReport::count_where(std::string_view verdict) const {
  return static_cast<std::uint64_t>(
      std::count_if(destinations.begin(), destinations.end(),
                    [&](const Destination& d) { return d.verdict == verdict; }));
}

DecisionLogReader::DecisionLogReader(CiReport& report) : r_(report) {
  for (std::size_t i = 0; i < r_.destinations.size(); ++i) {
    const auto& d = r_.destinations[i];
    index_[{d.protocol, d.host, d.port}] = i;
  }
}

bool DecisionLogReader::add(std::string_view line) {
  const Json rec = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (rec.is_discarded() || !rec.is_object()) return false;
  const std::string src = text(rec, "src"), event = text(rec, "event");
  const bool dns = src == "dns";
  if ((!dns && src != "proxy") || (event != "decision" && event != "close")) return false;
  const std::string host = text(rec, dns ? "qname" : "host");
  const std::string verdict = text(rec, "verdict");
  if (verdict != "allow" && verdict != "deny") return false;
  const auto port = dns ? 53 : number(rec, "port");
  if (port > 65535) return false;
  const std::string protocol = dns ? "dns" : text(rec, "method") == "CONNECT" ? "connect" : "http";
  Destination* found = at(protocol, host, static_cast<std::uint16_t>(port));
  if (found == nullptr) {
    ++r_.destinations_over_limit;
    return true;
  }
  Destination& d = *found;
  d.bytes_up += number(rec, "bytes_up");
  d.bytes_down += number(rec, "bytes_down");
  if (event == "close") return true;  // the decision it closes was counted already

  const bool would_deny = flag(rec, "would_deny") && verdict == "allow";
  const std::string v = would_deny ? "would_deny" : verdict;
  // A summary record stands for `count` decisions of one client (folded by the proxy).
  const std::uint64_t n = std::max<std::uint64_t>(number(rec, "count"), 1);
  d.count += n;
  (v == "deny" ? d.denied : v == "would_deny" ? d.would_deny : d.allowed) += n;
  const std::string ts = text(rec, "ts");
  if (!ts.empty() && (d.first.empty() || ts < d.first)) d.first = ts;
  if (!ts.empty() && ts > d.last) d.last = ts;
  if (d.verdict.empty() || severity(v) > severity(d.verdict)) {
    d.verdict = v;
    d.reason = text(rec, "reason");
    d.rule = text(rec, "rule");
  }
  if (dns) {
    const std::string qtype = text(rec, "qtype");
    if (!qtype.empty() && std::find(d.qtypes.begin(), d.qtypes.end(), qtype) == d.qtypes.end())
      d.qtypes.push_back(qtype);
  }
  r_.generation = std::max(r_.generation, number(rec, "gen"));
  return true;
}

Destination* DecisionLogReader::at(const std::string& protocol, const std::string& host,
                                   std::uint16_t port) {
  auto key = std::make_tuple(protocol, host, port);
  if (auto it = index_.find(key); it != index_.end()) return &r_.destinations[it->second];
  if (r_.destinations.size() >= kMaxDestinations) return nullptr;
  auto [it, fresh] = index_.try_emplace(std::move(key), r_.destinations.size());
  if (fresh) {
    Destination d;
    d.protocol = protocol;
    d.host = host;
    d.port = port;
    r_.destinations.push_back(std::move(d));
  }
  return &r_.destinations[it->second];
}

void DecisionLogReader::feed(std::string_view ndjson) {
  while (!ndjson.empty()) {
    const auto nl = ndjson.find('\n');
    const std::string_view line = ndjson.substr(0, nl);
    ndjson.remove_prefix(nl == std::string_view::npos ? ndjson.size() : nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (!add(line)) ++r_.skipped_lines;
  }
}

void DecisionLogReader::finish() {
  sort_destinations(r_);
  index_.clear();
}

void add_decision_log(CiReport& report, std::string_view ndjson) {
  DecisionLogReader reader(report);
  reader.feed(ndjson);
  reader.finish();
}

void sort_destinations(CiReport& report) {
  std::stable_sort(report.destinations.begin(), report.destinations.end(),
                   [](const Destination& a, const Destination& b) {
                     return std::make_tuple(-severity(a.verdict), a.protocol, a.host, a.port) <
                            std::make_tuple(-severity(b.verdict), b.protocol, b.host, b.port);
                   });
}

std::string to_json(const CiReport& r) {
  Json destinations = Json::array();
  std::uint64_t decisions = 0, up = 0, down = 0;
  for (const auto& d : r.destinations) {
    destinations.push_back(destination_json(d));
    decisions += d.count;
    up += d.bytes_up;
    down += d.bytes_down;
  }
  Json j = {
      {"kind", "vibepit-ci-report"},
      {"version", kCiReportVersion},
      {"mode", to_string(r.mode)},
      {"project", r.project},
      {"command", r.command},
      {"started", r.started},
      {"finished", r.finished},
      {"generation", r.generation},
      {"command_exit",
       {{"status", r.outcome.status ? Json(*r.outcome.status) : Json(nullptr)},
        {"interrupted", or_null(r.outcome.interrupted)},
        {"error", or_null(r.outcome.error)}}},
      {"fail_on_deny", r.fail_on_deny},
      {"exit_status", r.exit_status},
      {"exit_reason", r.exit_reason},
      {"totals",
       {{"destinations", r.destinations.size()},
        {"allowed", r.count_where("allow")},
        {"denied", r.count_where("deny")},
        {"would_deny", r.count_where("would_deny")},
        {"decisions", decisions},
        {"bytes_up", up},
        {"bytes_down", down}}},
      {"destinations", std::move(destinations)},
      {"skipped_lines", r.skipped_lines},
      {"complete", r.incomplete.empty()},
      {"incomplete_reasons", r.incomplete},
      {"records",
       {{"received", r.records_received},
        {"missing", r.records_missing},
        {"dropped", r.records_dropped},
        {"unwritten", r.records_unwritten},
        {"over_limit", r.destinations_over_limit}}},
  };
  if (r.mode == CiMode::learn)
    j["proposal"] = {{"allow-http", r.proposal_http}, {"allow-dns", r.proposal_dns}};
  // Hosts come from the sandbox: invalid UTF-8 is replaced, never a reason to fail.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace vibepit::launcher
