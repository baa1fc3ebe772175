#include "vibepit/decision_log/poll_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>

namespace vibepit::decision_log {
namespace {

using us = std::chrono::microseconds;
using ms = std::chrono::milliseconds;

// The writer's passes over a steady load on a virtual clock: `per_ms` records a millisecond
// for `load`, then none, starting from a parked writer that the first record wakes. The
// writer's own work takes no time here; on a real machine it only lengthens the sleeps.
struct Simulated {
  int polls_during_load = 0;  // wake-ups from a poll's sleep while records came
  us parked_after_load{0};    // from the end of the load to parking
  std::size_t taken = 0;      // records the passes took
  std::size_t most_in_a_poll = 0;
};

Simulated simulate(std::size_t per_ms, ms load) {
  const std::size_t total = per_ms * static_cast<std::size_t>(load.count());
  const auto arrived = [&](us at) {  // records pushed by `at`, one every 1/per_ms ms from 0
    return std::min(total, static_cast<std::size_t>(at.count()) * per_ms / 1000 + 1);
  };
  PollSchedule schedule;
  schedule.woke_from_park();
  Simulated run;
  us now{0};
  for (int pass = 0; pass < 100'000; ++pass) {
    const std::size_t found = arrived(now) - run.taken;
    run.taken += found;
    if (now > us{0}) run.most_in_a_poll = std::max(run.most_in_a_poll, found);
    const auto next = schedule.after_pass(found);
    if (next.park) {
      run.parked_after_load = now - std::chrono::duration_cast<us>(load);
      return run;
    }
    now += next.sleep;
    if (now <= load) ++run.polls_during_load;
  }
  ADD_FAILURE() << "the writer never parked";
  return run;
}

// The poll interval follows the rate: at a steady rate it settles on an interval (kPollMax /
// 2^k, no shorter than kPollMin) whose polls find half a batch to a batch of records, so
// that the writer's stretch of work on a shared core stays short however busy the proxy.
TEST(PollSchedule, TheIntervalSettlesWhereAPollFindsUpToABatch) {
  constexpr std::size_t kBatch = PollSchedule::kPollBatch;
  // The interval after 20 polls from the longest, each finding found(interval) records.
  const auto settle = [](auto found) {
    us interval = PollSchedule::kPollMax;
    for (int poll = 0; poll < 20; ++poll) {
      interval = PollSchedule::next_poll(interval, found(interval));
    }
    return interval;
  };
  for (int per_4ms = 0; per_4ms <= 2000; ++per_4ms) {  // 0 to 500 records a millisecond
    const auto found = [&](us interval) {
      return static_cast<std::size_t>(per_4ms * interval.count() / 4000);
    };
    const us interval = settle(found);
    const std::string rate = std::to_string(per_4ms / 4.0) + " a ms";
    EXPECT_EQ(PollSchedule::next_poll(interval, found(interval)), interval)
        << rate << ": unsettled";
    if (interval > PollSchedule::kPollMin) {
      EXPECT_LE(found(interval), kBatch) << rate;
    }
    if (interval < PollSchedule::kPollMax) {
      EXPECT_GE(found(interval), kBatch / 2) << rate;
    }
  }
  const auto settled = [&](std::size_t per_ms) {
    return settle([per_ms](us interval) { return per_ms * interval.count() / 1000; });
  };
  EXPECT_EQ(settled(0), PollSchedule::kPollMax);    // nothing comes: the longest
  EXPECT_EQ(settled(1), PollSchedule::kPollMax);    // a trickle: 20 records a poll
  EXPECT_EQ(settled(4), us{5'000});                 // 4 000 a second: 20 a poll
  EXPECT_EQ(settled(10), us{2'500});                // 10 000 a second: 25 a poll
  EXPECT_EQ(settled(100), PollSchedule::kPollMin);  // more than kPollMin keeps to a batch
  EXPECT_EQ(PollSchedule::kPollMin, us{2'500});     // at most 400 wake-ups a second
}

// A trickle of records (one a millisecond, as a lightly used proxy makes) costs a wake-up per
// poll, not one per record or per 2 ms: the writer takes what came in each interval in one go.
TEST(PollSchedule, ATrickleWakesTheWriterOncePerLongestInterval) {
  const Simulated run = simulate(1, ms{400});
  EXPECT_EQ(run.taken, 400u);
  EXPECT_EQ(run.polls_during_load, 400 / 20);
  EXPECT_EQ(run.most_in_a_poll, 20u);
}

// A busy producer shortens the polls: polling every kPollMax would wake 20 times in 400 ms;
// settled at kPollMin, about 160, each poll finding no more than a batch.
TEST(PollSchedule, ABusyProducerShortensThePolls) {
  const Simulated run = simulate(10, ms{400});
  EXPECT_EQ(run.taken, 4000u);
  EXPECT_GT(run.polls_during_load, 3 * (400 / 20));
  EXPECT_LE(run.polls_during_load, 400 * 1000 / PollSchedule::kPollMin.count());
  EXPECT_LE(run.most_in_a_poll, 10 * 20u) << "the first poll, at the longest interval";
}

// When the records stop, the writer parks: after kParkAfter without a record, and never
// later than one longest poll past that, whatever the rate before.
TEST(PollSchedule, TheWriterParksOnceTheRecordsStop) {
  for (const std::size_t per_ms : {1u, 4u, 10u, 100u}) {
    const Simulated run = simulate(per_ms, ms{400});
    EXPECT_GE(run.parked_after_load, PollSchedule::kParkAfter) << per_ms << " a ms";
    EXPECT_LE(run.parked_after_load, PollSchedule::kParkAfter + 2 * PollSchedule::kPollMax)
        << per_ms << " a ms";
  }
}

// Parking and waking start the writer again from the longest interval.
TEST(PollSchedule, AWokenWriterStartsFromTheLongestInterval) {
  PollSchedule schedule;
  for (int i = 0; i < 10; ++i) schedule.after_pass(PollSchedule::kPollBatch * 4);
  EXPECT_EQ(schedule.after_pass(PollSchedule::kPollBatch).sleep, PollSchedule::kPollMin);
  schedule.woke_from_park();
  EXPECT_EQ(schedule.after_pass(PollSchedule::kPollBatch / 2).sleep, PollSchedule::kPollMax);
}

}  // namespace
}  // namespace vibepit::decision_log
