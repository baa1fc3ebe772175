// Method and path rules on a real session (session_fixture.hpp): each plain-HTTP request
// to a host:port they name is decided by its method and normalised path, goes upstream
// with that path, and is recorded with it; a tunnel to such a host is refused until TLS is
// inspected.
#include <gtest/gtest.h>

#include "session_fixture.hpp"

namespace vibepit::proxy {
namespace {

using namespace session_fixture;  // NOLINT: the fixture and its helpers

std::string first_line(const std::string& s) {
  return s.substr(0, s.find("\r\n"));
}

// The response to one request on an open connection, with its body.
asio::awaitable<std::string> response(Local& c, std::string& buf) {
  std::string head = co_await read_until(c, buf, "\r\n\r\n");
  const auto length = header(head, "Content-Length");
  if (!length.empty()) head += co_await read_exactly(c, buf, std::stoul(length));
  co_return head;
}

class RequestRuleSession : public SessionTest {
 protected:
  RequestRuleSession() {
    rules({"api.test:80 GET,HEAD /repos/acme/**"});
    names["api.test"] = resolves_to({"198.51.100.20"});
  }
};

TEST_F(RequestRuleSession, AllowedAndRefusedRequestsOnOneKeepAliveConnection) {
  std::string up1, up2, r1, r2, r3, buf, sbuf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c,
                   "GET http://api.test/repos/acme/w/./x/../pulls?state=open HTTP/1.1\r\n"
                   "Host: api.test\r\n\r\n");
    co_await upstream_connected();
    up1 = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    co_await write(servers[0], "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    r1 = co_await response(c, buf);
    co_await write(c, "POST http://api.test/gists HTTP/1.1\r\nHost: api.test\r\n\r\n");
    r2 = co_await response(c, buf);
    co_await write(c, "GET http://api.test/repos/%61cme/w HTTP/1.1\r\nHost: api.test\r\n\r\n");
    up2 = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    co_await write(servers[0], "HTTP/1.1 204 No Content\r\n\r\n");
    r3 = co_await response(c, buf);
  });
  EXPECT_EQ(first_line(up1), "GET /repos/acme/w/pulls?state=open HTTP/1.1");
  EXPECT_EQ(first_line(r1), "HTTP/1.1 200 OK");
  EXPECT_EQ(first_line(r2), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(r2.find("POST /gists is not allowed by its method/path rules"), std::string::npos)
      << r2;
  EXPECT_NE(r2.find("vibepit allow-http 'api.test:80 POST /gists'"), std::string::npos) << r2;
  EXPECT_NE(header(r2, "Proxy-Status").find("error=http_request_denied"), std::string::npos);
  EXPECT_EQ(first_line(up2), "GET /repos/acme/w HTTP/1.1");
  EXPECT_EQ(first_line(r3), "HTTP/1.1 204 No Content");

  auto recs = records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].verdict, Verdict::allow);
  EXPECT_EQ(recs[0].path, "/repos/acme/w/pulls");
  EXPECT_EQ(recs[0].rule, "api.test:80 GET,HEAD /repos/acme/**");
  EXPECT_EQ(recs[1].verdict, Verdict::deny);
  EXPECT_EQ(recs[1].reason, Reason::not_allowlisted);
  EXPECT_EQ(recs[1].method, "POST");
  EXPECT_EQ(recs[1].path, "/gists");
  EXPECT_EQ(recs[1].rule, "");
  EXPECT_EQ(recs[1].status, 403);
  EXPECT_EQ(recs[2].path, "/repos/acme/w");
  EXPECT_NE(decision_log::to_json_line(recs[0]).find("\"path\":\"/repos/acme/w/pulls\""),
            std::string::npos);
}

TEST_F(RequestRuleSession, AnEncodedTraversalIsRefusedAndNothingIsDialled) {
  const auto reply = refused_whole(
      "GET http://api.test/repos/acme/%2e%2e/%2e%2e/gists HTTP/1.1\r\nHost: api.test\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_EQ(first_line(reply), "HTTP/1.1 400 Bad Request");
  EXPECT_NE(reply.find("encoded '.' or '..' segment"), std::string::npos) << reply;
  EXPECT_TRUE(dialled.empty());
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reason, Reason::invalid_target);
}

TEST_F(RequestRuleSession, ADotSegmentClimbingOutOfTheRuleIsDecidedWhereItLands) {
  const auto reply = refused_whole(
      "GET http://api.test/repos/acme/../../gists HTTP/1.1\r\nHost: api.test\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_EQ(first_line(reply), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(reply.find("GET /gists is not allowed"), std::string::npos) << reply;
  EXPECT_TRUE(dialled.empty());
}

TEST_F(RequestRuleSession, OtherHostsAreForwardedAsTheyCame) {
  rules({"api.test:80 GET /repos/**", "web.test:80"});
  names["web.test"] = resolves_to({"198.51.100.21"});
  std::string up, buf, sbuf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "GET http://web.test/a/./%7Eb HTTP/1.1\r\nHost: web.test\r\n\r\n");
    co_await upstream_connected();
    up = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    co_await write(servers[0], "HTTP/1.1 204 No Content\r\n\r\n");
    co_await response(c, buf);
  });
  EXPECT_EQ(first_line(up), "GET /a/./%7Eb HTTP/1.1");
  auto recs = records();
  ASSERT_GE(recs.size(), 1u);
  EXPECT_EQ(recs[0].path, "");  // no path rule decided it: no path in the log
}

TEST_F(RequestRuleSession, ATunnelToAHostOnlyPathRulesNameIsRefused) {
  rules({"api.test:443 GET /repos/**"});
  const auto reply = refused_whole("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n");
  EXPECT_EQ(first_line(reply), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(reply.find("only method/path rules name api.test:443"), std::string::npos) << reply;
  EXPECT_TRUE(dialled.empty());
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reason, Reason::not_allowlisted);
  EXPECT_NE(recs[0].detail.view().find("inspect"), std::string::npos);
}

}  // namespace
}  // namespace vibepit::proxy
