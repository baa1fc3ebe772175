// Component test of one client connection, the way Beast tests its streams: a real Session
// on a real Worker, whose two ways out (lookup and connect) are fakes, and whose client and
// upstream connections are in-memory socket pairs (AF_UNIX: no network, no root). The test
// writes a client's bytes, reads what the proxy answers, plays the upstream server, and
// sees every name looked up, every address dialled and every decision record.
#include "vibepit/proxy/session.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/local/connect_pair.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "vibepit/proxy/worker.hpp"
#include "vibepit/runtime/endpoint.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
using Local = asio::local::stream_protocol::socket;
using namespace std::chrono_literals;
using policy::IpAddr;
using policy::Reason;
using policy::Verdict;

IpAddr ip(std::string_view text) {
  return *IpAddr::parse(text);
}

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    cfg.upstream_dns = {config::Endpoint{ip("127.0.0.1"), 9}};  // never asked: lookup is faked
    cfg.splice = config::SpliceMode::off;
    log.set_observer([this](const decision_log::DecisionRecord& r) {
      std::lock_guard lock(mu);
      records_.push_back(r);
    });
    w = std::make_unique<Worker>(cfg, store, producer, active);
    log.start();
    w->set_outside(
        [this](std::string host) -> asio::awaitable<ResolveResult> {
          looked_up.push_back(host);
          auto it = names.find(host);
          if (it != names.end()) co_return it->second;
          ResolveResult r;
          r.error = "NXDOMAIN";
          co_return r;
        },
        [this](tcp::socket& s, tcp::endpoint to) -> asio::awaitable<asio::error_code> {
          const auto addr = to.address().to_string();
          dialled.push_back(policy::join_host_port(addr, to.port()));
          if (refused.count(addr)) co_return asio::error::connection_refused;
          Local near(w->io()), far(w->io());
          asio::local::connect_pair(near, far);
          s = tcp::socket(w->io());
          s.assign(to.protocol(), near.release());
          servers.push_back(std::move(far));
          co_return asio::error_code{};
        });
  }

  ~SessionTest() override {
    log.stop();
    servers.clear();  // their sockets belong to the worker's loop: close them first
    w.reset();        // destroys pending sessions while the worker's loop still exists
  }

  void rules(std::vector<std::string> allow_http, std::vector<std::string> block_cidr = {}) {
    policy::RuleSet r;
    r.allow_http = std::move(allow_http);
    r.block_cidr = std::move(block_cidr);
    auto compiled = policy::compile(r, 0);
    store.publish(std::const_pointer_cast<policy::Snapshot>(
        std::get<std::shared_ptr<const policy::Snapshot>>(compiled)));
  }

  // A client connects: a session starts on the far end of a new socket pair.
  Local connect_client() {
    Local mine(w->io()), theirs(w->io());
    asio::local::connect_pair(mine, theirs);
    tcp::socket s(w->io());
    s.assign(tcp::v4(), theirs.release());
    active.fetch_add(1);
    std::make_shared<Session>(*w, std::move(s), runtime::to_tcp_endpoint(ip("127.0.0.1"), 40000))
        ->start();
    return mine;
  }

  // Run `script` on the worker's loop until it ends (at most 5 s).
  void play(std::function<asio::awaitable<void>()> script) {
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(
        w->io(),
        [&]() -> asio::awaitable<void> {
          try {
            co_await script();
          } catch (...) {
            failure = std::current_exception();
          }
          done = true;
        },
        asio::detached);
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!done && std::chrono::steady_clock::now() < until) w->io().run_one_for(100ms);
    ASSERT_TRUE(done) << "the exchange did not finish within 5 s";
    if (failure) std::rethrow_exception(failure);
  }

  // One request on a new connection, and everything the proxy answers until it closes the
  // connection (as it does after a refused CONNECT or a malformed request).
  std::string refused_whole(std::string_view request) {
    std::string reply;
    play([&]() -> asio::awaitable<void> {
      Local c = connect_client();
      co_await asio::async_write(c, asio::buffer(request), asio::use_awaitable);
      asio::error_code ec;
      co_await asio::async_read(c, asio::dynamic_buffer(reply),
                                asio::redirect_error(asio::use_awaitable, ec));
    });
    return reply;
  }

  // Wait until the proxy has made an upstream connection (the script fails by time-out if
  // it never does).
  asio::awaitable<void> upstream_connected() {
    while (servers.empty()) co_await asio::post(w->io(), asio::use_awaitable);
  }

  // Let the sessions finish what the script left them (closes, last records).
  void settle() {
    for (int i = 0; i < 50 && w->io().poll() > 0;) ++i;
  }

  std::vector<decision_log::DecisionRecord> records() {
    settle();
    log.stop();
    std::lock_guard lock(mu);
    return records_;
  }

  config::ProxyConfig cfg;
  policy::SnapshotStore store{nullptr};
  decision_log::DecisionLog log{"", 1024};
  decision_log::DecisionLog::Producer& producer = log.make_producer();
  std::atomic<std::size_t> active{0};
  std::unique_ptr<Worker> w;

  std::map<std::string, ResolveResult> names;  // what the fake lookup answers
  std::set<std::string> refused;               // addresses whose dial is refused
  std::vector<std::string> looked_up;
  std::vector<std::string> dialled;  // "addr:port", in order
  std::vector<Local> servers;        // the far end of each upstream connection made

 private:
  std::mutex mu;
  std::vector<decision_log::DecisionRecord> records_;
};

ResolveResult resolves_to(std::initializer_list<std::string_view> addrs) {
  ResolveResult r;
  r.ok = true;
  for (auto a : addrs) r.addrs.push_back(ip(a));
  return r;
}

asio::awaitable<void> write(Local& s, std::string_view bytes) {
  co_await asio::async_write(s, asio::buffer(bytes), asio::use_awaitable);
}

// Read up to and including `delim` (a response or request head); the rest stays in `buf`.
asio::awaitable<std::string> read_until(Local& s, std::string& buf, std::string_view delim) {
  asio::error_code ec;
  auto n = co_await asio::async_read_until(s, asio::dynamic_buffer(buf), delim,
                                           asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::string("<") + ec.message() + "> " + buf;
  std::string out = buf.substr(0, n);
  buf.erase(0, n);
  co_return out;
}

asio::awaitable<std::string> read_exactly(Local& s, std::string& buf, std::size_t n) {
  if (buf.size() < n) {
    co_await asio::async_read(s, asio::dynamic_buffer(buf), asio::transfer_at_least(n - buf.size()),
                              asio::use_awaitable);
  }
  std::string out = buf.substr(0, n);
  buf.erase(0, n);
  co_return out;
}

std::string header(const std::string& response, std::string_view name) {
  auto pos = response.find("\r\n" + std::string(name) + ": ");
  if (pos == std::string::npos) return "";
  pos += 4 + name.size();
  return response.substr(pos, response.find("\r\n", pos) - pos);
}

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
