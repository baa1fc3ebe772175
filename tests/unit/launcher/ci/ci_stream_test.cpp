// vibepit ci's tally of the proxy's decision stream: records folded, gaps and the proxy's
// final counters turned into the reasons a report is incomplete.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/launcher/ci/ci_stream.hpp"

namespace vibepit::launcher {
namespace {

// A record as the control API streams it: its sequence number first.
std::string record(std::uint64_t seq, const std::string& host, const std::string& verdict) {
  return "{\"seq\":" + std::to_string(seq) +
         ",\"id\":1,\"ts\":\"2026-12-04T10:00:00.000000Z\",\"src\":\"proxy\",\"event\":"
         "\"decision\",\"method\":\"CONNECT\",\"host\":\"" +
         host + "\",\"port\":443,\"verdict\":\"" + verdict +
         "\",\"reason\":\"x\",\"rule\":\"\",\"gen\":1}";
}

std::string end(std::uint64_t last, std::uint64_t dropped = 0, std::uint64_t unwritten = 0) {
  return "{\"end\":true,\"last\":" + std::to_string(last) +
         ",\"dropped\":" + std::to_string(dropped) + ",\"unwritten\":" + std::to_string(unwritten) +
         "}";
}

struct Case {
  const char* name;
  std::vector<std::string> lines;
  std::string stream_error;
  std::vector<std::string> want;  // a substring of each problem, in order
  std::uint64_t missing = 0;
};

TEST(StreamTally, ProblemsTable) {
  const std::vector<Case> cases = {
      // Every record, then the end line: complete.
      {"complete", {record(1, "a.test", "allow"), record(2, "b.test", "deny"), end(2)}, "", {}},
      // Heartbeat-free and empty: a job that reached for nothing is complete too.
      {"nothing", {end(0)}, "", {}},
      // A record the ring evicted before it was sent: the gap in the numbers shows it, and
      // the server's lost note adds nothing of its own.
      {"gap",
       {record(1, "a.test", "allow"), "{\"lost\":2,\"after\":1}", record(4, "b.test", "deny"),
        end(4)},
       "",
       {"2 decision records never reached"},
       2},
      // Records after the last one received, but before the end: missing as well.
      {"tail missing", {record(1, "a.test", "allow"), end(3)}, "", {"2 decision records"}, 2},
      // The proxy's queues overflowed: those records were never numbered.
      {"dropped",
       {record(1, "a.test", "allow"), end(1, 5)},
       "",
       {"5 decision records were dropped"}},
      // Records the file could not take are in the stream all the same: not a problem.
      {"unwritten only", {record(1, "a.test", "allow"), end(1, 0, 7)}, "", {}},
      // No end line: the proxy died, or the stream broke.
      {"no end", {record(1, "a.test", "allow")}, "", {"did not stop cleanly"}},
      {"broken",
       {record(1, "a.test", "allow")},
       "the decision stream was cut short",
       {"stopped before its final counters: the decision stream was cut short"}},
      // Lines that are not records, and anything after the end, are counted and reported.
      {"junk", {"{\"seq\":1,not json", "garbage", end(1)}, "", {"2 lines of the decision stream"}},
      {"after end", {end(0), record(1, "late.test", "deny")}, "", {"1 lines"}, 0},
      // A record numbered again (a replay) is not counted twice.
      {"replay",
       {record(1, "a.test", "deny"), record(1, "a.test", "deny"), end(1)},
       "",
       {"1 lines"}},
  };
  for (const auto& c : cases) {
    CiReport r;
    StreamTally t(r);
    for (const auto& l : c.lines) t.line(l);
    t.finish();
    const auto got = t.problems(c.stream_error);
    ASSERT_EQ(got.size(), c.want.size()) << c.name << (got.empty() ? "" : ": " + got.front());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NE(got[i].find(c.want[i]), std::string::npos) << c.name << ": " << got[i];
    EXPECT_EQ(t.missing(), c.missing) << c.name;
  }
}

TEST(StreamTally, FoldsRecordsAndKeepsTheDenial) {
  CiReport r;
  StreamTally t(r);
  t.line(record(1, "evil.test", "deny"));
  for (std::uint64_t i = 2; i <= 1000; ++i) t.line(record(i, "ok.test", "allow"));
  t.line(end(1000, 0, 1000));
  t.finish();
  EXPECT_TRUE(t.problems("").empty());
  EXPECT_EQ(t.received(), 1000u);
  EXPECT_EQ(t.unwritten(), 1000u);
  ASSERT_EQ(r.destinations.size(), 2u);
  EXPECT_EQ(r.destinations[0].host, "evil.test");  // denied first
  EXPECT_EQ(r.destinations[0].verdict, "deny");
  EXPECT_EQ(r.destinations[1].count, 999u);
}

TEST(StreamTally, DestinationsPastTheLimitMakeItIncomplete) {
  CiReport r;
  StreamTally t(r);
  const std::uint64_t n = kMaxDestinations + 3;
  for (std::uint64_t i = 1; i <= n; ++i)
    t.line(record(i, "h" + std::to_string(i) + ".test", "allow"));
  t.line(end(n));
  t.finish();
  EXPECT_EQ(r.destinations.size(), kMaxDestinations);
  EXPECT_EQ(r.destinations_over_limit, 3u);
  const auto got = t.problems("");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("counted but not listed"), std::string::npos) << got[0];
}

}  // namespace
}  // namespace vibepit::launcher
