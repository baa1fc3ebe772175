// The decision log's flood guard: which records are written whole, which are folded, and
// the summaries that stand for the folded ones.
#include "vibepit/runtime/record_folder.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace vibepit::runtime {
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

}  // namespace
}  // namespace vibepit::runtime
