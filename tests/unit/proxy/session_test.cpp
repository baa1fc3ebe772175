// Component tests of one client connection (session_fixture.hpp): decisions, dials, relays,
// keep-alive, deadlines and records.
#include "vibepit/proxy/session.hpp"

#include <gtest/gtest.h>

#include "session_fixture.hpp"

namespace vibepit::proxy {
namespace {

using namespace session_fixture;  // NOLINT: the fixture and its helpers

TEST_F(SessionTest, ConnectDialsOnlyTheCheckedAddressesAndRelays) {
  rules({"svc.test:443"});
  names["svc.test"] = resolves_to({"10.0.0.5", "127.0.0.1", "203.0.113.7", "169.254.1.1"});
  std::string reply, got, buf, sbuf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    // "early" goes ahead of the 200: it must reach the upstream first, and only there.
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n\r\nearly");
    reply = co_await read_until(c, buf, "\r\n\r\n");
    if (servers.size() != 1) co_return;
    got = co_await read_exactly(servers[0], sbuf, 5);
    co_await write(servers[0], "pong!");
    got += "|" + co_await read_exactly(c, buf, 5);
    c.close();
    servers[0].close();
  });
  EXPECT_EQ(reply, "HTTP/1.1 200 Connection established\r\n\r\n");
  EXPECT_EQ(looked_up, std::vector<std::string>{"svc.test"});
  EXPECT_EQ(dialled, std::vector<std::string>{"203.0.113.7:443"});
  EXPECT_EQ(got, "early|pong!");

  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].verdict, Verdict::allow);
  EXPECT_EQ(recs[0].reason, Reason::allowlisted);
  EXPECT_EQ(recs[0].rule, "svc.test:443");
  EXPECT_EQ(recs[0].addr, "203.0.113.7");
  EXPECT_EQ(recs[0].status, 200);
  EXPECT_EQ(recs[0].client_ip, ip("127.0.0.1"));
  EXPECT_EQ(recs[0].client_port, 40000);
  EXPECT_NE(decision_log::to_json_line(recs[0]).find("\"client\":\"127.0.0.1:40000\""),
            std::string::npos);
  EXPECT_FALSE(recs[0].close);
  EXPECT_TRUE(recs[1].close);
  EXPECT_EQ(recs[1].bytes_up, 5u);
  EXPECT_EQ(recs[1].bytes_down, 5u);
}

TEST_F(SessionTest, ConnectTriesTheNextCheckedAddressWhenADialFails) {
  rules({"svc.test:443"});
  names["svc.test"] = resolves_to({"203.0.113.1", "192.168.0.1", "203.0.113.2"});
  refused.insert("203.0.113.1");
  std::string reply, buf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    reply = co_await read_until(c, buf, "\r\n\r\n");
  });
  EXPECT_EQ(reply, "HTTP/1.1 200 Connection established\r\n\r\n");
  EXPECT_EQ(dialled, (std::vector<std::string>{"203.0.113.1:443", "203.0.113.2:443"}));
  auto recs = records();
  ASSERT_GE(recs.size(), 1u);
  EXPECT_EQ(recs[0].addr, "203.0.113.2");
}

TEST_F(SessionTest, ANameThatRebindsToPrivateAddressesIsRefusedAndNothingIsDialled) {
  rules({"*.test:443"});
  names["evil.test"] = resolves_to({"10.1.2.3", "127.0.0.1"});
  const std::string reply = refused_whole("CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(dialled.empty());
  EXPECT_EQ(reply.substr(0, reply.find("\r\n")), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(header(reply, "Proxy-Status").find("error=destination_ip_prohibited"),
            std::string::npos);
  EXPECT_NE(reply.find("access to evil.test:443 denied: evil.test resolves to 10.1.2.3, in "
                       "the blocked range 10.0.0.0/8. No rule can allow it."),
            std::string::npos)
      << reply;
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].verdict, Verdict::deny);
  EXPECT_EQ(recs[0].reason, Reason::blocked_address);
  EXPECT_EQ(recs[0].range, "10.0.0.0/8");
  EXPECT_EQ(recs[0].addr, "10.1.2.3");
  EXPECT_EQ(recs[0].status, 403);
}

TEST_F(SessionTest, AnUnlistedHostIsRefusedWithTheCommandThatAllowsIt) {
  rules({"svc.test:443"});
  const std::string reply = refused_whole("CONNECT other.test:443 HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(looked_up.empty());
  EXPECT_TRUE(dialled.empty());
  EXPECT_EQ(reply.substr(0, reply.find("\r\n")), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(header(reply, "Proxy-Status").find("error=http_request_denied"), std::string::npos);
  EXPECT_NE(reply.find("To allow it, run: vibepit allow-http other.test:443"), std::string::npos);
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reason, Reason::not_allowlisted);
  EXPECT_EQ(recs[0].host, "other.test");
  EXPECT_EQ(recs[0].port, 443);
  EXPECT_EQ(recs[0].status, 403);
}

TEST_F(SessionTest, ABlockCidrAddressIsNeverDialled) {
  rules({"svc.test:443"}, {"203.0.113.0/25"});
  names["svc.test"] = resolves_to({"203.0.113.5", "203.0.113.200"});
  std::string reply, buf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    reply = co_await read_until(c, buf, "\r\n\r\n");
  });
  EXPECT_EQ(reply, "HTTP/1.1 200 Connection established\r\n\r\n");
  EXPECT_EQ(dialled, std::vector<std::string>{"203.0.113.200:443"});
}

