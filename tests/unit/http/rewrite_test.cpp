// Head rewrites for the next hop, and keep-alive: one row per case.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/http/body.hpp"

namespace vibepit::http {
namespace {

// The head's views point into `in`, which must outlive it.
RequestHead parse_req(const std::string& in) {
  RequestHead head;
  EXPECT_EQ(parse_request_head(in, 8192, head).state, ParseState::complete) << in;
  return head;
}
RequestHead parse_req(std::string&&) = delete;

struct RewriteCase {
  std::string fields;    // the client's fields
  std::string expected;  // the fields sent upstream, after the request line and Host
};

TEST(RewriteRequest, Table) {
  const RewriteCase cases[] = {
      // ordinary fields pass through in order, OWS normalised
      {"Accept: */*\r\nUser-Agent:  curl \r\n", "Accept: */*\r\nUser-Agent: curl\r\n"},
      // Host is replaced, wherever and however often it appears
      {"Host: evil.example\r\nA: 1\r\nhost: other\r\n", "A: 1\r\n"},
      // fixed hop-by-hop fields
      {"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nKeep-Alive: 5\r\n"
       "TE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nA: 1\r\n",
       "A: 1\r\n"},
      // names listed in Connection are hop-by-hop too, case-insensitively
      {"Connection: close, X-Hop\r\nx-hop: 1\r\nX-Keep: 2\r\n", "X-Keep: 2\r\n"},
      // lists across several Connection fields
      {"Connection: a\r\nConnection: b , c\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n", "D: 4\r\n"},
      // framing fields stay even when listed: the body is forwarded raw
      {"Connection: Content-Length, Transfer-Encoding\r\nContent-Length: 3\r\n",
       "Content-Length: 3\r\n"},
      {"Transfer-Encoding: chunked\r\n", "Transfer-Encoding: chunked\r\n"},
      // a valid Content-Length goes on once, in canonical form, where the first one was
      {"A: 1\r\nContent-Length: 005\r\nB: 2\r\n", "A: 1\r\nContent-Length: 5\r\nB: 2\r\n"},
      {"Content-Length: 5, 5\r\n", "Content-Length: 5\r\n"},
      {"content-length: 5\r\nA: 1\r\nContent-Length: 05\r\n", "Content-Length: 5\r\nA: 1\r\n"},
      {"Content-Length: 0\r\n", "Content-Length: 0\r\n"},
      // Expect stays unless the proxy answers it (RewriteRequest.ExpectDroppedInAnyCase)
      {"Expect: 100-continue\r\n", "Expect: 100-continue\r\n"},
      // no fields at all
      {"", ""},
  };
  for (const auto& c : cases) {
    const std::string in = "POST http://a.example/x?y HTTP/1.0\r\n" + c.fields + "\r\n";
    const RequestHead head = parse_req(in);
    const std::string out = rewrite_request_head(head, "/x?y", "a.example");
    EXPECT_EQ(out, "POST /x?y HTTP/1.1\r\nHost: a.example\r\n" + c.expected + "\r\n") << c.fields;
    // the result is itself a valid head
    RequestHead again;
    EXPECT_EQ(parse_request_head(out, 8192, again).state, ParseState::complete);
    EXPECT_EQ(again.head_size, out.size());
  }
}

TEST(RewriteRequest, ExpectDroppedInAnyCase) {
  for (const char* name : {"Expect", "expect", "EXPECT", "eXpEcT"}) {
    const std::string in = std::string("POST http://a/ HTTP/1.1\r\nHost: a\r\n") + name +
                           ": 100-continue\r\nContent-Length: 1\r\n\r\n";
    const RequestHead head = parse_req(in);
    EXPECT_EQ(rewrite_request_head(head, "/", "a", true),
              "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n")
        << name;
  }
}

TEST(RewriteRequest, BareLfBecomesCrlf) {
  const std::string in = "GET http://a/ HTTP/1.1\nHost: a\nX: y\n\n";
  const RequestHead head = parse_req(in);
  EXPECT_EQ(rewrite_request_head(head, "/", "a:8080"),
            "GET / HTTP/1.1\r\nHost: a:8080\r\nX: y\r\n\r\n");
}

// The proxy's form writes the Host field from the parsed authority, into a buffer that
// already holds bytes (a kept buffer is cleared, but appending must not assume it).
TEST(RewriteRequest, AppendedFormWritesHostFromTheAuthority) {
  const std::string in =
      "GET http://a/ HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x\r\nX: y\r\nx: 1\r\nZ: "
      "2\r\n\r\n";
  const RequestHead head = parse_req(in);
  struct Row {
    std::string host;
    std::uint16_t port;
    std::string field;
  };
  const Row rows[] = {
      {"a.example", 80, "a.example"},       {"a.example", 8080, "a.example:8080"},
      {"203.0.113.7", 80, "203.0.113.7"},   {"203.0.113.7", 65535, "203.0.113.7:65535"},
      {"2001:db8::1", 80, "[2001:db8::1]"}, {"2001:db8::1", 8, "[2001:db8::1]:8"},
  };
  for (const auto& r : rows) {
    Authority auth;
    auth.host = r.host;
    auth.port = r.port;
    std::string out = "kept";
    append_request_head(out, head, "/p", auth);
    EXPECT_EQ(out, "keptGET /p HTTP/1.1\r\nHost: " + r.field + "\r\nZ: 2\r\n\r\n") << r.field;
    EXPECT_EQ(out.substr(4), rewrite_request_head(head, "/p", r.field)) << r.field;
  }
  Authority auth;
  auth.host = "a";
  auth.port = 80;
  const std::string put = "PUT http://a/ HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n";
  const RequestHead with_expect = parse_req(put);
  std::string out;
  append_request_head(out, with_expect, "/", auth, true);
  EXPECT_EQ(out, "PUT / HTTP/1.1\r\nHost: a\r\n\r\n");
}

TEST(RewriteResponse, AppendedFormAddsTheExtraFieldsLast) {
  ResponseHead head;
  ASSERT_EQ(parse_response_head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 007\r\n"
                                "Server: s\r\n\r\n",
                                8192, head)
                .state,
            ParseState::complete);
  std::string out = "x";
  append_response_head(out, head, "Connection: keep-alive\r\n");
  EXPECT_EQ(out,
            "xHTTP/1.1 200 OK\r\nContent-Length: 7\r\nServer: s\r\nConnection: keep-alive\r\n\r\n");
  std::string plain;
  append_response_head(plain, head);
  EXPECT_EQ(plain, rewrite_response_head(head));
}

TEST(RewriteResponse, Table) {
  const RewriteCase cases[] = {
      // framing fields stay; Connection and what it lists go
      {"Connection: keep-alive, X-A\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\nServer: s\r\n",
       "Transfer-Encoding: chunked\r\nServer: s\r\n"},
      {"Keep-Alive: timeout=5\r\nProxy-Connection: x\r\nTrailer: T\r\nUpgrade: y\r\n"
       "Proxy-Authenticate: Basic\r\nContent-Length: 2\r\n",
       "Content-Length: 2\r\n"},
      {"Content-Length: 0002, 2\r\nContent-Length: 2\r\n", "Content-Length: 2\r\n"},
      {"", ""},
  };
  for (const auto& c : cases) {
    const std::string in = "HTTP/1.0 404 Not Found\r\n" + c.fields + "\r\n";
    ResponseHead head;
    ASSERT_EQ(parse_response_head(in, 8192, head).state, ParseState::complete);
    EXPECT_EQ(rewrite_response_head(head), "HTTP/1.1 404 Not Found\r\n" + c.expected + "\r\n")
        << c.fields;
  }
  ResponseHead head;
  ASSERT_EQ(parse_response_head("HTTP/1.1 204\r\n\r\n", 100, head).state, ParseState::complete);
  EXPECT_EQ(rewrite_response_head(head), "HTTP/1.1 204 \r\n\r\n");
}

TEST(KeepAlive, Table) {
  struct Row {
    int minor;
    std::string fields;
    bool keep;
  };
  const Row rows[] = {
      {1, "", true},                                         // 1.1 default is persistent
      {1, "Connection: close\r\n", false},                   // explicit close
      {1, "Connection: Upgrade, CLOSE\r\n", false},          // close anywhere in the list
      {1, "Connection: a\r\nConnection: close\r\n", false},  // in a later field
      {1, "Connection: closed\r\n", true},                   // a different token
      {0, "", false},                                        // 1.0 default closes
      {0, "Connection: keep-alive\r\n", true},               // 1.0 opt-in
      {0, "Connection: Keep-Alive, close\r\n", false},       // close wins
      {0, "Proxy-Connection: keep-alive\r\n", false},        // only Connection counts
  };
  for (const auto& r : rows) {
    const std::string in = "GET / HTTP/1." + std::to_string(r.minor) + "\r\n" + r.fields + "\r\n";
    const RequestHead head = parse_req(in);
    EXPECT_EQ(wants_keep_alive(head.version_minor, head.headers), r.keep) << r.fields;
  }
}

}  // namespace
}  // namespace vibepit::http
