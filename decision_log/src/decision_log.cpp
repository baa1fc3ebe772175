#include "vibepit/decision_log/decision_log.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string_view>

namespace vibepit::decision_log {
namespace {
constexpr std::size_t kBatch = 1024;  // records the writer formats and writes at once
}  // namespace

DecisionLog::DecisionLog(const std::string& path, std::size_t ring_capacity, LogRotation rotation)
    : ring_(ring_capacity, ring_capacity > SIZE_MAX / kRingBytesPerRecord
                               ? SIZE_MAX
                               : ring_capacity * kRingBytesPerRecord) {
  if (path == "-") {
    to_stdout_ = true;
  } else if (!path.empty()) {
    file_ = std::make_unique<LogFile>(path, rotation);
  }
}

void DecisionLog::write_batch() {
  if (to_stdout_) {
    std::fwrite(batch_.data(), 1, batch_.size(), stdout);
  } else if (file_) {
    file_->write(batch_, batch_ends_);
  }
}

void DecisionLog::reopen() {
  reopen_.store(true, std::memory_order_seq_cst);
  signal_.wake();
}

std::size_t DecisionLog::waiting() const {
  std::size_t n = 0;
  for (const auto& p : producers_) n += p->waiting();
  return n;
}

bool DecisionLog::queues_empty() const {
  return std::all_of(producers_.begin(), producers_.end(),
                     [](const auto& p) { return p->empty(); });
}

DecisionLog::~DecisionLog() {
  stop();
}

DecisionLog::Producer& DecisionLog::make_producer(std::size_t capacity) {
  producers_.push_back(std::make_unique<Producer>(capacity, signal_));
  return *producers_.back();
}

void DecisionLog::start() {
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vp-log");  // as top -H and ps -L show it
    run();
  });
}

void DecisionLog::stop() {
  if (!writer_.joinable()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  signal_.wake();
  writer_.join();
  stopped_.store(true, std::memory_order_release);
}

std::size_t DecisionLog::drain_once() {
  DecisionRecord r;
  batch_.clear();
  batch_ends_.clear();
  for (auto& p : producers_) {
    while (batch_ends_.size() < kBatch && p->pop(r)) {
      if (observer_) observer_(r);
      append_json_line(batch_, r);
      p->give_back(r);
      batch_ends_.push_back(batch_.size());
      if (batch_ends_.size() % kYieldEvery == 0 && waiting() <= kPollBatch) {
        sched_yield();
        yields_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  const std::size_t n = batch_ends_.size();
  if (n == 0) return 0;
  write_batch();
  {
    std::lock_guard lock(ring_mu_);  // once per batch, not per record
    std::size_t start = 0;
    for (const std::size_t end : batch_ends_) {
      ring_.push(next_seq_++, std::string_view(batch_).substr(start, end - start));
      start = end;
    }
  }
  written_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void DecisionLog::run() {
  // Polling while records come keeps producers free of any wake-up syscall, and
  // PollSchedule::kPollMax bounds the log's latency. Once the queues have stayed empty for
  // kParkAfter the writer parks; the first push after that wakes it (one futex wake per
  // idle spell, not per record).
  PollSchedule schedule;
  std::size_t found = 0;  // records taken since the last sleep
  for (;;) {
    bool stopping = stopping_.load(std::memory_order_seq_cst);
    if (reopen_.exchange(false, std::memory_order_acq_rel) && file_) {
      file_->reopen();  // a rotation by someone else (logrotate): start PATH anew
    }
    if (const std::size_t n = drain_once(); n != 0) {
      found += n;
      continue;
    }
    if (to_stdout_) std::fflush(stdout);
    if (stopping) break;
    const auto next = schedule.after_pass(found);
    found = 0;
    if (!next.park) {
      std::this_thread::sleep_for(next.sleep);
      wakeups_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    signal_.asleep.store(1, std::memory_order_seq_cst);
    if (queues_empty() && !stopping_.load(std::memory_order_seq_cst) &&
        !reopen_.load(std::memory_order_seq_cst)) {
      parked_.store(true, std::memory_order_release);
      signal_.asleep.wait(1, std::memory_order_seq_cst);  // until wake() stores 0
      parked_.store(false, std::memory_order_release);
      wakeups_.fetch_add(1, std::memory_order_relaxed);
    }
    signal_.asleep.store(0, std::memory_order_relaxed);
    schedule.woke_from_park();
  }
}

std::uint64_t DecisionLog::dropped() const {
  std::uint64_t n = 0;
  for (const auto& p : producers_) n += p->dropped();
  return n;
}

std::uint64_t DecisionLog::last_seq() const {
  std::lock_guard lock(ring_mu_);
  return next_seq_ - 1;
}

std::vector<DecisionLog::RingEntry> DecisionLog::since(std::uint64_t after, std::size_t limit,
                                                       std::uint64_t& lost) const {
  std::lock_guard lock(ring_mu_);
  std::vector<RingEntry> out;
  lost = 0;
  // Records numbered up to next_seq_ - 1 were written; those before the ring's first are gone.
  const std::uint64_t first = ring_.empty() ? next_seq_ : ring_.first_seq();
  if (after + 1 < first) lost = first - (after + 1);
  const std::uint64_t start = after < first ? 0 : after - first + 1;
  for (auto i = start; i < ring_.size() && out.size() < limit; ++i) {
    out.push_back({first + i, ring_.line(static_cast<std::size_t>(i))});
  }
  return out;
}

}  // namespace vibepit::decision_log
