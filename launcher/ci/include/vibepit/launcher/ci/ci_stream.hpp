#pragma once
// vibepit ci's side of the proxy's decision stream (GET /v1/decisions?follow=1&after=0 on
// the control API): each line tallied, each record folded into a report, and at the end
// the list of reasons the report is incomplete. The stream starts at the session's first
// record and ends with the proxy's end line (its final counters), so the report never
// depends on a file the job could fill or rotate away, and it knows whether it saw every
// record (docs/ci.md, ARCHITECTURE.md invariant 8). Pure: no I/O.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/launcher/ci/ci_report.hpp"

namespace vibepit::launcher {

class StreamTally {
 public:
  // Records are folded into `report` (its destinations, generation and skipped lines).
  explicit StreamTally(CiReport& report);

  // One line of the stream, without its newline: a record ({"seq":N,...}), a note that the
  // ring evicted records before they were sent ({"lost":N,...}), or the end line
  // ({"end":true,"last":N,"dropped":N,"unwritten":N}). Nothing may follow the end line.
  void line(std::string_view text);
  // No more lines will come; sorts the report's destinations.
  void finish();

  // Why the report is incomplete; empty when every record the proxy made was folded in.
  // `stream_error`: why the stream stopped, if it did not end well ("" otherwise).
  std::vector<std::string> problems(const std::string& stream_error) const;

  bool ended() const { return ended_; }
  std::uint64_t received() const { return received_; }
  std::uint64_t missing() const { return missing_; }  // sequence numbers never seen
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t unwritten() const { return unwritten_; }

 private:
  DecisionLogReader reader_;
  CiReport& report_;
  std::uint64_t next_seq_ = 1;  // the proxy numbers records from 1
  std::uint64_t received_ = 0, missing_ = 0, dropped_ = 0, unwritten_ = 0, after_end_ = 0;
  bool ended_ = false;
};

}  // namespace vibepit::launcher
