// The token bucket shared by the DNS per-client limit and the control API's limit.
#include "vibepit/runtime/token_bucket.hpp"

#include <gtest/gtest.h>

namespace vibepit::runtime {
namespace {

using std::chrono::milliseconds;

TEST(TokenBucket, StartsFullAdmitsTheBurstThenRefillsAtTheRate) {
  const auto t0 = TokenBucket::clock::now();
  TokenBucket b(3, t0);
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += b.take(10, 3, t0);
  EXPECT_EQ(admitted, 3);  // the burst, then nothing without time passing
  EXPECT_FALSE(b.take(10, 3, t0 + milliseconds(50)));  // half a token
  EXPECT_TRUE(b.take(10, 3, t0 + milliseconds(100)));  // 10/s: one token per 100 ms
  EXPECT_FALSE(b.take(10, 3, t0 + milliseconds(100)));
  // A long quiet spell refills to the burst, never beyond it.
  admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += b.take(10, 3, t0 + std::chrono::hours(1));
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(b.last(), t0 + std::chrono::hours(1));
}

}  // namespace
}  // namespace vibepit::runtime
