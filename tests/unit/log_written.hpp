#pragma once
// Waiting for the decision log's writer: the tests that count what records cost their
// thread let the writer catch up, as a busy server's writer does all along, so that the
// records' buffers are back (RecordBuffers) before the next ones are made.
#include <chrono>
#include <cstdint>
#include <thread>

#include "vibepit/decision_log/decision_log.hpp"

namespace vibepit::testing {

// Sleeps (allocating nothing) until `log` has written `records`, at most 5 s; true when it
// has.
inline bool wait_written(const decision_log::DecisionLog& log, std::uint64_t records) {
  using namespace std::chrono_literals;
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (log.written() < records && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(200us);
  }
  return log.written() >= records;
}

}  // namespace vibepit::testing
