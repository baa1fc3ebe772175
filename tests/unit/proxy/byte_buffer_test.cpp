#include "vibepit/proxy/byte_buffer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace vibepit::proxy {
namespace {

void put(ByteBuffer& b, std::string_view s, std::size_t room) {
  auto m = b.prepare(room);
  ASSERT_GE(m.size(), s.size());
  std::memcpy(m.data(), s.data(), s.size());
  b.commit(s.size());
}

TEST(ByteBuffer, ReadsAppendAndConsumeTakesFromTheFront) {
  ByteBuffer b;
  EXPECT_TRUE(b.empty());
  put(b, "GET / HTTP/1.1\r\n", 4096);
  put(b, "Host: a\r\n\r\nrest", 4096);
  EXPECT_EQ(b.view(), "GET / HTTP/1.1\r\nHost: a\r\n\r\nrest");
  b.consume(27);
  EXPECT_EQ(b.view(), "rest");
  b.consume(100);  // more than there is: empties it
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.view(), "");
}

// The consumed front is reclaimed by sliding the rest down when that makes room; the
// buffer grows only when the unconsumed bytes and the read do not fit.
TEST(ByteBuffer, ReclaimsTheFrontBeforeGrowing) {
  ByteBuffer b;
  put(b, std::string(3000, 'a'), 4096);
  EXPECT_EQ(b.capacity(), 4096u);
  b.consume(2990);
  put(b, "0123456789", 4000);  // 10 + 4000 fit in 4096 once slid
  EXPECT_EQ(b.capacity(), 4096u);
  EXPECT_EQ(b.view(), "aaaaaaaaaa0123456789");
  put(b, std::string(5000, 'z'), 5000);  // 20 + 5000 do not: grows, keeps the bytes
  EXPECT_GE(b.capacity(), 5020u);
  EXPECT_EQ(b.view().substr(0, 20), "aaaaaaaaaa0123456789");
  EXPECT_EQ(b.view().substr(20), std::string(5000, 'z'));
}

TEST(ByteBuffer, ReleaseFreesOnlyAnEmptyBuffer) {
  ByteBuffer b;
  b.append("early");
  b.release();
  EXPECT_EQ(b.view(), "early");  // bytes waiting: kept
  b.clear();
  b.release();
  EXPECT_EQ(b.capacity(), 0u);
  b.append("again");
  EXPECT_EQ(b.view(), "again");
}

}  // namespace
}  // namespace vibepit::proxy
