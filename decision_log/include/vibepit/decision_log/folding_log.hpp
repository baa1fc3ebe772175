#pragma once
// The decision log as one I/O thread writes to it. Allowed and close records go straight to
// the thread's producer; deny records pass the thread's RecordFolder, and a timer on the
// thread's loop writes the folded clients' summaries when their interval ends. The proxy and
// the DNS server each keep one per thread. Use from that thread only.
#include <cstdint>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/decision_log/record_folder.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::decision_log {

class FoldingLog {
 public:
  using clock = RecordFolder::clock;

  // per_client: decision-log-per-client.
  FoldingLog(asio::io_context& io, DecisionLog::Producer& producer, std::uint32_t per_client);
  FoldingLog(const FoldingLog&) = delete;
  FoldingLog& operator=(const FoldingLog&) = delete;

  std::uint64_t next_id() { return producer_.next_id(); }
  // A new record's buffers (RecordBuffers): those of the last records folded here, or of
  // records already written (Producer::reuse_buffers). Either way, no allocation.
  void reuse_buffers(DecisionRecord& rec);
  // Written, unless it is a denial (not a close record) past its client's budget: folded.
  void write(DecisionRecord&& rec, const policy::IpAddr& client, clock::time_point now);
  // Folded whatever the budget: over-limit traffic.
  void fold(DecisionRecord&& rec, const policy::IpAddr& client, clock::time_point now);
  // Write the pending summaries now and stop the timer: the thread is stopping, or has
  // stopped (then call it from the thread that joined it).
  void flush();

 private:
  void arm();  // summaries are pending: write them when their interval ends
  void keep_buffers(DecisionRecord& rec);  // a folded record's, for reuse_buffers()

  DecisionLog::Producer& producer_;
  RecordFolder folder_;
  asio::steady_timer timer_;
  bool armed_ = false;
  RecordBuffers kept_;  // a folded record's, for the next record on this thread
};

}  // namespace vibepit::decision_log
