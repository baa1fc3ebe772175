#pragma once
// When the decision log's writer next looks at its queues. Pure (no clock, no thread), so
// tests step it through a load on a virtual clock instead of counting a real thread's
// wake-ups, which a busy machine would change.

#include <chrono>
#include <cstddef>

namespace vibepit::decision_log {

// The writer polls while records come, and each poll is a wake-up on a core the workers may
// share: its work (formatting and writing what came since the last poll) runs in one
// stretch, and an I/O thread that wakes on that core meanwhile waits for it. So the interval
// follows the rate: at a steady rate it settles on one of kPollMax / 2^k, no shorter than
// kPollMin, at which a poll finds half a batch to a batch (kPollBatch records, about 30 µs
// of work here). A trickle is taken every kPollMax (a record 20 ms late costs no reader
// anything); 10 000 records a second every 2.5 ms, 25 at a time. Polled every 20 ms, that
// rate made stretches of 200 records, and DNS answers waiting behind them made most of
// vibepit-proxy's p99 at 10 000 queries a second (docs/benchmarks.md). kPollMin bounds the
// wake-ups at 400 a second, whatever the rate. After kParkAfter without a record the writer
// parks until a producer pushes, so an idle proxy costs no wake-ups.
class PollSchedule {
 public:
  static constexpr std::chrono::microseconds kPollMax{20'000};
  static constexpr std::chrono::microseconds kPollMin{kPollMax / 8};
  static constexpr std::size_t kPollBatch = 32;
  static constexpr std::chrono::milliseconds kParkAfter{60};

  // The interval after a poll that slept `slept` and found `found` records: halved while a
  // poll finds more than kPollBatch, doubled while it finds less than half of that.
  static std::chrono::microseconds next_poll(std::chrono::microseconds slept, std::size_t found);

  // What the writer does once its queues are empty, having taken `found` records since it
  // last slept: sleep for `sleep`, or park (sleep until a push) when `park`.
  struct Next {
    bool park = false;
    std::chrono::microseconds sleep{0};
  };
  Next after_pass(std::size_t found);
  // The writer woke from parking: it starts again from the longest interval.
  void woke_from_park();

 private:
  std::chrono::microseconds interval_ = kPollMax;
  std::chrono::microseconds quiet_{0};  // slept in a row without a record
};

}  // namespace vibepit::decision_log
