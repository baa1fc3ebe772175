#include "vibepit/control/stats.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace vibepit::control {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Prometheus label values: backslash, double quote and newline are escaped.
std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void prometheus_header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void prometheus_sample(std::string& out, const char* name, std::uint64_t n) {
  out += name;
  out += ' ';
  out += std::to_string(n);
  out += '\n';
}

void prometheus_sample(std::string& out, const char* name, const char* label, const char* value,
                       std::uint64_t n) {
  out += name;
  out += '{';
  out += label;
  out += "=\"";
  out += value;
  out += "\"} ";
  out += std::to_string(n);
  out += '\n';
}

void Histogram::observe(double seconds) {
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  if (i < kBounds.size()) ++buckets_[i];
  ++count_;
  sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + number(kBounds[i]) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + number(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

DecisionStats::HostCounters& DecisionStats::host(const std::string& name) {
  auto it = hosts_.find(name);
  if (it != hosts_.end()) return it->second;
  if (hosts_.size() >= max_hosts_) {
    ++other_names_;
    return other_;
  }
  return hosts_[name];
}

void DecisionStats::observe(const decision_log::DecisionRecord& r) {
  std::lock_guard lock(mu_);
  const bool dns = std::string_view(r.src) == "dns";
  if (r.close) {
    ++tunnels_closed_;
    bytes_up_ += r.bytes_up;
    bytes_down_ += r.bytes_down;
    auto& h = host(r.host);
    h.bytes_up += r.bytes_up;
    h.bytes_down += r.bytes_down;
    tunnel_duration_.observe(static_cast<double>(r.ms) / 1000.0);
    return;
  }
  if (r.hold) {
    ++holds_[r.hold];
    if (std::string_view(r.hold) == "held") return;  // an event; its outcome is the decision
  }
  std::string key = std::string(r.src) + "\t" + std::string(policy::to_string(r.verdict)) + "\t" +
                    std::string(policy::to_string(r.reason));
  const std::uint64_t n = r.count ? r.count : 1;  // a summary stands for `count` decisions
  decisions_[key] += n;
  auto& h = host(r.host);
  if (r.verdict == policy::Verdict::allow) {
    h.allow += n;
  } else {
    h.deny += n;
  }
  if (r.totals) {  // a plain-HTTP request: decision and totals in one record
    bytes_up_ += r.bytes_up;
    bytes_down_ += r.bytes_down;
    h.bytes_up += r.bytes_up;
    h.bytes_down += r.bytes_down;
  }
  if (r.status) http_status_[r.status] += n;
  if (dns) {
    if (r.rcode) dns_rcode_[r.rcode] += n;
    if (r.verdict == policy::Verdict::allow) {
      ++dns_answers_;
      if (r.cached) ++dns_cached_;
    }
  }
  if (r.elapsed_us) {
    (dns ? decide_dns_ : decide_proxy_).observe(static_cast<double>(r.elapsed_us) / 1e6);
  }
}

std::size_t DecisionStats::tracked_hosts() const {
  std::lock_guard lock(mu_);
  return hosts_.size();
}

std::string DecisionStats::stats_json() const {
  return to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json DecisionStats::to_json() const {
  using json = nlohmann::json;
  std::lock_guard lock(mu_);
  json hosts = json::object();
  for (const auto& [name, c] : hosts_) {
    hosts[name] = {{"allow", c.allow},
                   {"deny", c.deny},
                   {"bytes_up", c.bytes_up},
                   {"bytes_down", c.bytes_down}};
  }
  std::uint64_t allow = 0, deny = 0, proxy_n = 0, dns_n = 0;
  json reasons = json::object();
  for (const auto& [key, n] : decisions_) {
    auto a = key.find('\t'), b = key.rfind('\t');
    auto src = key.substr(0, a), verdict = key.substr(a + 1, b - a - 1), reason = key.substr(b + 1);
    (verdict == "allow" ? allow : deny) += n;
    (src == "dns" ? dns_n : proxy_n) += n;
    reasons[src + "/" + reason] = reasons.value(src + "/" + reason, std::uint64_t{0}) + n;
  }
  json status = json::object();
  for (const auto& [code, n] : http_status_) status[std::to_string(code)] = n;
  json j = {
      {"totals",
       {{"decisions", allow + deny},
        {"allow", allow},
        {"deny", deny},
        {"proxy", proxy_n},
        {"dns", dns_n},
        {"tunnels_closed", tunnels_closed_}}},
      {"reasons", reasons},
      {"holds", holds_},
      {"http_status", status},
      {"bytes", {{"up", bytes_up_}, {"down", bytes_down_}}},
      {"dns",
       {{"answers", dns_answers_},
        {"cached", dns_cached_},
        {"cache_hit_rate",
         dns_answers_ ? static_cast<double>(dns_cached_) / static_cast<double>(dns_answers_) : 0.0},
        {"rcodes", dns_rcode_}}},
      {"hosts", hosts},
      {"hosts_tracked", hosts_.size()},
      {"hosts_limit", max_hosts_},
      {"other",
       {{"decisions", other_names_},
        {"allow", other_.allow},
        {"deny", other_.deny},
        {"bytes_up", other_.bytes_up},
        {"bytes_down", other_.bytes_down}}},
  };
  return j;
}

std::string DecisionStats::prometheus() const {
  std::lock_guard lock(mu_);
  std::string out;
  prometheus_header(out, "vibepit_decisions_total", "counter",
                    "Decisions by source (proxy, dns), verdict and reason.");
  for (const auto& [key, n] : decisions_) {
    auto a = key.find('\t'), b = key.rfind('\t');
    out += "vibepit_decisions_total{src=\"" + label_value(key.substr(0, a)) + "\",verdict=\"" +
           label_value(key.substr(a + 1, b - a - 1)) + "\",reason=\"" +
           label_value(key.substr(b + 1)) + "\"} " + std::to_string(n) + "\n";
  }
  prometheus_header(out, "vibepit_http_responses_total", "counter",
                    "Proxy answers by HTTP status (errors are 4xx and 5xx).");
  for (const auto& [code, n] : http_status_) {
    out += "vibepit_http_responses_total{status=\"" + std::to_string(code) + "\"} " +
           std::to_string(n) + "\n";
  }
  prometheus_header(out, "vibepit_dns_responses_total", "counter", "DNS answers by rcode.");
  for (const auto& [rcode, n] : dns_rcode_) {
    out += "vibepit_dns_responses_total{rcode=\"" + label_value(rcode) + "\"} " +
           std::to_string(n) + "\n";
  }
  prometheus_header(out, "vibepit_dns_cache_hits_total", "counter",
                    "Allowed DNS answers served from cache.");
  prometheus_sample(out, "vibepit_dns_cache_hits_total", dns_cached_);
  prometheus_header(out, "vibepit_dns_allowed_total", "counter", "Allowed DNS queries answered.");
  prometheus_sample(out, "vibepit_dns_allowed_total", dns_answers_);
  prometheus_header(out, "vibepit_tunnels_closed_total", "counter",
                    "Allowed connections that closed.");
  prometheus_sample(out, "vibepit_tunnels_closed_total", tunnels_closed_);
  prometheus_header(out, "vibepit_holds_total", "counter",
                    "Ask mode: requests held (outcome=\"held\"), and how holds ended.");
  for (const auto& [outcome, n] : holds_)
    prometheus_sample(out, "vibepit_holds_total", "outcome", outcome.c_str(), n);
  prometheus_header(out, "vibepit_bytes_total", "counter", "Bytes relayed, by direction.");
  prometheus_sample(out, "vibepit_bytes_total", "direction", "up", bytes_up_);
  prometheus_sample(out, "vibepit_bytes_total", "direction", "down", bytes_down_);
  prometheus_header(
      out, "vibepit_decision_seconds", "histogram",
      "Time from a request's arrival to its decision (after resolving and dialling).");
  decide_proxy_.render(out, "vibepit_decision_seconds", "src=\"proxy\"");
  decide_dns_.render(out, "vibepit_decision_seconds", "src=\"dns\"");
  prometheus_header(out, "vibepit_tunnel_duration_seconds", "histogram",
                    "Lifetime of allowed connections, from the decision to the close.");
  tunnel_duration_.render(out, "vibepit_tunnel_duration_seconds", "");
  return out;
}

}  // namespace vibepit::control
