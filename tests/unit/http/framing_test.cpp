// Message framing and the request-smuggling checks: one row per case.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/http/body.hpp"

namespace vibepit::http {
namespace {

struct FramingCase {
  std::string head;  // fields only; the start line is added by the test
  bool ok;
  BodyKind kind;
  std::uint64_t length;
  std::string error;
};

constexpr auto kNone = BodyKind::none;
constexpr auto kLen = BodyKind::length;
constexpr auto kChunked = BodyKind::chunked;
constexpr auto kClose = BodyKind::until_close;

const char* const kBoth = "both Content-Length and Transfer-Encoding";
const char* const kConflict = "conflicting Content-Length";
const char* const kBadLength = "invalid Content-Length";
const char* const kUnsupported = "unsupported transfer-coding";
const char* const kBadTe = "invalid Transfer-Encoding";

void check(const FramingCase& c, const std::variant<Framing, FramingError>& r,
           const std::string& label) {
  if (!c.ok) {
    const auto* e = std::get_if<FramingError>(&r);
    ASSERT_NE(e, nullptr) << label;
    EXPECT_EQ(e->what, c.error) << label;
    return;
  }
  const auto* f = std::get_if<Framing>(&r);
  ASSERT_NE(f, nullptr) << label << ": " << std::get<FramingError>(r).what;
  EXPECT_EQ(f->kind, c.kind) << label;
  if (c.kind == BodyKind::length) {
    EXPECT_EQ(f->length, c.length) << label;
  }
}

TEST(RequestFraming, Table) {
  const FramingCase cases[] = {
      // no body at all
      {"Host: a\r\n", true, kNone, 0, ""},
      // plain length
      {"Content-Length: 5\r\n", true, kLen, 5, ""},
      {"Content-Length: 0\r\n", true, kLen, 0, ""},
      // largest value that fits in 19 digits
      {"Content-Length: 9999999999999999999\r\n", true, kLen, 9999999999999999999ull, ""},
      // 20 digits could overflow
      {"Content-Length: 18446744073709551616\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: 00000000000000000005\r\n", false, kNone, 0, kBadLength},
      // identical duplicates are one value (RFC 9110 8.6)
      {"Content-Length: 5\r\nContent-Length: 5\r\n", true, kLen, 5, ""},
      {"Content-Length: 5, 5\r\n", true, kLen, 5, ""},
      {"Content-Length: 5,5\r\nContent-Length: 5\r\n", true, kLen, 5, ""},
      // differing duplicates: two readers, two bodies
      {"Content-Length: 5\r\nContent-Length: 6\r\n", false, kNone, 0, kConflict},
      {"Content-Length: 5, 6\r\n", false, kNone, 0, kConflict},
      // signs, spaces, hex and empties are not digits
      {"Content-Length: +5\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: -1\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: 5 5\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: 0x5\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: 5a\r\n", false, kNone, 0, kBadLength},
      {"Content-Length:\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: 5,\r\n", false, kNone, 0, kBadLength},
      {"Content-Length: ,5\r\n", false, kNone, 0, kBadLength},
      // chunked
      {"Transfer-Encoding: chunked\r\n", true, kChunked, 0, ""},
      {"Transfer-Encoding: CHUNKED\r\n", true, kChunked, 0, ""},
      // a coding before the final chunked is allowed; the body is forwarded raw
      {"Transfer-Encoding: gzip, chunked\r\n", true, kChunked, 0, ""},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", true, kChunked, 0, ""},
      // empty list elements do not count
      {"Transfer-Encoding: , chunked\r\n", true, kChunked, 0, ""},
      // CL and TE together: the classic CL.TE / TE.CL smuggling
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", false, kNone, 0, kBoth},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", false, kNone, 0, kBoth},
      {"Transfer-Encoding: chunked\r\nContent-Length: x\r\n", false, kNone, 0, kBoth},
      // a request body must end where chunked ends; no close-delimited requests
      {"Transfer-Encoding: gzip\r\n", false, kNone, 0, kUnsupported},
      {"Transfer-Encoding: identity\r\n", false, kNone, 0, kUnsupported},
      {"Transfer-Encoding: chunked, gzip\r\n", false, kNone, 0, kUnsupported},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", false, kNone, 0, kUnsupported},
      // chunked twice would be decoded twice by some, once by others
      {"Transfer-Encoding: chunked, chunked\r\n", false, kNone, 0, kUnsupported},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", false, kNone, 0,
       kUnsupported},
      // lookalikes of chunked
      {"Transfer-Encoding: xchunked\r\n", false, kNone, 0, kUnsupported},
      {"Transfer-Encoding: chunked;q=1\r\n", false, kNone, 0, kBadTe},
      {"Transfer-Encoding: \"chunked\"\r\n", false, kNone, 0, kBadTe},
      {"Transfer-Encoding: chun ked\r\n", false, kNone, 0, kBadTe},
      // an empty Transfer-Encoding is not "no Transfer-Encoding"
      {"Transfer-Encoding:\r\n", false, kNone, 0, kBadTe},
      {"Transfer-Encoding: ,\r\n", false, kNone, 0, kBadTe},
  };
  for (const auto& c : cases) {
    const std::string in = "POST /x HTTP/1.1\r\n" + c.head + "\r\n";
    RequestHead head;
    ASSERT_EQ(parse_request_head(in, 8192, head).state, ParseState::complete) << c.head;
    check(c, request_framing(head), c.head);
  }
}

