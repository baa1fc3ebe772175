// The SNI check (tunnel_check.hpp): alone, and on a real session (session_fixture.hpp),
// where what matters is what reaches the upstream, what the client gets, and the records.
#include "vibepit/proxy/tunnel_check.hpp"

#include <gtest/gtest.h>

#include <asio/steady_timer.hpp>

#include "../tls/hello_builder.hpp"
#include "session_fixture.hpp"

namespace vibepit::proxy {
namespace {

using namespace session_fixture;     // NOLINT: the fixture and its helpers
using namespace tls::hello_builder;  // NOLINT: the builders of test ClientHellos
using Step = TunnelCheck::Step;
using config::TunnelTls;

const std::string kAccessDenied("\x15\x03\x03\x00\x02\x02\x31", 7);

std::string hello_for(const std::string& name) {
  return hello(sni_extension(name) + extension(16, std::string("\x00\x09\x08http/1.1", 11)));
}

TEST(TunnelCheck, AMatchingNamePassesInEveryCaseAndWithATrailingDot) {
  for (const std::string name : {"svc.test", "SVC.Test", "svc.test."}) {
    TunnelCheck check(TunnelTls::check, "svc.test", 10s);
    EXPECT_EQ(check.offer(hello_for(name)), Step::pass) << name;
    EXPECT_TRUE(check.held().empty());
  }
}

TEST(TunnelCheck, AnotherNameIsRefusedAndTheDetailNamesBoth) {
  TunnelCheck check(TunnelTls::check, "svc.test", 10s);
  EXPECT_EQ(check.offer(hello_for("front.other\x1b[0m")), Step::refuse);
  EXPECT_EQ(check.reason(), Reason::sni_mismatch);
  EXPECT_EQ(check.alert(), kAccessDenied);
  decision_log::DecisionRecord rec;
  rec.verdict = Verdict::allow;
  rec.rule = "svc.test:443";
  check.fill(rec);
  EXPECT_EQ(rec.verdict, Verdict::deny);
  EXPECT_TRUE(rec.rule.empty());
  EXPECT_EQ(rec.detail.view(),
            "the TLS ClientHello names \"front.other\\x1b[0m\", not the CONNECT host \"svc.test\"");
  // Once refused, it stays refused.
  EXPECT_EQ(check.offer(hello_for("svc.test")), Step::refuse);
}

TEST(TunnelCheck, ASplitHelloIsHeldUntilWhole) {
  const auto bytes = hello_for("svc.test");
  TunnelCheck check(TunnelTls::check, "svc.test", 10s);
  for (std::size_t i = 0; i + 1 < bytes.size(); ++i) {
    ASSERT_EQ(check.offer(bytes.substr(i, 1)), Step::more) << i;
  }
  EXPECT_EQ(check.held(), bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(check.offer(bytes.substr(bytes.size() - 1)), Step::pass);
  // The caller sends held() and then the last bytes: the upstream sees the ClientHello whole.
  EXPECT_EQ(std::string(check.held()) + bytes.substr(bytes.size() - 1), bytes);
}

TEST(TunnelCheck, CheckLetsOtherProtocolsAndNamelessHellosThroughRequireDoesNot) {
  const std::string ssh = "SSH-2.0-OpenSSH_9.2p1\r\n";
  const std::string nameless = hello(extension(43, "\x02\x03\x04"));
  TunnelCheck a(TunnelTls::check, "svc.test", 10s), b(TunnelTls::check, "svc.test", 10s);
  EXPECT_EQ(a.offer(ssh), Step::pass);
  EXPECT_EQ(b.offer(nameless), Step::pass);

  TunnelCheck c(TunnelTls::require, "svc.test", 10s), d(TunnelTls::require, "svc.test", 10s);
  EXPECT_EQ(c.offer(ssh), Step::refuse);
  EXPECT_EQ(c.reason(), Reason::not_tls);
  EXPECT_TRUE(c.alert().empty()) << "a client that does not speak TLS gets no TLS alert";
  EXPECT_EQ(d.offer(nameless), Step::refuse);
  EXPECT_EQ(d.reason(), Reason::no_sni);
  EXPECT_EQ(d.alert(), kAccessDenied);

  TunnelCheck e(TunnelTls::require, "svc.test", 10s);
  EXPECT_EQ(e.offer(hello_for("svc.test")), Step::pass);
}

TEST(TunnelCheck, OffPassesAnything) {
  TunnelCheck check(TunnelTls::off, "svc.test", 10s);
  EXPECT_FALSE(check.pending());
  EXPECT_EQ(check.offer(hello_for("other.test")), Step::pass);
}

TEST(TunnelCheck, MalformedOrOversizedHellosAreRefusedInBothModes) {
  for (auto mode : {TunnelTls::check, TunnelTls::require}) {
    TunnelCheck twice(mode, "svc.test", 10s);
    EXPECT_EQ(twice.offer(hello(sni_extension("svc.test") + sni_extension("other.test"))),
              Step::refuse);
    EXPECT_EQ(twice.reason(), Reason::bad_client_hello);
    EXPECT_EQ(twice.alert(), std::string("\x15\x03\x03\x00\x02\x02\x32", 7));
    TunnelCheck big(mode, "svc.test", 10s);
    const auto bytes = in_records(
        hello_message(sni_extension("svc.test") + extension(21, std::string(6000, '\0'))), 1);
    Step step = Step::more;
    for (std::size_t at = 0; at < bytes.size() && step == Step::more; at += 1000) {
      step = big.offer(std::string_view(bytes).substr(at, 1000));
    }
    EXPECT_EQ(step, Step::refuse);
    EXPECT_EQ(big.reason(), Reason::bad_client_hello);
    EXPECT_LE(big.held().size(), tls::kMaxHelloBytes);
  }
}

TEST(TunnelCheck, AHelloThatDawdlesPastTheHeaderTimeoutIsRefused) {
  const auto bytes = hello_for("svc.test");
  TunnelCheck check(TunnelTls::check, "svc.test", 20ms);
  EXPECT_EQ(check.offer(bytes.substr(0, 10)), Step::more);
  std::this_thread::sleep_for(40ms);
  EXPECT_EQ(check.offer(bytes.substr(10, 10)), Step::refuse);
  EXPECT_EQ(check.reason(), Reason::bad_client_hello);
}

// ---- On a session.

class TunnelCheckSession : public SessionTest {
 protected:
  TunnelCheckSession() {
    rules({"svc.test:443"});
    names["svc.test"] = resolves_to({"203.0.113.7"});
  }

  // CONNECT svc.test:443, then `first` (in pieces of `piece` bytes, or ahead of the 200 when
  // `early`). Returns what the upstream received until the proxy closed it, and what the
  // client got after the 200 until the proxy closed.
  struct Seen {
    std::string reply, upstream, client;
  };
  Seen exchange(const std::string& first, std::size_t piece, bool early = false) {
    Seen seen;
    play([&]() -> asio::awaitable<void> {
      Local c = connect_client();
      std::string connect = "CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n\r\n";
      if (early) connect += first;
      co_await write(c, connect);
      std::string buf;
      seen.reply = co_await read_until(c, buf, "\r\n\r\n");
      if (!early) {
        for (std::size_t at = 0; at < first.size(); at += piece) {
          co_await write(c, std::string_view(first).substr(at, piece));
          co_await asio::post(w->io(), asio::use_awaitable);  // one segment each
        }
      }
      asio::error_code ec;
      auto tok = asio::redirect_error(asio::use_awaitable, ec);
      co_await upstream_connected();
      co_await asio::async_read(c, asio::dynamic_buffer(buf), tok);  // until the proxy closes
      seen.client = buf;
      std::string up;
      co_await asio::async_read(servers[0], asio::dynamic_buffer(up), tok);
      seen.upstream = up;
    });
    return seen;
  }

  // A fronting attempt's outcome: nothing upstream, an alert to the client, and the records.
  void expect_fronting_refused(std::size_t piece, bool early) {
    const auto seen = exchange(hello_for("forbidden.test"), piece, early);
    EXPECT_EQ(seen.reply, "HTTP/1.1 200 Connection established\r\n\r\n");
    EXPECT_EQ(seen.upstream, "");
    EXPECT_EQ(seen.client, kAccessDenied);
    auto recs = records();
    ASSERT_EQ(recs.size(), 3u);
    const auto &allow = recs[0], &deny = recs[1], &close = recs[2];
    EXPECT_EQ(allow.verdict, Verdict::allow);
    EXPECT_EQ(deny.verdict, Verdict::deny);
    EXPECT_FALSE(deny.close);
    EXPECT_EQ(deny.id, allow.id);
    EXPECT_EQ(deny.reason, Reason::sni_mismatch);
    EXPECT_EQ(deny.status, 0);
    EXPECT_EQ(deny.host, "svc.test");
    EXPECT_NE(deny.detail.view().find("\"forbidden.test\""), std::string::npos) << deny.detail;
    EXPECT_NE(deny.detail.view().find("\"svc.test\""), std::string::npos) << deny.detail;
    EXPECT_TRUE(close.close);
    EXPECT_EQ(close.reason, Reason::sni_mismatch);
    EXPECT_EQ(close.bytes_up, 0u);
  }
};

TEST_F(TunnelCheckSession, FrontingIsRefusedBeforeAByteReachesTheUpstream) {
  expect_fronting_refused(4096, false);
}

TEST_F(TunnelCheckSession, FrontingOneBytePerSegmentIsRefusedToo) {
  expect_fronting_refused(1, false);
}

TEST_F(TunnelCheckSession, FrontingAheadOfThe200IsRefusedToo) {
  expect_fronting_refused(0, true);
}

TEST_F(TunnelCheckSession, AMatchingHelloOneBytePerSegmentReachesTheUpstreamWhole) {
  const auto bytes = hello_for("svc.test");
  std::string up, down;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n\r\n");
    std::string buf, sbuf;
    co_await read_until(c, buf, "\r\n\r\n");
    for (std::size_t at = 0; at < bytes.size(); ++at) {
      co_await write(c, std::string_view(bytes).substr(at, 1));
      co_await asio::post(w->io(), asio::use_awaitable);
    }
    co_await upstream_connected();
    up = co_await read_exactly(servers[0], sbuf, bytes.size());
    co_await write(servers[0], "server hello");
    down = co_await read_exactly(c, buf, 12);
    c.close();
    servers[0].close();
  });
  EXPECT_EQ(up, bytes);
  EXPECT_EQ(down, "server hello");
  auto recs = records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[1].verdict, Verdict::allow);
  EXPECT_EQ(recs[1].bytes_up, bytes.size());
}

