// Ask mode in one client connection (session_fixture.hpp): a request that no rule allows
// is held until an allow covers it (then it goes on exactly as if the rule had been there),
// the user refuses it, it expires, its client goes away, or the proxy stops. What no rule
// could allow is never held. The last test races the endings on two threads (TSan in CI).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "session_fixture.hpp"

namespace vibepit::proxy {
namespace {

using namespace session_fixture;  // NOLINT: the fixture and its helpers

class HoldTest : public SessionTest {
 protected:
  HoldTest() { ask(60s); }

  void ask(std::chrono::milliseconds timeout, std::size_t per_client = 64) {
    config::AskConfig a;
    a.enabled = true;
    a.timeout = timeout;
    a.max_per_client = per_client;
    pending.set_settings(a);
  }

  // What RuleUpdater does: publish, then wake the held requests.
  void allow(std::vector<std::string> allow_http) {
    rules(std::move(allow_http));
    pending.rules_changed();
  }

  asio::awaitable<void> until_held(std::size_t n) {
    while (pending.size() < n) co_await asio::post(w->io(), asio::use_awaitable);
  }

  // A whole refusal: its head and its body.
  static asio::awaitable<std::string> response(Local& c, std::string& buf) {
    auto head = co_await read_until(c, buf, "\r\n\r\n");
    if (head.starts_with("<")) co_return head;
    co_return head + co_await read_exactly(c, buf, std::stoul(header(head, "Content-Length")));
  }

  static std::string status_line(const std::string& r) { return r.substr(0, r.find("\r\n")); }

  // A CONNECT that no rule allows, held; then `act` on the worker's thread; what the client
  // is answered.
  std::string held_then(const std::function<void()>& act) {
    std::string reply, buf;
    play([&]() -> asio::awaitable<void> {
      Local c = connect_client();
      co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
      co_await until_held(1);
      act();
      reply = co_await response(c, buf);
    });
    return reply;
  }
};

TEST_F(HoldTest, AHeldConnectIsReleasedByAnAllowAndGoesOnAsIfTheRuleHadBeenThere) {
  rules({});
  names["svc.test"] = resolves_to({"10.0.0.5", "203.0.113.7"});
  std::string reply, got, buf, sbuf;
  std::vector<runtime::PendingRequest> listed;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    co_await until_held(1);
    listed = pending.list();
    EXPECT_TRUE(dialled.empty());
    EXPECT_TRUE(looked_up.empty());
    allow({"svc.test:443"});
    reply = co_await read_until(c, buf, "\r\n\r\n");
    co_await write(c, "hello");
    if (servers.size() != 1) co_return;
    got = co_await read_exactly(servers[0], sbuf, 5);
    c.close();
    servers[0].close();
  });
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].method, "CONNECT");
  EXPECT_EQ(listed[0].host, "svc.test");
  EXPECT_EQ(listed[0].port, 443);
  EXPECT_EQ(reply, "HTTP/1.1 200 Connection established\r\n\r\n");
  // The same resolution and address checks as any allowed request: the private address is
  // never dialled.
  EXPECT_EQ(dialled, std::vector<std::string>{"203.0.113.7:443"});
  EXPECT_EQ(got, "hello");
  EXPECT_EQ(pending.size(), 0u);

  auto recs = records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_STREQ(recs[0].hold, "held");
  EXPECT_EQ(recs[0].verdict, Verdict::deny);
  EXPECT_EQ(recs[0].reason, Reason::not_allowlisted);
  EXPECT_EQ(recs[0].id, listed[0].id);
  EXPECT_NE(decision_log::to_json_line(recs[0]).find("\"event\":\"held\""), std::string::npos);
  EXPECT_STREQ(recs[1].hold, "released");
  EXPECT_EQ(recs[1].id, recs[0].id);
  EXPECT_EQ(recs[1].verdict, Verdict::allow);
  EXPECT_EQ(recs[1].rule, "svc.test:443");
  EXPECT_EQ(recs[1].addr, "203.0.113.7");
  EXPECT_EQ(recs[1].status, 200);
  EXPECT_EQ(recs[1].gen, store.generation());
  const auto line = decision_log::to_json_line(recs[1]);
  EXPECT_NE(line.find("\"event\":\"decision\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"hold\":\"released\",\"held_ms\":"), std::string::npos) << line;
  EXPECT_TRUE(recs[2].close);
}

TEST_F(HoldTest, AnAllowThatDoesNotCoverItLeavesItHeld) {
  rules({});
  std::size_t still = 0;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    co_await until_held(1);
    allow({"svc.test:8443", "other.test:443"});
    for (int i = 0; i < 20; ++i) co_await asio::post(w->io(), asio::use_awaitable);
    still = pending.size();
    pending.end_all(runtime::HoldEnd::shutdown);
  });
  EXPECT_EQ(still, 1u);
  EXPECT_TRUE(dialled.empty());
}