TEST(RequestFraming, Http10) {
  RequestHead head;
  // Transfer-Encoding did not exist in HTTP/1.0 (RFC 9112 6.1)
  std::string in = "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
  ASSERT_EQ(parse_request_head(in, 8192, head).state, ParseState::complete);
  check({"", false, kNone, 0, "Transfer-Encoding in an HTTP/1.0 request"}, request_framing(head),
        in);
  // Content-Length is fine in HTTP/1.0
  in = "POST /x HTTP/1.0\r\nContent-Length: 3\r\n\r\n";
  ASSERT_EQ(parse_request_head(in, 8192, head).state, ParseState::complete);
  check({"", true, kLen, 3, ""}, request_framing(head), in);
}

TEST(ResponseFraming, Table) {
  struct Row {
    std::string method;
    std::string status_line;
    FramingCase c;
  };
  const Row rows[] = {
      // HEAD responses never have a body, whatever the fields say
      {"HEAD", "HTTP/1.1 200 OK", {"Content-Length: 100\r\n", true, kNone, 0, ""}},
      // 1xx, 204 and 304 have no body
      {"GET", "HTTP/1.1 100 Continue", {"", true, kNone, 0, ""}},
      {"GET", "HTTP/1.1 101 Switching Protocols", {"", true, kNone, 0, ""}},
      {"GET", "HTTP/1.1 204 No Content", {"Content-Length: 5\r\n", true, kNone, 0, ""}},
      {"GET", "HTTP/1.1 304 Not Modified", {"Transfer-Encoding: chunked\r\n", true, kNone, 0, ""}},
      // chunked
      {"GET", "HTTP/1.1 200 OK", {"Transfer-Encoding: chunked\r\n", true, kChunked, 0, ""}},
      {"GET", "HTTP/1.1 200 OK", {"Transfer-Encoding: gzip, chunked\r\n", true, kChunked, 0, ""}},
      // a final coding other than chunked: read until close (RFC 9112 6.3)
      {"GET", "HTTP/1.1 200 OK", {"Transfer-Encoding: gzip\r\n", true, kClose, 0, ""}},
      // chunked that is not last, or twice: refuse
      {"GET",
       "HTTP/1.1 200 OK",
       {"Transfer-Encoding: chunked, gzip\r\n", false, kNone, 0, kUnsupported}},
      {"GET",
       "HTTP/1.1 200 OK",
       {"Transfer-Encoding: chunked, chunked\r\n", false, kNone, 0, kUnsupported}},
      // both: response splitting risk
      {"GET",
       "HTTP/1.1 200 OK",
       {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", false, kNone, 0, kBoth}},
      {"GET", "HTTP/1.1 200 OK", {"Transfer-Encoding:\r\n", false, kNone, 0, kBadTe}},
      // length
      {"GET", "HTTP/1.1 200 OK", {"Content-Length: 42\r\n", true, kLen, 42, ""}},
      {"GET",
       "HTTP/1.1 200 OK",
       {"Content-Length: 4\r\nContent-Length: 2\r\n", false, kNone, 0, kConflict}},
      {"GET", "HTTP/1.1 200 OK", {"Content-Length: -4\r\n", false, kNone, 0, kBadLength}},
      // neither: the body runs until the connection closes
      {"GET", "HTTP/1.1 200 OK", {"", true, kClose, 0, ""}},
      {"GET", "HTTP/1.0 200 OK", {"", true, kClose, 0, ""}},
  };
  for (const auto& row : rows) {
    const std::string in = row.status_line + "\r\n" + row.c.head + "\r\n";
    ResponseHead head;
    ASSERT_EQ(parse_response_head(in, 8192, head).state, ParseState::complete) << in;
    check(row.c, response_framing(head, row.method), in);
  }
}

}  // namespace
}  // namespace vibepit::http
