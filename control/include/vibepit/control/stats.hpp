#pragma once
// Counters for /v1/stats and /metrics, fed by the decision log's writer thread (never by
// the data path). Per-host counters are bounded: past `max_hosts` distinct names, new names
// are counted together under "(other)", so a flood of random names cannot grow memory.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "vibepit/control/api.hpp"
#include "vibepit/decision_log/decision_log.hpp"

namespace vibepit::control {

// Prometheus text: a family's HELP and TYPE lines, and one sample, bare or with one label
// (`value` is one of our own names, never escaped).
void prometheus_header(std::string& out, const char* name, const char* type, const char* help);
void prometheus_sample(std::string& out, const char* name, std::uint64_t n);
void prometheus_sample(std::string& out, const char* name, const char* label, const char* value,
                       std::uint64_t n);

// A latency histogram with fixed bucket bounds (Prometheus "le" semantics).
class Histogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.05,    0.25,   1,     10,     60};
  void observe(double seconds);
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  std::uint64_t count() const { return count_; }

 private:
  std::array<std::uint64_t, kBounds.size()> buckets_{};  // non-cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

class DecisionStats : public StatsSource {
 public:
  explicit DecisionStats(std::size_t max_hosts = 1000) : max_hosts_(max_hosts) {}

  void observe(const decision_log::DecisionRecord& r);  // the decision log's writer thread
  nlohmann::json to_json() const;  // what stats_json() prints, for callers that add fields
  std::string stats_json() const override;
  std::string prometheus() const override;
  std::size_t tracked_hosts() const;

 private:
  struct HostCounters {
    std::uint64_t allow = 0, deny = 0, bytes_up = 0, bytes_down = 0;
  };
  HostCounters& host(const std::string& name);

  mutable std::mutex mu_;  // the writer thread and control requests only
  std::size_t max_hosts_;
  std::unordered_map<std::string, HostCounters> hosts_;
  HostCounters other_;
  std::uint64_t other_names_ = 0;  // decisions whose host was not tracked
  // (src, verdict, reason) -> count; a handful of keys.
  std::map<std::string, std::uint64_t> decisions_;
  std::map<int, std::uint64_t> http_status_;
  std::map<std::string, std::uint64_t> dns_rcode_;
  std::uint64_t tunnels_closed_ = 0, bytes_up_ = 0, bytes_down_ = 0;
  std::map<std::string, std::uint64_t> holds_;      // ask mode: requests held, and how each ended
  std::uint64_t dns_answers_ = 0, dns_cached_ = 0;  // allowed queries, and those from cache
  Histogram decide_proxy_, decide_dns_, tunnel_duration_;
};

}  // namespace vibepit::control
