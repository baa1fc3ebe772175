// The forwarder's deadline queue: first in, first out, through growth and wrap-around.
#include <gtest/gtest.h>

#include "ring_queue.hpp"

namespace vibepit::dns {
namespace {

TEST(RingQueue, KeepsTheOrderThroughGrowthAndWrapAround) {
  RingQueue<int> q;
  EXPECT_TRUE(q.empty());
  int next_in = 0, next_out = 0;
  // Three pushes for every two pops, so that the front wraps past the buffer's end while
  // it grows (16, 32, 64, ...).
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i) q.push_back(next_in++);
    for (int i = 0; i < 2; ++i) {
      ASSERT_FALSE(q.empty());
      EXPECT_EQ(q.front(), next_out++);
      q.pop_front();
    }
  }
  EXPECT_EQ(q.size(), 200u);
  while (!q.empty()) {
    EXPECT_EQ(q.front(), next_out++);
    q.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
}

}  // namespace
}  // namespace vibepit::dns
