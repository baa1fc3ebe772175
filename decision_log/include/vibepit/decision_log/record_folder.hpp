#pragma once
// Keeps one client from filling the decision log. Within each interval (one second), a
// client's first `per_client` deny records are written whole; the rest, and every record
// that is over-limit traffic by definition (a DNS query over dns-client-qps), are folded:
// counted, not written. When the interval ends, each client with folded records gets one
// summary record: the first folded record, with `count` saying how many it stands for.
// Allowed decisions are never folded. One folder per I/O thread; not thread-safe.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::decision_log {

class RecordFolder {
 public:
  using clock = std::chrono::steady_clock;
  using Emit = std::function<void(DecisionRecord&&)>;
  static constexpr std::chrono::milliseconds kInterval{1'000};
  // Clients tracked in one interval; past it, new clients share one entry (the
  // unspecified address), so a flood from many sources is still folded.
  static constexpr std::size_t kMaxClients = 4'096;

  // per_client 0: deny records are never folded (over-limit ones still are).
  RecordFolder(std::uint32_t per_client, Emit emit);

  // A deny record of `client`: written whole (true), or folded into its client's summary
  // (false). Records of an interval that has ended are summarised first.
  bool admit(DecisionRecord& rec, const policy::IpAddr& client, clock::time_point now);
  // Fold `rec` whatever the client's budget: over-limit traffic.
  void fold(DecisionRecord& rec, const policy::IpAddr& client, clock::time_point now);

  // Summaries are waiting for the interval to end: call flush() at due().
  bool pending() const { return folded_clients_ > 0; }
  clock::time_point due() const { return interval_start_ + kInterval; }
  // End the interval if it is over (or `force`): one summary per client with folded records.
  void flush(clock::time_point now, bool force = false);

 private:
  struct Entry {
    std::uint32_t whole = 0;   // records written whole this interval
    std::uint64_t folded = 0;  // records counted instead
    DecisionRecord first;      // the first folded record, which the summary carries
  };
  Entry& entry(const policy::IpAddr& client, clock::time_point now);
  void fold_into(Entry& e, DecisionRecord& rec);

  std::uint32_t per_client_;
  Emit emit_;
  clock::time_point interval_start_{};
  std::unordered_map<policy::IpAddr, Entry, policy::IpAddrHash> clients_;
  std::size_t folded_clients_ = 0;  // entries with folded > 0
};

}  // namespace vibepit::decision_log
