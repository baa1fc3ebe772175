#pragma once
// The decision log: I/O threads push records into their own bounded single-producer queue
// (producer.hpp); one writer thread drains every queue, formats NDJSON (format.hpp), writes
// the file (log_file.hpp) and keeps a bounded in-memory ring for the control API.
// Nothing on the data path takes a lock shared with another thread.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vibepit/decision_log/format.hpp"
#include "vibepit/decision_log/line_ring.hpp"
#include "vibepit/decision_log/log_file.hpp"
#include "vibepit/decision_log/poll_schedule.hpp"
#include "vibepit/decision_log/producer.hpp"
#include "vibepit/decision_log/record.hpp"

namespace vibepit::decision_log {

class DecisionLog {
 public:
  using Producer = decision_log::Producer;

  struct RingEntry {
    std::uint64_t seq;
    std::string line;
  };

  // The ring's byte budget for each record it is to keep: it keeps ring_capacity records
  // while they average no more than this.
  static constexpr std::size_t kRingBytesPerRecord = 512;

  // path: a file (appended), "-" for stdout, or "" for no file (ring only).
  DecisionLog(const std::string& path, std::size_t ring_capacity, LogRotation rotation = {});
  ~DecisionLog();
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  // Called by the writer thread with every record before it is formatted (the control
  // API's counters). Set before start().
  void set_observer(std::function<void(const DecisionRecord&)> fn) { observer_ = std::move(fn); }

  // Create producers before start(); they live as long as the log.
  Producer& make_producer(std::size_t capacity = 1 << 14);
  void start();
  // Drain every queue, flush, and stop the writer thread.
  void stop();
  // True once stop() has returned: every record pushed before it is in the ring (or was
  // counted as dropped), and no more will come.
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  // Ring entries with seq > after, at most limit. `lost` counts entries after `after` that
  // were already evicted from the ring.
  std::vector<RingEntry> since(std::uint64_t after, std::size_t limit, std::uint64_t& lost) const;
  std::uint64_t last_seq() const;  // the newest ring entry's seq, 0 when none yet
  std::uint64_t dropped() const;   // records lost to full queues, over all producers
  std::uint64_t written() const { return written_.load(std::memory_order_relaxed); }
  std::uint64_t rotations() const { return file_ ? file_->rotations() : 0; }
  // Records the file could not take (disk full, the file gone); they are still in the ring.
  std::uint64_t unwritten() const { return file_ ? file_->unwritten() : 0; }
  // Close the file and open PATH anew before the next write (after an outside rotation;
  // vibepit-proxy calls it on SIGHUP). Any thread.
  void reopen();
  // Times the writer thread has woken from a sleep (a poll's, or the long one a push ends):
  // it polls while records come and parks while none do. Passes that find more records
  // at once do not count; they cost no wake-up. For anyone counting an idle proxy's
  // wake-ups.
  std::uint64_t writer_wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  // True while the writer is parked: it found no record for PollSchedule::kParkAfter and
  // sleeps until a push, stop() or reopen() wakes it.
  bool writer_parked() const { return parked_.load(std::memory_order_acquire); }
  // Times the writer has stepped aside (sched_yield) between records; see kYieldEvery.
  std::uint64_t writer_yields() const { return yields_.load(std::memory_order_relaxed); }

  // When the writer polls and when it parks: PollSchedule (poll_schedule.hpp).
  static constexpr std::size_t kPollBatch = PollSchedule::kPollBatch;
  // Even a short stretch holds the core for tens of microseconds, and the scheduler lets a
  // running thread finish its slice before a woken one runs: so, while it keeps up (no
  // more than kPollBatch records wait), the writer steps aside after every kYieldEvery
  // records (a few microseconds of work), and an I/O thread woken meanwhile runs first.
  // When more wait, it does not: it must not fall behind a busy core and drop records.
  static constexpr std::size_t kYieldEvery = 4;
  static constexpr std::uint64_t kWritebackChunk = LogFile::kWritebackChunk;

 private:
  void run();
  std::size_t drain_once();
  void write_batch();
  bool queues_empty() const;    // writer thread only
  std::size_t waiting() const;  // writer thread only: records in the queues

  std::function<void(const DecisionRecord&)> observer_;
  bool to_stdout_ = false;
  std::unique_ptr<LogFile> file_;  // none: stdout or ring only
  std::atomic<bool> reopen_{false};
  std::vector<std::unique_ptr<Producer>> producers_;
  WriterSignal signal_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> parked_{false};
  std::atomic<std::uint64_t> wakeups_{0};
  std::atomic<std::uint64_t> yields_{0};
  std::thread writer_;
  std::atomic<std::uint64_t> written_{0};
  std::atomic<bool> stopped_{false};
  // Writer thread only: the lines of one batch, end to end, and where each ends. Reused, so
  // formatting and writing allocate nothing once they have grown to a full batch.
  std::string batch_;
  std::vector<std::size_t> batch_ends_;

  mutable std::mutex ring_mu_;  // writer thread and control readers only
  LineRing ring_;
  std::uint64_t next_seq_ = 1;
};

}  // namespace vibepit::decision_log
