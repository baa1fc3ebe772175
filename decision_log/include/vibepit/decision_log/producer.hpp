#pragma once
// How an I/O thread hands records to the writer thread without a lock: a bounded
// single-producer, single-consumer queue per thread, and a second queue the other way that
// brings the buffers of written records back for reuse (RecordBuffers).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "vibepit/decision_log/record.hpp"

namespace vibepit::decision_log {

class DecisionLog;

// What every producer shares with the writer thread: the record ids handed out, and whether
// the writer sleeps. A producer reads `asleep` after each push, with the push and this flag
// ordered (seq_cst) against the writer's store and its last look at the queues: either the
// writer sees the record, or the producer sees the flag and wakes it.
struct WriterSignal {
  static constexpr std::uint64_t kIdBlock = 4096;  // ids a producer takes at once

  std::uint64_t take_id_block() {
    return 1 + id_blocks.fetch_add(1, std::memory_order_relaxed) * kIdBlock;
  }
  // Any thread: wake the writer if it sleeps.
  void wake() {
    if (asleep.exchange(0, std::memory_order_seq_cst) != 0) asleep.notify_one();
  }

  std::atomic<std::uint64_t> id_blocks{0};
  alignas(64) std::atomic<std::uint32_t> asleep{0};  // 1 while the writer sleeps (or is about to)
};

// One producer per I/O thread. push() never blocks; when the queue is full the record is
// counted as dropped.
class Producer {
 public:
  Producer(std::size_t capacity, WriterSignal& signal);
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  void push(DecisionRecord&& r);
  std::uint64_t next_id();  // unique across the producers of one log
  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Gives a new record the buffers (RecordBuffers) of a record the writer has finished
  // with, when one is back. Without this, a host name or rule past std::string's 15
  // inline characters (most real ones) and any answer's address list cost an allocation
  // on the I/O thread and a free on the writer's.
  void reuse_buffers(DecisionRecord& r);

  // Records' buffers kept for reuse, at most, and the largest kept. The writer takes a
  // thread's records every PollSchedule::kPollMin at the most (2.5 ms), so at 100 000
  // records a second up to 250 are made before their predecessors' buffers come back. At
  // most about 256 × 1 KiB is kept; with ordinary names, a few tens of KiB.
  static constexpr std::size_t kSpares = 256;
  static constexpr std::size_t kSpareTextMax = RecordBuffers::kTextMax;
  static constexpr std::size_t kSpareAddrsMax = RecordBuffers::kAddrsMax;

 private:
  friend class DecisionLog;
  // Writer thread only.
  bool pop(DecisionRecord& out);
  void give_back(DecisionRecord& r);  // r is formatted, its buffers free
  std::size_t waiting() const;        // records in the queue
  bool empty() const;                 // ordered (seq_cst) against a push

  std::vector<DecisionRecord> slots_;
  std::size_t mask_;
  std::vector<RecordBuffers> spares_ = std::vector<RecordBuffers>(kSpares);  // the other way
  alignas(64) std::atomic<std::size_t> head_{0};        // written by the producer
  alignas(64) std::atomic<std::size_t> tail_{0};        // written by the writer thread
  alignas(64) std::atomic<std::size_t> spare_head_{0};  // written by the writer thread
  alignas(64) std::atomic<std::size_t> spare_tail_{0};  // written by the producer
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::uint64_t id_next_ = 0, id_end_ = 0;
  WriterSignal& signal_;
};

}  // namespace vibepit::decision_log
