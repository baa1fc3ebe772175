// The chunked-body validator: whole bodies, every split point, and every error.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "vibepit/http/body.hpp"

namespace vibepit::http {
namespace {

using Status = ChunkedDecoder::Status;

struct Outcome {
  Status status;
  std::size_t consumed;
  std::string error;
};

// Feeds `in` in pieces whose sizes come from `next_size`; stops at done or error.
template <typename F>
Outcome feed_split(ChunkedDecoder& d, std::string_view in, F next_size) {
  std::size_t pos = 0;
  while (true) {
    const std::size_t n = std::min(in.size() - pos, next_size());
    const auto step = d.feed(in.substr(pos, n));
    EXPECT_LE(step.consumed, n);
    pos += step.consumed;
    if (step.status != Status::need_more) return {step.status, pos, std::string(d.error())};
    EXPECT_EQ(step.consumed, n);  // need_more takes everything it was given
    if (pos == in.size()) return {Status::need_more, pos, ""};
  }
}

Outcome feed_all(std::string_view in, std::size_t max_line = 4096,
                 std::size_t max_trailers = 16384) {
  ChunkedDecoder d(max_line, max_trailers);
  return feed_split(d, in, [&] { return in.size(); });
}

struct ChunkCase {
  std::string body;
  Status status;
  std::size_t consumed;  // for done: the body length; for error: the offending offset
  std::string error;
};

TEST(ChunkedDecoder, Table) {
  const std::string max16 = "ffffffffffffffff";
  const ChunkCase cases[] = {
      // the empty body
      {"0\r\n\r\n", Status::done, 5, ""},
      // two chunks
      {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", Status::done, 26, ""},
      // upper- and lower-case hex, leading zeros
      {"A\r\n0123456789\r\n00a\r\nabcdefghij\r\n000\r\n\r\n", Status::done, 39, ""},
      // bytes after the body are not consumed
      {"1\r\nx\r\n0\r\n\r\nGET / HTTP/1.1\r\n", Status::done, 11, ""},
      // chunk extensions, with and without values and BWS
      {"1;a=b;c\r\nx\r\n0 ; last\r\n\r\n", Status::done, 24, ""},
      {"1;a=\"q s\"\r\nx\r\n0\r\n\r\n", Status::done, 19, ""},
      // trailers
      {"1\r\nx\r\n0\r\nA: b\r\nC-D:\r\n\r\n", Status::done, 23, ""},
      // incomplete at various points
      {"5\r\nhel", Status::need_more, 6, ""},
      {"5\r\nhello\r\n0\r\n", Status::need_more, 13, ""},
      {"0\r\n\r", Status::need_more, 4, ""},
      // no digits
      {"\r\n", Status::error, 0, "invalid chunk size"},
      {";x\r\n", Status::error, 0, "invalid chunk size"},
      // not hex
      {"g\r\n", Status::error, 0, "invalid chunk size"},
      {"0x5\r\n", Status::error, 1, "invalid chunk size"},
      {"-1\r\n", Status::error, 0, "invalid chunk size"},
      {"+1\r\n", Status::error, 0, "invalid chunk size"},
      // a chunk may hold at most 2^40 bytes (1 TiB): no real body is larger, and the size
      // cannot overflow; leading zeros are bounded only by the line length
      {"10000000000\r\n", Status::need_more, 13, ""},
      {"10000000001\r\n", Status::error, 10, "chunk size larger than 2^40 bytes"},
      {max16 + "\r\n", Status::error, 10, "chunk size larger than 2^40 bytes"},
      {"1" + max16 + "\r\n", Status::error, 10, "chunk size larger than 2^40 bytes"},
      {"00000000000000001\r\n", Status::need_more, 19, ""},
      // whitespace after the size may only lead to an extension
      {"5 \r\nhello\r\n0\r\n\r\n", Status::error, 2, "invalid chunk extension"},
      {"5 x\r\n", Status::error, 2, "invalid chunk extension"},
      // bare LF ends no line in a chunked body: the next hop may not agree
      {"5\nhello\r\n0\r\n\r\n", Status::error, 1, "invalid chunk size"},
      {"5;x\nhello\r\n0\r\n\r\n", Status::error, 3, "invalid byte in chunk extension"},
      {"5\r\r\n", Status::error, 2, "expected LF after chunk size"},
      // CTL in an extension
      {"5;a\x01\r\n", Status::error, 3, "invalid byte in chunk extension"},
      // data longer than its size: no CRLF where it must be
      {"5\r\nhello!\r\n0\r\n\r\n", Status::error, 8, "missing CRLF after chunk data"},
      {"5\r\nhelloX", Status::error, 8, "missing CRLF after chunk data"},
      {"5\r\nhello\n0\r\n\r\n", Status::error, 8, "missing CRLF after chunk data"},
      {"5\r\nhello\rX", Status::error, 9, "missing CRLF after chunk data"},
      // bad trailers
      {"0\r\n trailer: x\r\n\r\n", Status::error, 3, "folded trailer line"},
      {"0\r\nA b: x\r\n\r\n", Status::error, 4, "invalid trailer field"},
      {"0\r\nA\r\n\r\n", Status::error, 4, "invalid trailer field"},
      {"0\r\n:x\r\n\r\n", Status::error, 3, "invalid trailer field"},
      {"0\r\nA: \x01\r\n\r\n", Status::error, 6, "invalid byte in trailer field"},
      {"0\r\nA: b\n\r\n", Status::error, 7, "invalid byte in trailer field"},
      {"0\r\nA: b\rX", Status::error, 8, "expected LF after trailer field"},
      {"0\r\n\rX", Status::error, 4, "expected LF at end of chunked body"},
      {"0\r\n\n", Status::error, 3, "invalid trailer field"},
  };
  for (const auto& c : cases) {
    const Outcome o = feed_all(c.body);
    EXPECT_EQ(o.status, c.status) << c.body;
    EXPECT_EQ(o.consumed, c.consumed) << c.body;
    EXPECT_EQ(o.error, c.error) << c.body;
  }
}

TEST(ChunkedDecoder, LineAndTrailerBounds) {
  // the size line, extension included, is bounded
  const std::string ext(20, 'e');
  EXPECT_EQ(feed_all("1;" + ext + "\r\nx\r\n0\r\n\r\n", 22).status, Status::done);
  const Outcome o = feed_all("1;" + ext + "\r\nx\r\n0\r\n\r\n", 21);
  EXPECT_EQ(o.status, Status::error);
  EXPECT_EQ(o.error, "chunk size line too long");
  // a long trailer line
  const std::string line = "X: " + std::string(30, 'v');
  EXPECT_EQ(feed_all("0\r\n" + line + "\r\n\r\n", 33, 100).status, Status::done);
  EXPECT_EQ(feed_all("0\r\n" + line + "\r\n\r\n", 32, 100).error, "trailer line too long");
  // the whole trailer section, final CRLF included
  const std::string trailers = "A: 1\r\nB: 2\r\n\r\n";
  EXPECT_EQ(feed_all("0\r\n" + trailers, 4096, trailers.size()).status, Status::done);
  EXPECT_EQ(feed_all("0\r\n" + trailers, 4096, trailers.size() - 1).error,
            "trailer section too large");
}

// Any split of the input gives the same result as one feed.
TEST(ChunkedDecoder, EverySplitPointAndRandomSplits) {
  const std::string bodies[] = {
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\nNEXT",
      "1a\r\n" + std::string(26, 'z') + "\r\n0\r\n\r\n",
      "5\r\nhello\r\n6\r\n worldXX",  // error in the middle
  };
  std::mt19937 rng(12345);
  for (const std::string& body : bodies) {
    const Outcome whole = feed_all(body);
    // one byte at a time
    {
      ChunkedDecoder d;
      const Outcome o = feed_split(d, body, [] { return std::size_t{1}; });
      EXPECT_EQ(o.status, whole.status) << body;
      EXPECT_EQ(o.consumed, whole.consumed) << body;
      EXPECT_EQ(o.error, whole.error) << body;
    }
    // two pieces, at every split point
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
      ChunkedDecoder d;
      bool first = true;
      const Outcome o = feed_split(d, body, [&] {
        const std::size_t n = first ? cut : body.size();
        first = false;
        return n;
      });
      EXPECT_EQ(o.status, whole.status) << body << " cut " << cut;
      EXPECT_EQ(o.consumed, whole.consumed) << body << " cut " << cut;
    }
    // random splits
    for (int round = 0; round < 200; ++round) {
      ChunkedDecoder d;
      const Outcome o = feed_split(d, body, [&] { return std::size_t(rng() % 7); });
      EXPECT_EQ(o.status, whole.status) << body;
      EXPECT_EQ(o.consumed, whole.consumed) << body;
    }
  }
}

TEST(ChunkedDecoder, AfterTheEnd) {
  ChunkedDecoder d;
  auto s = d.feed("0\r\n\r\n");
  EXPECT_EQ(s.status, Status::done);
  EXPECT_EQ(s.consumed, 5u);
  // once done, nothing more belongs to the body
  s = d.feed("more");
  EXPECT_EQ(s.status, Status::done);
  EXPECT_EQ(s.consumed, 0u);
  // once failed, it stays failed
  ChunkedDecoder bad;
  EXPECT_EQ(bad.feed("z").status, Status::error);
  s = bad.feed("0\r\n\r\n");
  EXPECT_EQ(s.status, Status::error);
  EXPECT_EQ(s.consumed, 0u);
  EXPECT_EQ(bad.error(), "invalid chunk size");
  // an empty feed changes nothing
  ChunkedDecoder idle;
  s = idle.feed("");
  EXPECT_EQ(s.status, Status::need_more);
  EXPECT_EQ(s.consumed, 0u);
}

TEST(ChunkedDecoder, LargeChunkAcrossFeeds) {
  // a chunk of 2^40 bytes is counted, not buffered
  ChunkedDecoder d;
  EXPECT_EQ(d.feed("10000000000\r\n").status, Status::need_more);
  const std::string block(1 << 16, 'x');
  for (int i = 0; i < 16; ++i) {
    const auto s = d.feed(block);
    EXPECT_EQ(s.status, Status::need_more);
    EXPECT_EQ(s.consumed, block.size());
  }
}

// The payload overload hands out exactly the chunk data, whatever the split.
TEST(ChunkedDecoder, PayloadAcrossSplits) {
  const std::string body = "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\nNEXT";
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    ChunkedDecoder d;
    std::string payload;
    auto a = d.feed(std::string_view(body).substr(0, cut), payload);
    std::size_t consumed = a.consumed;
    if (a.status == Status::need_more) consumed += d.feed(body.substr(cut), payload).consumed;
    EXPECT_EQ(payload, "hello world") << "cut " << cut;
    EXPECT_EQ(consumed, body.size() - 4) << "cut " << cut;
  }
}

}  // namespace
}  // namespace vibepit::http
