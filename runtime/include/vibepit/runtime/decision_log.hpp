#pragma once
// Decision records: one per decision, plus one when an allowed connection closes.
// I/O threads push into their own bounded single-producer queue; one writer thread drains
// every queue, formats NDJSON, writes the log and keeps a bounded in-memory ring.
// Nothing on the data path takes a lock shared with another thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/line_ring.hpp"
#include "vibepit/runtime/poll_schedule.hpp"

namespace vibepit::runtime {

// A record's free text: a string literal, borrowed (so a denial's standard explanation
// costs its I/O thread no allocation), or text of its own. Assigning text owns it;
// set_literal() borrows.
class RecordText {
 public:
  RecordText() = default;
  RecordText(std::string s) : own_(std::move(s)) {}  // NOLINT: implicit, as std::string's
  RecordText(const char* s) : own_(s) {}             // NOLINT: copied, not borrowed
  // `s` must have static storage: a literal.
  void set_literal(const char* s) {
    own_.clear();
    lit_ = s;
  }
  std::string_view view() const { return lit_ ? std::string_view(lit_) : std::string_view(own_); }
  operator std::string_view() const { return view(); }  // NOLINT: reads as a string
  bool empty() const { return view().empty(); }
  friend bool operator==(const RecordText& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& os, const RecordText& t) { return os << t.view(); }

 private:
  std::string own_;
  const char* lit_ = nullptr;
};

struct DecisionRecord {
  std::uint64_t id = 0;
  std::int64_t ts_us = 0;  // wall clock, microseconds since the epoch
  const char* src = "proxy";
  bool close = false;   // false: the decision; true: the connection it allowed has closed
  bool totals = false;  // a decision record written at completion, carrying the totals too
  std::string client;
  std::string method;
  std::string host;
  std::uint16_t port = 0;
  policy::Verdict verdict = policy::Verdict::deny;
  policy::Reason reason = policy::Reason::not_allowlisted;
  std::string rule;
  std::string range;         // the blocked range, for blocked_address
  std::string addr;          // the address dialled
  RecordText detail;         // a short human explanation
  std::uint16_t status = 0;  // HTTP status sent to the client
  std::uint64_t gen = 0;
  policy::Mode mode = policy::Mode::enforce;  // the snapshot's mode at decision time
  bool would_deny = false;                    // audit mode: allowed although no rule matched
  std::uint64_t bytes_up = 0;
  std::uint64_t bytes_down = 0;
  std::uint64_t ms = 0;
  std::uint32_t elapsed_us = 0;  // request arrival to decision; 0 when not measured
  // A summary (RecordFolder): this record stands for `count` decisions of its client and
  // reason in an interval of `interval_ms`, folded into one. 0: an ordinary record.
  std::uint64_t count = 0;
  std::uint32_t interval_ms = 0;
  // DNS decisions (src "dns"): host holds the QNAME; the answer's addresses are formatted
  // by the writer thread, not on the I/O thread.
  std::uint16_t qtype = 0;          // 0 when the query could not be parsed that far
  const char* rcode = nullptr;      // static storage: "NOERROR", "REFUSED", ...
  const char* transport = nullptr;  // "udp" or "tcp"
  bool cached = false;
  std::vector<policy::IpAddr> addrs;
  // The client as an address and port, which the writer formats when `client` is empty:
  // the I/O threads (the DNS server's per-query path, the proxy's sessions) leave `client`
  // empty, so a record costs them no text of its own.
  policy::IpAddr client_ip;
  std::uint16_t client_port = 0;
};

std::string to_json_line(const DecisionRecord& r);                 // one NDJSON line, with '\n'
void append_json_line(std::string& out, const DecisionRecord& r);  // the same, appended to out
std::int64_t now_us();  // the wall clock of DecisionRecord::ts_us, microseconds

// Rotation of the decision-log file: past max_bytes (0: never) it is renamed PATH.1 (PATH.1
// to PATH.2, and so on; PATH.<keep> is the oldest kept) and a new PATH is started.
struct LogRotation {
  std::uint64_t max_bytes = 0;
  unsigned keep = 3;
};

// The heap buffers of records that are done with (written, or folded away), kept for new
// records: the host, rule and dialled-address text and the answer's address list. A record
// filled from them costs its thread no allocation, and the thread that finished the old
// one frees nothing. Only buffers worth keeping are taken: on the heap (an inline string
// has nothing to give) and within the bounds, so a spare holds at most a few hundred bytes.
struct RecordBuffers {
  static constexpr std::size_t kTextMax = 256;  // a QNAME's 253 characters fit
  static constexpr std::size_t kAddrsMax = 16;

  std::string host, rule, addr;
  std::vector<policy::IpAddr> addrs;

