// Request and response heads: one row per case, with the reason in a comment.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/http/head.hpp"

namespace vibepit::http {
namespace {

constexpr std::size_t kMax = 8192;

struct HeadCase {
  std::string input;
  ParseState state;
  HeadError error;
};

std::string describe_case(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else if (c < 0x20 || c >= 0x7f)
      out += "\\x" + std::to_string(c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

constexpr auto C = ParseState::complete;
constexpr auto I = ParseState::incomplete;
constexpr auto E = ParseState::error;
using H = HeadError;

TEST(RequestHead, Table) {
  const std::string nul(1, '\0');
  const HeadCase cases[] = {
      // plain origin-form request
      {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", C, H::none},
      // CONNECT in authority form
      {"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", C, H::none},
      // absolute form, HTTP/1.0, no headers
      {"GET http://a/b?c HTTP/1.0\r\n\r\n", C, H::none},
      // bare LF line endings are accepted
      {"GET / HTTP/1.1\nHost: a\n\n", C, H::none},
      // mixed CRLF and bare LF
      {"GET / HTTP/1.1\r\nHost: a\n\r\n", C, H::none},
      // one empty line before the request line is ignored (RFC 9112 2.2)
      {"\r\nGET / HTTP/1.1\r\n\r\n", C, H::none},
      // up to four empty lines are ignored
      {"\r\n\r\n\n\r\nGET / HTTP/1.1\r\n\r\n", C, H::none},
      // a fifth empty line is refused
      {"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // extension method that is a token
      {"M-SEARCH * HTTP/1.1\r\n\r\n", C, H::none},
      // empty header value
      {"GET / HTTP/1.1\r\nX-Empty:\r\n\r\n", C, H::none},
      // obs-text (UTF-8) in a value is allowed
      {"GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n", C, H::none},
      // HTAB inside a value is allowed
      {"GET / HTTP/1.1\r\nX: a\tb\r\n\r\n", C, H::none},
      // nothing yet
      {"", I, H::none},
      // request line without its end
      {"GET / HTTP/1.1", I, H::none},
      // CR of the final CRLF only
      {"GET / HTTP/1.1\r\nHost: a\r\n\r", I, H::none},
      // two spaces between method and target
      {"GET  / HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // tab as a separator
      {"GET\t/ HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // missing version
      {"GET /\r\n\r\n", E, H::bad_request_line},
      // HTTP/0.9 style request line
      {"GET\r\n\r\n", E, H::bad_request_line},
      // method with a separator
      {"GE(T / HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // empty method
      {" / HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // NUL in the target
      {"GET /" + nul + " HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // DEL in the target
      {"GET /\x7f HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // non-ASCII in the target
      {"GET /\xc3\xa9 HTTP/1.1\r\n\r\n", E, H::bad_request_line},
      // trailing space after the version
      {"GET / HTTP/1.1 \r\n\r\n", E, H::bad_request_line},
      // bare CR inside the request line
      {"GET / HTTP/1.1\rX\r\n\r\n", E, H::bad_request_line},
      // HTTP/2 over a 1.x parser
      {"GET / HTTP/2\r\n\r\n", E, H::bad_version},
      // HTTP/1.2 does not exist
      {"GET / HTTP/1.2\r\n\r\n", E, H::bad_version},
      // HTTP/2.0
      {"GET / HTTP/2.0\r\n\r\n", E, H::bad_version},
      // HTTP-name is case-sensitive
      {"GET / http/1.1\r\n\r\n", E, H::bad_request_line},
      // garbage version
      {"GET / FOO\r\n\r\n", E, H::bad_request_line},
      // space before the colon (RFC 9112 5.1: must be rejected)
      {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", E, H::bad_header},
      // tab before the colon
      {"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", E, H::bad_header},
      // no colon at all
      {"GET / HTTP/1.1\r\nHost\r\n\r\n", E, H::bad_header},
      // empty field name
      {"GET / HTTP/1.1\r\n: a\r\n\r\n", E, H::bad_header},
      // separator in the field name
      {"GET / HTTP/1.1\r\nX(y): a\r\n\r\n", E, H::bad_header},
      // obs-fold continuation line
      {"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", E, H::obs_fold},
      // obs-fold with a tab
      {"GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", E, H::obs_fold},
      // whitespace line right after the request line
      {"GET / HTTP/1.1\r\n Host: a\r\n\r\n", E, H::obs_fold},
      // NUL in a value
      {"GET / HTTP/1.1\r\nX: a" + nul + "b\r\n\r\n", E, H::bad_header_bytes},
      // NUL in a name
      {"GET / HTTP/1.1\r\nX" + nul + ": a\r\n\r\n", E, H::bad_header_bytes},
      // CTL (0x01) in a value
      {"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", E, H::bad_header_bytes},
      // DEL in a value
      {"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", E, H::bad_header_bytes},
      // bare CR in a value (response splitting)
      {"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", E, H::bad_header_bytes},
      // bare CR at the end of a value before a bare LF
      {"GET / HTTP/1.1\r\nX: a\r\r\n\r\n", E, H::bad_header_bytes},
      // bare CR in a name
      {"GET / HTTP/1.1\r\nX\r: a\r\n\r\n", E, H::bad_header_bytes},
      // a lone CR where the empty line should be
      {"GET / HTTP/1.1\r\nX: a\r\n\r\r\n", E, H::bad_header_bytes},
  };
  for (const auto& c : cases) {
    RequestHead head;
    const ParseResult r = parse_request_head(c.input, kMax, head);
    EXPECT_EQ(r.state, c.state) << describe_case(c.input);
    EXPECT_EQ(r.error, c.error) << describe_case(c.input);
    if (r.state == ParseState::complete) {
      EXPECT_LE(head.head_size, c.input.size());
    }
  }
}

TEST(RequestHead, Fields) {
  const std::string in =
      "\r\nGET http://example.com/x HTTP/1.0\r\nHost:  example.com \r\nX-A:\tb c\t\r\n"
      "x-a: second\r\n\r\nBODY";
  RequestHead head;
  const ParseResult r = parse_request_head(in, kMax, head);
  ASSERT_EQ(r.state, ParseState::complete);
  EXPECT_EQ(head.method, "GET");
  EXPECT_EQ(head.target, "http://example.com/x");
  EXPECT_EQ(head.version_minor, 0);
  ASSERT_EQ(head.headers.size(), 3u);
  EXPECT_EQ(head.headers[0].name, "Host");
  EXPECT_EQ(head.headers[0].value, "example.com");  // OWS trimmed on both sides
  EXPECT_EQ(head.headers[1].value, "b c");
  EXPECT_EQ(head.find("X-A"), "b c");  // first match, case-insensitive
  EXPECT_EQ(head.find("HOST"), "example.com");
  EXPECT_EQ(head.find("missing"), std::nullopt);
  EXPECT_EQ(head.head_size, in.size() - 4);  // BODY is not part of the head
}

// Every proper prefix of a request is incomplete; the whole is complete.
TEST(RequestHead, EverySplitPoint) {
  const std::string in =
      "POST http://example.com/upload?x=1 HTTP/1.1\r\nHost: example.com\r\n"
      "Content-Length: 5\r\nUser-Agent: t\r\n\r\n";
  for (std::size_t n = 0; n < in.size(); ++n) {
    RequestHead head;
    const ParseResult r = parse_request_head(std::string_view(in).substr(0, n), kMax, head);
    EXPECT_EQ(r.state, ParseState::incomplete) << "prefix " << n;
  }
  RequestHead head;
  EXPECT_EQ(parse_request_head(in + "hello", kMax, head).state, ParseState::complete);
  EXPECT_EQ(head.head_size, in.size());
}

// An empty view may carry a null pointer (a buffer that has no storage yet): the parsers
// must not hand it to memchr (UBSan reports that as undefined behaviour).
TEST(RequestHead, AnEmptyViewWithNoStorageIsIncomplete) {
  RequestHead head;
  EXPECT_EQ(parse_request_head(std::string_view(), kMax, head).state, ParseState::incomplete);
  ResponseHead rh;
  EXPECT_EQ(parse_response_head(std::string_view(), kMax, rh).state, ParseState::incomplete);
}

TEST(RequestHead, TooLargeBoundary) {
  const std::string in = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  RequestHead head;
  // the head exactly fills the limit: fine
  EXPECT_EQ(parse_request_head(in, in.size(), head).state, ParseState::complete);
  // one byte short: the end lies beyond the limit
  EXPECT_EQ(parse_request_head(in, in.size() - 1, head).error, HeadError::too_large);
  // a partial head that already reaches the limit can never complete
  const std::string partial = in.substr(0, 10);
  EXPECT_EQ(parse_request_head(partial, 10, head).error, HeadError::too_large);
  // below the limit it is only incomplete
  EXPECT_EQ(parse_request_head(partial, 11, head).state, ParseState::incomplete);
  // bytes past the limit do not matter when the head ends before it
  EXPECT_EQ(parse_request_head(in + std::string(100, 'x'), in.size(), head).state,
            ParseState::complete);
  // a zero limit refuses everything
  EXPECT_EQ(parse_request_head("", 0, head).error, HeadError::too_large);
}

TEST(RequestHead, HeaderCountLimit) {
  std::string in = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 100; ++i) in += "X-" + std::to_string(i) + ": v\r\n";
  RequestHead head;
  EXPECT_EQ(parse_request_head(in + "\r\n", 1 << 20, head).state, ParseState::complete);
  EXPECT_EQ(head.headers.size(), 100u);
  in += "X-last: v\r\n\r\n";
  const ParseResult r = parse_request_head(in, 1 << 20, head);
  EXPECT_EQ(r.state, ParseState::error);
  EXPECT_EQ(r.error, HeadError::too_large);
}

TEST(ResponseHead, Table) {
  const HeadCase cases[] = {
      // ordinary response
      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", C, H::none},
      // HTTP/1.0 response, reason with spaces
      {"HTTP/1.0 404 Not Found\r\n\r\n", C, H::none},
      // empty reason with its SP
      {"HTTP/1.1 204 \r\n\r\n", C, H::none},
      // empty reason without the SP: common, harmless
      {"HTTP/1.1 204\r\n\r\n", C, H::none},
      // bare LF
      {"HTTP/1.1 200 OK\nA: b\n\n", C, H::none},
      // obs-text in the reason
      {"HTTP/1.1 200 \xc3\x93K\r\n\r\n", C, H::none},
      // incomplete
      {"HTTP/1.1 200 OK\r\n", I, H::none},
      // HTTP/2 status line
      {"HTTP/2 200 OK\r\n\r\n", E, H::bad_version},
      // not a status line at all
      {"HTTP/1.1 OK\r\n\r\n", E, H::bad_status_line},
      // two-digit status
      {"HTTP/1.1 20 OK\r\n\r\n", E, H::bad_status_line},
      // four-digit status
      {"HTTP/1.1 2000 OK\r\n\r\n", E, H::bad_status_line},
      // status below 100
      {"HTTP/1.1 099 OK\r\n\r\n", E, H::bad_status_line},
      // status above 599
      {"HTTP/1.1 600 OK\r\n\r\n", E, H::bad_status_line},
      // leading empty lines are not skipped for responses
      {"\r\nHTTP/1.1 200 OK\r\n\r\n", E, H::bad_status_line},
      // CTL in the reason
      {"HTTP/1.1 200 O\x01K\r\n\r\n", E, H::bad_status_line},
      // bare CR in the reason
      {"HTTP/1.1 200 O\rK\r\n\r\n", E, H::bad_status_line},
      // garbage
      {"hello\r\n\r\n", E, H::bad_status_line},
      // field errors are shared with requests
      {"HTTP/1.1 200 OK\r\nA : b\r\n\r\n", E, H::bad_header},
      {"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n", E, H::obs_fold},
      {"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", E, H::bad_header_bytes},
  };
  for (const auto& c : cases) {
    ResponseHead head;
    const ParseResult r = parse_response_head(c.input, kMax, head);
    EXPECT_EQ(r.state, c.state) << describe_case(c.input);
    EXPECT_EQ(r.error, c.error) << describe_case(c.input);
  }
}

TEST(ResponseHead, Fields) {
  const std::string in = "HTTP/1.0 301 Moved Permanently\r\nLocation: /x\r\n\r\n";
  ResponseHead head;
  ASSERT_EQ(parse_response_head(in, kMax, head).state, ParseState::complete);
  EXPECT_EQ(head.version_minor, 0);
  EXPECT_EQ(head.status, 301);
  EXPECT_EQ(head.reason, "Moved Permanently");
  EXPECT_EQ(head.find("location"), "/x");
  EXPECT_EQ(head.head_size, in.size());
  EXPECT_EQ(parse_response_head(in, in.size() - 1, head).error, HeadError::too_large);
}

TEST(HeadError, DescribeIsShortAndDistinct) {
  const HeadError all[] = {H::none,       H::too_large, H::bad_request_line, H::bad_version,
                           H::bad_header, H::obs_fold,  H::bad_header_bytes, H::bad_status_line};
  for (HeadError a : all) {
    EXPECT_FALSE(describe(a).empty());
    EXPECT_LT(describe(a).size(), 40u);
    for (HeadError b : all) {
      if (a != b) {
        EXPECT_NE(describe(a), describe(b));
      }
    }
  }
}

TEST(CharClasses, TcharAndFieldBytes) {
  EXPECT_TRUE(is_tchar('a'));
  EXPECT_TRUE(is_tchar('~'));
  EXPECT_FALSE(is_tchar(':'));
  EXPECT_FALSE(is_tchar(' '));
  EXPECT_FALSE(is_tchar(0x80));
  EXPECT_TRUE(is_field_byte('\t'));
  EXPECT_TRUE(is_field_byte(0x80));
  EXPECT_FALSE(is_field_byte('\r'));
  EXPECT_FALSE(is_field_byte(0x7f));
  EXPECT_TRUE(iequals("Content-Length", "content-LENGTH"));
  EXPECT_FALSE(iequals("a", "ab"));
}

}  // namespace
}  // namespace vibepit::http

namespace vibepit::http {
namespace {

// One table serves the proxy's own responses and the control API's.
TEST(ReasonPhrase, EveryStatusVibepitWrites) {
  const std::pair<int, std::string_view> rows[] = {
      {200, "OK"},
      {400, "Bad Request"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {408, "Request Timeout"},
      {411, "Length Required"},
      {413, "Content Too Large"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {501, "Not Implemented"},
      {502, "Bad Gateway"},
      {503, "Service Unavailable"},
      {504, "Gateway Timeout"},
      {418, "Error"},  // anything else
  };
  for (const auto& [status, phrase] : rows) EXPECT_EQ(reason_phrase(status), phrase) << status;
}

}  // namespace
}  // namespace vibepit::http
