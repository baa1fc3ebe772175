#include "vibepit/decision_log/line_ring.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <string>

namespace vibepit::decision_log {
namespace {

std::string text(std::uint64_t seq, std::size_t size) {
  std::string s = std::to_string(seq) + ":";
  while (s.size() < size) s.push_back(static_cast<char>('a' + (seq + s.size()) % 26));
  s.resize(size);
  return s;
}

// Compares every line the ring holds with a plain model of it.
void expect_same(const LineRing& ring,
                 const std::deque<std::pair<std::uint64_t, std::string>>& model) {
  ASSERT_EQ(ring.size(), model.size());
  if (model.empty()) return;
  EXPECT_EQ(ring.first_seq(), model.front().first);
  EXPECT_EQ(ring.last_seq(), model.back().first);
  for (std::size_t i = 0; i < model.size(); ++i) EXPECT_EQ(ring.line(i), model[i].second) << i;
}

TEST(LineRing, KeepsTheNewestLinesUpToTheLineLimit) {
  LineRing ring(3, 1 << 20);
  for (std::uint64_t seq = 1; seq <= 5; ++seq) ring.push(seq, text(seq, 10));
  ASSERT_EQ(ring.size(), 3u);
  EXPECT_EQ(ring.first_seq(), 3u);
  EXPECT_EQ(ring.line(0), text(3, 10));
  EXPECT_EQ(ring.line(2), text(5, 10));
  EXPECT_EQ(ring.bytes(), 30u);
}

TEST(LineRing, KeepsTheNewestLinesUpToTheByteLimit) {
  LineRing ring(1000, 100);
  for (std::uint64_t seq = 1; seq <= 20; ++seq) ring.push(seq, text(seq, 30));
  ASSERT_EQ(ring.size(), 3u);  // a fourth line of 30 bytes would pass 100
  EXPECT_EQ(ring.first_seq(), 18u);
  EXPECT_EQ(ring.line(0), text(18, 30));
  EXPECT_LE(ring.capacity_bytes(), 100u);
}

// Lines of every length, wrapping around the buffer's end and across each growth of it,
// read back exactly as written.
TEST(LineRing, ReadsBackWhatItHoldsThroughWrapsAndGrowth) {
  LineRing ring(500, 200'000);
  std::deque<std::pair<std::uint64_t, std::string>> model;
  std::size_t model_bytes = 0;
  for (std::uint64_t seq = 1; seq <= 20'000; ++seq) {
    const std::size_t size = 1 + (seq * 7919) % 997;
    ring.push(seq, text(seq, size));
    model.emplace_back(seq, text(seq, size));
    model_bytes += size;
    while (model.size() > 500 || model_bytes > 200'000) {
      model_bytes -= model.front().second.size();
      model.pop_front();
    }
    if (seq % 1000 == 0) {
      expect_same(ring, model);
      EXPECT_EQ(ring.bytes(), model_bytes);
    }
  }
  EXPECT_EQ(ring.capacity_bytes(), 200'000u);
}

// Once grown to what the lines need, the buffer stays the same size.
TEST(LineRing, StopsGrowingAtTheSizeItsLinesNeed) {
  LineRing ring(1000, 1000 * 512);
  for (std::uint64_t seq = 1; seq <= 2000; ++seq) ring.push(seq, text(seq, 300));
  const std::size_t cap = ring.capacity_bytes();
  EXPECT_GE(cap, 1000u * 300);
  for (std::uint64_t seq = 2001; seq <= 20'000; ++seq) ring.push(seq, text(seq, 300));
  EXPECT_EQ(ring.capacity_bytes(), cap);
  EXPECT_EQ(ring.size(), 1000u);
}

TEST(LineRing, ALineLongerThanTheBudgetEmptiesTheRingAndIsNotKept) {
  LineRing ring(10, 64);
  ring.push(1, "one");
  ring.push(2, "two");
  ring.push(3, std::string(65, 'x'));
  EXPECT_TRUE(ring.empty());
  ring.push(4, "four");
  ASSERT_EQ(ring.size(), 1u);
  EXPECT_EQ(ring.first_seq(), 4u);
  EXPECT_EQ(ring.line(0), "four");
}

TEST(LineRing, EmptyLinesAreLines) {
  LineRing ring(2, 16);
  ring.push(1, "");
  ring.push(2, "b");
  ring.push(3, "");
  ASSERT_EQ(ring.size(), 2u);
  EXPECT_EQ(ring.line(0), "b");
  EXPECT_EQ(ring.line(1), "");
}

}  // namespace
}  // namespace vibepit::decision_log