  // Takes each of r's buffers worth keeping that is larger than the one held; the one held
  // goes to r instead. True when any was taken.
  bool take(DecisionRecord& r);
  // Gives the buffers held to r, a new record (what r held goes nowhere), each emptied with
  // its capacity kept; this holds none after.
  void give(DecisionRecord& r);
  bool empty() const;
};

class DecisionLog {
 public:
  // One producer per I/O thread. push() never blocks; when the queue is full the record is
  // counted as dropped.
  class Producer {
   public:
    explicit Producer(std::size_t capacity);
    void push(DecisionRecord&& r);
    std::uint64_t next_id();  // unique across producers
    std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
    // Gives a new record the buffers (RecordBuffers) of a record the writer has finished
    // with, when one is back. Without this, a host name or rule past std::string's 15
    // inline characters (most real ones) and any answer's address list cost an allocation
    // on the I/O thread and a free on the writer's.
    void reuse_buffers(DecisionRecord& r);

    // Records' buffers kept for reuse, at most, and the largest kept. The writer takes a
    // thread's records every PollSchedule::kPollMin at the most (2.5 ms), so at 100 000 records a
    // second up to 250 are made before their predecessors' buffers come back. At most about 256 × 1
    // KiB is kept; with ordinary names, a few tens of KiB.
    static constexpr std::size_t kSpares = 256;
    static constexpr std::size_t kSpareTextMax = RecordBuffers::kTextMax;
    static constexpr std::size_t kSpareAddrsMax = RecordBuffers::kAddrsMax;

   private:
    friend class DecisionLog;
    bool pop(DecisionRecord& out);      // writer thread only
    void give_back(DecisionRecord& r);  // writer thread only: r is formatted, its buffers free
    std::vector<DecisionRecord> slots_;
    std::size_t mask_;
    std::vector<RecordBuffers> spares_ =
        std::vector<RecordBuffers>(kSpares);              // a queue the other way
    alignas(64) std::atomic<std::size_t> head_{0};        // written by the producer
    alignas(64) std::atomic<std::size_t> tail_{0};        // written by the writer thread
    alignas(64) std::atomic<std::size_t> spare_head_{0};  // written by the writer thread
    alignas(64) std::atomic<std::size_t> spare_tail_{0};  // written by the producer
    alignas(64) std::atomic<std::uint64_t> dropped_{0};
    std::uint64_t id_next_ = 0, id_end_ = 0;
    DecisionLog* owner_ = nullptr;
  };

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
  std::uint64_t rotations() const { return rotations_.load(std::memory_order_relaxed); }
  // Records the file could not take (disk full, the file gone); they are still in the ring.
  std::uint64_t unwritten() const { return unwritten_.load(std::memory_order_relaxed); }
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
  // Every kWritebackChunk bytes the writer starts the disk write of what it wrote
  // (sync_file_range, SYNC_FILE_RANGE_WRITE: started, not waited for).
  static constexpr std::uint64_t kWritebackChunk = 1 << 20;

 private:
  void run();
  // Writer thread only: the file's part.
  bool open_file();
  void close_file();
  void rotate();
  void write_batch();
  void write_out(std::string_view buf, std::size_t lines);
  void start_writeback();
  void note_write_failure(std::size_t lines, int err);
  std::size_t drain_once();
  std::uint64_t take_id_block();
  bool queues_empty() const;    // writer thread only
  std::size_t waiting() const;  // writer thread only: records in the queues
  void wake();                  // any thread: wake the writer if it sleeps

  std::function<void(const DecisionRecord&)> observer_;
  bool to_stdout_ = false;
  std::string path_;  // the file, or empty (stdout or ring only)
  int fd_ = -1;
  LogRotation rotation_;
  std::uint64_t file_bytes_ = 0;  // the size of the current file
  bool broken_line_ = false;      // the file ends in a line cut short by a failed write
  bool failing_ = false;          // writes are failing (logged once per episode)
  // Where the part of the file not yet handed to the disk begins (see start_writeback()), and
  // whether the file takes sync_file_range() at all (a pipe or a terminal does not).
  std::uint64_t writeback_from_ = 0;
  bool writeback_ = true;
  std::atomic<bool> reopen_{false};
  std::atomic<std::uint64_t> rotations_{0};
  std::atomic<std::uint64_t> unwritten_{0};
  std::vector<std::unique_ptr<Producer>> producers_;
  std::atomic<std::uint64_t> id_blocks_{0};
  std::atomic<bool> stopping_{false};
  // 1 while the writer sleeps (or is about to). A producer reads it after each push, with
  // the push and this flag ordered (seq_cst) against the writer's store and its last look
  // at the queues: either the writer sees the record, or the producer sees the flag.
  alignas(64) std::atomic<std::uint32_t> asleep_{0};
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

}  // namespace vibepit::runtime