TEST_F(TunnelCheckSession, AServerThatSpeaksFirstIsHeardWhileTheCheckWaits) {
  std::string banner, up;
  play([&]() -> asio::awaitable<void> {
    Local c = connect_client();
    co_await write(c, "CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n\r\n");
    std::string buf, sbuf;
    co_await read_until(c, buf, "\r\n\r\n");
    co_await upstream_connected();
    co_await write(servers[0], "SSH-2.0-server\r\n");
    banner = co_await read_until(c, buf, "\r\n");
    co_await write(c, "SSH-2.0-client\r\n");
    up = co_await read_until(servers[0], sbuf, "\r\n");
    c.close();
    servers[0].close();
  });
  EXPECT_EQ(banner, "SSH-2.0-server\r\n");
  EXPECT_EQ(up, "SSH-2.0-client\r\n");
}

TEST_F(TunnelCheckSession, RequireRefusesATunnelThatIsNotTls) {
  cfg.tunnel_tls = TunnelTls::require;  // the worker reads the fixture's config
  const auto seen = exchange("SSH-2.0-client\r\n", 4096);
  EXPECT_EQ(seen.upstream, "");
  EXPECT_EQ(seen.client, "") << "no TLS alert to a client that does not speak TLS";
  auto recs = records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].reason, Reason::not_tls);
}

}  // namespace
}  // namespace vibepit::proxy
