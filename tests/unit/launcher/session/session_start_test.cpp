// What a session's start-up reads from its settings before Docker is asked anything.
#include <gtest/gtest.h>

#include <stdexcept>

#include "vibepit/launcher/session/session_start.hpp"

using namespace vibepit::launcher;

TEST(RunOptionsTest, Memory) {
  EXPECT_EQ(parse_memory("4g"), 4LL << 30);
  EXPECT_EQ(parse_memory("512m"), 512LL << 20);
  EXPECT_EQ(parse_memory("1.5G"), 3LL << 29);
  EXPECT_EQ(parse_memory("67108864"), 64LL << 20);
  EXPECT_THROW(parse_memory("1m"), std::invalid_argument);  // below Docker's floor
  EXPECT_THROW(parse_memory("4x"), std::invalid_argument);
  EXPECT_THROW(parse_memory("lots"), std::invalid_argument);
}
