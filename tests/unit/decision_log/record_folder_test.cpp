// The decision log's flood guard: which records are written whole, which are folded, and
// the summaries that stand for the folded ones.
#include "vibepit/decision_log/record_folder.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include <asio/io_context.hpp>

#include "vibepit/decision_log/folding_log.hpp"

namespace vibepit::decision_log {
namespace {

using namespace std::chrono_literals;
using clock = RecordFolder::clock;

policy::IpAddr ip(std::string_view text) {
  return *policy::IpAddr::parse(text);
}

DecisionRecord deny(std::string host, std::uint64_t gen = 3) {
  DecisionRecord r;
  r.host = std::move(host);
  r.gen = gen;
  return r;
}

struct Folding : ::testing::Test {
  std::vector<DecisionRecord> summaries;
  RecordFolder folder{3, [this](DecisionRecord&& r) { summaries.push_back(std::move(r)); }};
  clock::time_point t0 = clock::now();
};

TEST_F(Folding, TheFirstRecordsOfAnIntervalAreWholeTheRestCounted) {
  const auto a = ip("203.0.113.1"), b = ip("2001:db8::1");
  int whole_a = 0, whole_b = 0;
  for (int i = 0; i < 10; ++i) {
    auto r = deny("a" + std::to_string(i));
    whole_a += folder.admit(r, a, t0 + 1ms * i);
  }
  for (int i = 0; i < 2; ++i) {
    auto r = deny("b");
    whole_b += folder.admit(r, b, t0 + 20ms);
  }
  EXPECT_EQ(whole_a, 3);
  EXPECT_EQ(whole_b, 2);
  EXPECT_TRUE(folder.pending());
  EXPECT_EQ(folder.due(), t0 + RecordFolder::kInterval);
  folder.flush(t0 + 999ms);  // the interval is not over
  EXPECT_TRUE(summaries.empty());
  folder.flush(t0 + 1s);
  ASSERT_EQ(summaries.size(), 1u);     // b folded nothing
  EXPECT_EQ(summaries[0].host, "a3");  // the first folded record
  EXPECT_EQ(summaries[0].count, 7u);
  EXPECT_EQ(summaries[0].interval_ms, 1000u);
  EXPECT_EQ(summaries[0].gen, 3u);
  EXPECT_FALSE(folder.pending());
  // A new interval: the budget is whole again.
  auto r = deny("again");
  EXPECT_TRUE(folder.admit(r, a, t0 + 1s + 1ms));
}

TEST_F(Folding, OverLimitRecordsAreFoldedWhateverTheBudget) {
  const auto a = ip("203.0.113.1");
  for (int i = 0; i < 5; ++i) {
    auto r = deny("q");
    folder.fold(r, a, t0);
  }
  auto r = deny("whole");
  EXPECT_TRUE(folder.admit(r, a, t0));  // folding did not use the budget
  folder.flush(t0, true);
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].count, 5u);
}

TEST_F(Folding, AnIntervalThatEndedIsSummarisedBeforeTheNextRecord) {
  const auto a = ip("203.0.113.1");
  for (int i = 0; i < 4; ++i) {
    auto r = deny("q");
    folder.admit(r, a, t0);
  }
  auto later = deny("later");
  EXPECT_TRUE(folder.admit(later, a, t0 + 5s));
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].count, 1u);
}

TEST_F(Folding, PastTheClientLimitNewClientsShareOneEntry) {
  auto r = deny("first");
  folder.admit(r, ip("198.51.100.1"), t0);  // starts the interval
  for (std::size_t i = 0; i < RecordFolder::kMaxClients + 100; ++i) {
    policy::IpAddr c = ip("10.0.0.0");
    c.bytes[1] = static_cast<std::uint8_t>(i >> 16);
    c.bytes[2] = static_cast<std::uint8_t>(i >> 8);
    c.bytes[3] = static_cast<std::uint8_t>(i);
    for (int k = 0; k < 5; ++k) {
      auto d = deny("flood");
      folder.admit(d, c, t0);
    }
  }
  folder.flush(t0, true);
  std::uint64_t folded = 0;
  for (const auto& s : summaries) folded += s.count;
  // Every client tracked alone folds 2 of its 5; the shared entry folds all but 3.
  const std::uint64_t alone = RecordFolder::kMaxClients - 1;
  const std::uint64_t shared = (RecordFolder::kMaxClients + 100 - alone) * 5 - 3;
  EXPECT_EQ(folded, alone * 2 + shared);
  EXPECT_EQ(summaries.size(), alone + 1);
}