TEST_F(SessionTest, HttpIsForwardedInOriginFormAndTheConnectionIsReused) {
  rules({"web.test:80"});
  names["web.test"] = resolves_to({"192.168.1.1", "198.51.100.20"});
  std::string first_up, second_up, first, second, buf, sbuf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c,
                   "GET http://web.test/a?b=1 HTTP/1.1\r\nHost: web.test\r\n"
                   "Proxy-Connection: keep-alive\r\n\r\n");
    co_await upstream_connected();
    first_up = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    co_await write(servers[0], "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    first = co_await read_until(c, buf, "\r\n\r\n");
    first += co_await read_exactly(c, buf, 2);
    // The same authority again: decided anew, sent on the open upstream connection.
    co_await write(c, "GET http://web.test/c HTTP/1.1\r\nHost: web.test\r\n\r\n");
    second_up = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    co_await write(servers[0], "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    second = co_await read_until(c, buf, "\r\n\r\n");
  });
  EXPECT_EQ(looked_up, std::vector<std::string>{"web.test"});
  EXPECT_EQ(dialled, std::vector<std::string>{"198.51.100.20:80"});
  EXPECT_EQ(first_up.substr(0, first_up.find("\r\n")), "GET /a?b=1 HTTP/1.1");
  EXPECT_EQ(header(first_up, "Host"), "web.test");
  EXPECT_EQ(first_up.find("Proxy-Connection"), std::string::npos) << first_up;
  EXPECT_EQ(first.substr(0, first.find("\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(header(first, "Connection"), "keep-alive");
  EXPECT_EQ(first.substr(first.size() - 2), "hi");
  EXPECT_EQ(second_up.substr(0, second_up.find("\r\n")), "GET /c HTTP/1.1");
  EXPECT_EQ(second.substr(0, second.find("\r\n")), "HTTP/1.1 404 Not Found");

  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.method, "GET");
    EXPECT_EQ(r.verdict, Verdict::allow);
    EXPECT_EQ(r.addr, "198.51.100.20");
    EXPECT_TRUE(r.totals);
  }
  EXPECT_EQ(recs[0].status, 200);
  EXPECT_EQ(recs[1].status, 404);
}

TEST_F(SessionTest, ADeniedHttpRequestLeavesTheConnectionUsable) {
  rules({"web.test:80"});
  names["web.test"] = resolves_to({"198.51.100.20"});
  std::string denied, buf, sbuf, allowed_up;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "GET http://no.test/ HTTP/1.1\r\nHost: no.test\r\n\r\n");
    denied = co_await read_until(c, buf, "\r\n\r\n");
    auto length = std::stoul(header(denied, "Content-Length"));
    co_await read_exactly(c, buf, length);
    co_await write(c, "GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n");
    co_await upstream_connected();
    allowed_up = co_await read_until(servers[0], sbuf, "\r\n\r\n");
  });
  EXPECT_EQ(denied.substr(0, denied.find("\r\n")), "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(allowed_up.substr(0, allowed_up.find("\r\n")), "GET / HTTP/1.1");
  EXPECT_EQ(dialled, std::vector<std::string>{"198.51.100.20:80"});
  auto recs = records();
  ASSERT_GE(recs.size(), 1u);
  EXPECT_EQ(recs[0].host, "no.test");
  EXPECT_EQ(recs[0].reason, Reason::not_allowlisted);
  EXPECT_EQ(recs[0].status, 403);
}

TEST_F(SessionTest, AHostHeaderNamingAnotherAuthorityIsRefusedWithOneRecordAndNoLookup) {
  rules({"web.test:80"});
  names["web.test"] = resolves_to({"198.51.100.20"});
  const std::string reply =
      refused_whole("GET http://web.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n");
  EXPECT_EQ(reply.substr(0, reply.find("\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_NE(reply.find("the Host header \"other.test\" does not match the request URI "
                       "authority web.test:80"),
            std::string::npos)
      << reply;
  EXPECT_TRUE(looked_up.empty());
  EXPECT_TRUE(dialled.empty());
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].verdict, Verdict::deny);
  EXPECT_EQ(recs[0].reason, Reason::invalid_target);
  EXPECT_EQ((recs[0].method + " " + recs[0].host), "GET web.test");
  EXPECT_EQ(recs[0].status, 400);
  EXPECT_EQ(recs[0].detail,
            "the Host header \"other.test\" does not match the request URI authority web.test:80");
}

}  // namespace
}  // namespace vibepit::proxy
