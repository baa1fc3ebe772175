#pragma once
// What the decision log's tests share: a typical record, and waiting for the writer.
#include <chrono>
#include <cstdint>
#include <thread>

#include "vibepit/decision_log/decision_log.hpp"

namespace vibepit::decision_log::test {

inline DecisionRecord sample() {
  DecisionRecord r;
  r.id = 7;
  r.ts_us = 1'700'000'000'123'456;
  r.client = "127.0.0.1:5000";
  r.method = "CONNECT";
  r.host = "example.com";
  r.port = 443;
  r.verdict = policy::Verdict::allow;
  r.reason = policy::Reason::allowlisted;
  r.rule = "example.com:443";
  r.addr = "203.0.113.7";
  r.gen = 3;
  return r;
}

// Waits until the writer has written n records, at most 10 s: a liveness bound, not a
// schedule.
inline void wait_written(const DecisionLog& log, std::uint64_t n) {
  for (int i = 0; i < 10'000 && log.written() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace vibepit::decision_log::test