TEST(RecordFolderOff, ZeroPerClientWritesEveryDenialWhole) {
  int emitted = 0;
  RecordFolder folder(0, [&](DecisionRecord&&) { ++emitted; });
  for (int i = 0; i < 1000; ++i) {
    auto r = deny("q");
    EXPECT_TRUE(folder.admit(r, ip("203.0.113.1"), clock::now()));
  }
  EXPECT_FALSE(folder.pending());
  EXPECT_EQ(emitted, 0);
}

// The folder as an I/O thread uses it: a timer on the thread's loop writes the summaries.
struct FoldingLogTest : ::testing::Test {
  FoldingLogTest() {
    log.set_observer([this](const DecisionRecord& r) {
      std::lock_guard lock(mu);
      written.push_back(r);
    });
    log.start();
  }
  std::vector<DecisionRecord> stop() {
    log.stop();  // writes what was pushed
    std::lock_guard lock(mu);
    return written;
  }
  static DecisionRecord make(policy::Verdict v, std::string host, bool close = false) {
    DecisionRecord r = deny(std::move(host));
    r.verdict = v;
    r.close = close;
    return r;
  }

  asio::io_context io;
  DecisionLog log{"", 1024};
  DecisionLog::Producer& producer = log.make_producer();
  std::mutex mu;
  std::vector<DecisionRecord> written;
};

TEST_F(FoldingLogTest, TheLoopWritesTheSummaryWhenTheIntervalEnds) {
  FoldingLog fl(io, producer, 2);
  const auto a = ip("203.0.113.1");
  const auto t = clock::now();
  fl.write(make(policy::Verdict::allow, "ok1"), a, t);
  for (int i = 0; i < 5; ++i) fl.write(make(policy::Verdict::deny, "d" + std::to_string(i)), a, t);
  fl.write(make(policy::Verdict::deny, "closed", true), a, t);  // a close record: never folded
  fl.write(make(policy::Verdict::allow, "ok2"), a, t);
  for (int i = 0; i < 3; ++i) fl.fold(make(policy::Verdict::deny, "over"), a, t);
  // The timer writes the summary when the interval ends; then the loop has nothing left.
  io.run_for(3s);
  EXPECT_TRUE(io.stopped());
  const auto got = stop();
  std::vector<std::string> hosts;
  std::uint64_t summaries = 0, counted = 0;
  for (const auto& r : got) {
    hosts.push_back(r.host);
    if (r.count > 0) {
      ++summaries;
      counted += r.count;
      EXPECT_EQ(r.interval_ms, 1000u);
    }
  }
  EXPECT_EQ(hosts, (std::vector<std::string>{"ok1", "d0", "d1", "closed", "ok2", "d2"}));
  EXPECT_EQ(summaries, 1u);
  EXPECT_EQ(counted, 6u);  // d2, d3, d4 past the budget and three over-limit queries
}

TEST_F(FoldingLogTest, FlushWritesAtOnceAndLeavesNoTimer) {
  FoldingLog fl(io, producer, 0);  // no budget: only over-limit traffic is folded
  const auto a = ip("2001:db8::7");
  fl.write(make(policy::Verdict::deny, "whole"), a, clock::now());
  fl.fold(make(policy::Verdict::deny, "over"), a, clock::now());
  fl.flush();
  io.poll();  // the cancelled wait completes, and no timer is left to wait for
  EXPECT_TRUE(io.stopped());
  const auto got = stop();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].host, "whole");
  EXPECT_EQ(got[0].count, 0u);
  EXPECT_EQ(got[1].host, "over");
  EXPECT_EQ(got[1].count, 1u);
}

}  // namespace
}  // namespace vibepit::decision_log
