#include "vibepit/decision_log/poll_schedule.hpp"

#include <algorithm>

namespace vibepit::decision_log {

std::chrono::microseconds PollSchedule::next_poll(std::chrono::microseconds slept,
                                                  std::size_t found) {
  if (found > kPollBatch) return std::max(kPollMin, slept / 2);
  if (found < kPollBatch / 2) return std::min(kPollMax, slept * 2);
  return std::clamp(slept, kPollMin, kPollMax);
}

PollSchedule::Next PollSchedule::after_pass(std::size_t found) {
  quiet_ = found != 0 ? std::chrono::microseconds{0} : quiet_ + interval_;
  interval_ = next_poll(interval_, found);
  if (quiet_ < kParkAfter) return {false, interval_};
  return {true, std::chrono::microseconds{0}};
}

void PollSchedule::woke_from_park() {
  quiet_ = std::chrono::microseconds{0};
  interval_ = kPollMax;
}

}  // namespace vibepit::decision_log