TEST_F(HoldTest, AHeldPlainHttpRequestIsForwardedOnceAllowed) {
  rules({});
  names["web.test"] = resolves_to({"198.51.100.20"});
  std::string up, reply, buf, sbuf;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c,
                   "POST http://web.test/x HTTP/1.1\r\nHost: web.test\r\n"
                   "Content-Length: 4\r\n\r\nbody");
    co_await until_held(1);
    allow({"web.test:80"});
    co_await upstream_connected();
    up = co_await read_until(servers[0], sbuf, "\r\n\r\n");
    up += co_await read_exactly(servers[0], sbuf, 4);
    co_await write(servers[0], "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    reply = co_await read_until(c, buf, "\r\n\r\n");
  });
  EXPECT_EQ(up.substr(0, up.find("\r\n")), "POST /x HTTP/1.1");
  EXPECT_EQ(up.substr(up.size() - 4), "body");  // the body waited in the buffer, whole
  EXPECT_EQ(status_line(reply), "HTTP/1.1 201 Created");
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_STREQ(recs[1].hold, "released");
  EXPECT_EQ(recs[1].status, 201);
  EXPECT_TRUE(recs[1].totals);
}

TEST_F(HoldTest, TheUserRefusesAHeldRequest) {
  rules({});
  const auto reply = held_then([&] { EXPECT_TRUE(pending.refuse(pending.list().at(0).id)); });
  EXPECT_EQ(status_line(reply), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(reply.find("refused by the user while it was held"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Proxy-Status: vibepit; error=http_request_denied"), std::string::npos)
      << reply;
  EXPECT_TRUE(dialled.empty());
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_STREQ(recs[1].hold, "refused");
  EXPECT_EQ(recs[1].verdict, Verdict::deny);
  EXPECT_EQ(recs[1].status, 403);
  EXPECT_EQ(recs[1].detail, "refused by the user while held");
}

TEST_F(HoldTest, AHeldRequestExpiresWith403SayingSo) {
  rules({});
  ask(150ms);
  std::string reply, buf;
  const auto start = std::chrono::steady_clock::now();
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    reply = co_await response(c, buf);
  });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 150ms);
  EXPECT_EQ(status_line(reply), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(reply.find("no allow came in the 150 ms it was held"), std::string::npos) << reply;
  EXPECT_NE(reply.find("vibepit allow-http svc.test:443"), std::string::npos) << reply;
  EXPECT_EQ(pending.size(), 0u);
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_STREQ(recs[1].hold, "expired");
  EXPECT_GE(recs[1].held_ms, 150u);
}

TEST_F(HoldTest, AClientThatGoesAwayLeavesThePendingList) {
  rules({});
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\n\r\n");
    co_await until_held(1);
    c.close();
    while (pending.size() > 0) co_await asio::post(w->io(), asio::use_awaitable);
  });
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_STREQ(recs[1].hold, "gone");
  EXPECT_EQ(recs[1].status, 0);
}

TEST_F(HoldTest, DrainingAnswersEveryHeldRequest) {
  rules({});
  std::string a, b, buf1, buf2;
  play([&]() -> asio::awaitable<void> {
    Local c1 = connect_client(), c2 = connect_client();
    co_await write(c1, "CONNECT one.test:443 HTTP/1.1\r\n\r\n");
    co_await write(c2, "GET http://two.test/ HTTP/1.1\r\nHost: two.test\r\n\r\n");
    co_await until_held(2);
    w->drain();
    a = co_await response(c1, buf1);
    b = co_await response(c2, buf2);
  });
  EXPECT_EQ(status_line(a), "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(status_line(b), "HTTP/1.1 503 Service Unavailable");
  EXPECT_NE(a.find("the proxy is shutting down"), std::string::npos) << a;
  EXPECT_EQ(pending.size(), 0u);
}

TEST_F(HoldTest, TurningAskOffAnswersHeldRequests) {
  rules({});
  const auto reply = held_then([&] { pending.set_settings({}); });
  EXPECT_EQ(status_line(reply), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(reply.find("ask mode was turned off"), std::string::npos) << reply;
}

TEST_F(HoldTest, OverThePerClientBoundARequestIsRefusedAtOnceAndOthersAreServed) {
  rules({"ok.test:443"});
  names["ok.test"] = resolves_to({"203.0.113.8"});
  ask(60s, 2);
  std::string third, allowed, buf3, buf4;
  play([&]() -> asio::awaitable<void> {
    Local c1 = connect_client(), c2 = connect_client(), c3 = connect_client();
    co_await write(c1, "CONNECT a.test:443 HTTP/1.1\r\n\r\n");
    co_await write(c2, "CONNECT b.test:443 HTTP/1.1\r\n\r\n");
    co_await until_held(2);
    co_await write(c3, "CONNECT c.test:443 HTTP/1.1\r\n\r\n");
    third = co_await response(c3, buf3);
    Local c4 = connect_client();
    co_await write(c4, "CONNECT ok.test:443 HTTP/1.1\r\n\r\n");
    allowed = co_await read_until(c4, buf4, "\r\n\r\n");
    pending.end_all(runtime::HoldEnd::shutdown);
  });
  EXPECT_EQ(status_line(third), "HTTP/1.1 403 Forbidden");
  EXPECT_NE(third.find("2 requests of this client are waiting already (ask-max-per-client)"),
            std::string::npos)
      << third;
  EXPECT_EQ(allowed, "HTTP/1.1 200 Connection established\r\n\r\n");
}

TEST_F(HoldTest, WhatNoRuleCouldAllowIsNeverHeld) {
  rules({}, {"198.51.100.0/24"});
  for (const char* request : {
           "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n",      // always blocked
           "CONNECT 198.51.100.7:443 HTTP/1.1\r\n\r\n",  // block-cidr
           "CONNECT bad_host!:443 HTTP/1.1\r\n\r\n",     // invalid target
           "GET http://[fe80::1]/ HTTP/1.1\r\nHost: [fe80::1]\r\nConnection: close\r\n\r\n",
       }) {
    const auto reply = refused_whole(request);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 403") || reply.starts_with("HTTP/1.1 400"))
        << request << " -> " << reply;
    EXPECT_EQ(pending.size(), 0u) << request;
  }
  for (const auto& r : records()) EXPECT_EQ(r.hold, nullptr) << r.host;
}

// The endings race: a second thread publishes rules that release some of the held
// requests, refuses others and finally shuts the table, while the worker's thread serves,
// expires and loses clients. Every client gets exactly one answer or was closed by itself,
// and nothing stays in the table.
TEST_F(HoldTest, ReleaseRefusalExpiryDisconnectAndShutdownRace) {
  rules({});
  ask(400ms);
  constexpr int kClients = 24;
  for (int i = 0; i < kClients; ++i) {
    names["h" + std::to_string(i) + ".test"] = resolves_to({"203.0.113.9"});
  }
  std::atomic<bool> done{false};
  std::thread decider([&] {
    std::mt19937 rng(7);
    std::vector<std::string> allowed;
    while (!done.load()) {
      const int i = static_cast<int>(rng() % kClients);
      switch (rng() % 3) {
        case 0:
          allowed.push_back("h" + std::to_string(i) + ".test:443");
          allow(allowed);  // store and table are both made for other threads
          break;
        case 1:
          for (const auto& r : pending.list()) {
            if (r.host == "h" + std::to_string(i) + ".test") pending.refuse(r.id);
          }
          break;
        default:
          break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 15));
    }
    pending.end_all(runtime::HoldEnd::shutdown);
  });
  int answered = 0, hung_up = 0;
  play([&]() -> asio::awaitable<void> {
    std::vector<Local> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.push_back(connect_client());
      co_await write(clients.back(),
                     "CONNECT h" + std::to_string(i) + ".test:443 HTTP/1.1\r\n\r\n");
    }
    for (int i = 0; i < kClients; ++i) {
      if (i % 5 == 0) {  // these go away while held, or after an answer
        clients[i].close();
        ++hung_up;
        continue;
      }
      std::string buf;
      auto head = co_await read_until(clients[i], buf, "\r\n\r\n");
      if (head.starts_with("HTTP/1.1 ")) ++answered;
    }
    done = true;
  });
  decider.join();
  settle();
  EXPECT_EQ(answered + hung_up, kClients);
  EXPECT_EQ(pending.size(), 0u);
  std::map<std::string, int> holds;
  for (const auto& r : records()) {
    if (r.hold) ++holds[r.hold];
  }
  int ended = 0;
  for (const auto& [how, n] : holds) ended += how == "held" ? 0 : n;
  EXPECT_EQ(holds["held"], ended);  // each hold has one outcome
  EXPECT_GT(holds["released"], 0);  // the race had each kind of ending in it
  EXPECT_GT(holds["refused"] + holds["expired"] + holds["shutdown"], 0);
  EXPECT_GT(holds["gone"], 0);
}

}  // namespace
}  // namespace vibepit::proxy
