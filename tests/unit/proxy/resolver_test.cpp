// The c-ares resolver against a scripted DNS server on 127.0.0.1.
#include "vibepit/proxy/resolver.hpp"

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/udp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <thread>

namespace vibepit::proxy {
namespace {

using asio::ip::udp;

// Answers A queries for "a.test" with 198.51.100.7 and 203.0.113.9 (TTL 60), for
// "zero.test" the same with TTL 0, and for "short.test" with 198.51.100.N, N counting its
// A queries, with TTL 2; NXDOMAIN otherwise. With `silent`, it counts queries but never
// answers.
class FakeDns {
 public:
  explicit FakeDns(bool silent)
      : sock_(io_, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), silent_(silent) {
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeDns() {
    stop_ = true;
    asio::error_code ec;
    sock_.send_to(asio::buffer("x", 1), sock_.local_endpoint(), 0, ec);  // wake the receive
    thread_.join();
  }
  std::uint16_t port() const { return sock_.local_endpoint().port(); }
  int queries() const { return queries_.load(); }
  int short_a_queries() const { return short_answers_.load(); }  // short.test's, answered

 private:
  void serve() {
    std::array<unsigned char, 512> buf{};
    while (!stop_) {
      udp::endpoint from;
      asio::error_code ec;
      auto n = sock_.receive_from(asio::buffer(buf), from, 0, ec);
      if (ec || stop_ || n < 12) continue;
      ++queries_;
      if (silent_) continue;
      // Question name starts at 12; find its end.
      std::size_t i = 12;
      std::string name;
      while (i < n && buf[i] != 0) {
        auto len = buf[i];
        if (!name.empty()) name += '.';
        name.append(reinterpret_cast<char*>(&buf[i + 1]), len);
        i += len + 1;
      }
      std::size_t qend = i + 5;  // zero label + qtype + qclass
      if (qend > n) continue;
      unsigned qtype = buf[i + 1] << 8 | buf[i + 2];
      std::vector<unsigned char> out(buf.begin(), buf.begin() + static_cast<long>(qend));
      out[2] = 0x84;  // QR, AA
      out[3] = 0x00;
      out[4] = 0, out[5] = 1;  // QDCOUNT
      out[6] = 0, out[7] = 0;
      out[8] = out[9] = out[10] = out[11] = 0;
      if (name == "short.test") {
        if (qtype == 1) {
          out[7] = 1;
          unsigned char rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 2, 0, 4, 198, 51, 100, 0};
          rr[15] = static_cast<unsigned char>(++short_answers_);
          out.insert(out.end(), rr, rr + sizeof rr);
        }
      } else if (name != "a.test" && name != "zero.test") {
        out[3] = 3;  // NXDOMAIN
      } else if (qtype == 1) {
        out[7] = 2;
        unsigned char ttl = name == "zero.test" ? 0 : 60;
        for (auto ip : {std::array<unsigned char, 4>{198, 51, 100, 7}, {203, 0, 113, 9}}) {
          unsigned char rr[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, ttl, 0, 4};
          out.insert(out.end(), rr, rr + sizeof rr);
          out.insert(out.end(), ip.begin(), ip.end());
        }
      }
      sock_.send_to(asio::buffer(out), from, 0, ec);
    }
  }

  asio::io_context io_;
  udp::socket sock_;
  bool silent_;
  std::atomic<bool> stop_{false};
  std::atomic<int> queries_{0};
  std::atomic<int> short_answers_{0};
  std::thread thread_;
};

ResolveResult resolve(std::uint16_t port, const std::string& name,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(900)) {
  runtime::resolver_library_init();
  asio::io_context io;
  config::Endpoint server{*policy::IpAddr::parse("127.0.0.1"), port};
  Resolver r(io, {server}, timeout);
  ResolveResult out;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        out = co_await r.async_resolve(name, asio::use_awaitable);
        done = true;
      },
      asio::detached);
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(done) << "resolution never completed";
  return out;
}

TEST(Resolver, ReturnsEveryAddressInOrder) {
  FakeDns dns(false);
  auto r = resolve(dns.port(), "a.test");
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.addrs.size(), 2u);
  EXPECT_EQ(r.addrs[0].to_string(), "198.51.100.7");
  EXPECT_EQ(r.addrs[1].to_string(), "203.0.113.9");
}

TEST(Resolver, NxdomainIsAFailureWithAReason) {
  FakeDns dns(false);
  auto r = resolve(dns.port(), "nope.test");
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
  EXPECT_TRUE(r.addrs.empty());
}

// It ends as a timeout (resolve() gives it 10 s to end at all), not a hang.
TEST(Resolver, SilentServerTimesOutWithinTheBudget) {
  FakeDns dns(true);
  auto r = resolve(dns.port(), "a.test", std::chrono::milliseconds(600));
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.timed_out) << r.error;
  EXPECT_GE(dns.queries(), 1);
}

TEST(Resolver, NeverAnswersFromEtcHosts) {
  // "localhost" is in /etc/hosts; the fake server says NXDOMAIN, so no address may come back.
  FakeDns dns(false);
  auto r = resolve(dns.port(), "localhost");
  EXPECT_FALSE(r.ok) << r.error;
  EXPECT_TRUE(r.addrs.empty());
}

TEST(Resolver, SingleLabelNamesAreAskedAsGiven) {
  // No search domains and ndots 0: "intranet" is sent as is, never with a host suffix.
  FakeDns dns(false);
  auto r = resolve(dns.port(), "intranet");
  EXPECT_FALSE(r.ok);
  EXPECT_GE(dns.queries(), 1);
}

// One resolver used for several lookups, to observe its cache.
class SharedResolver {
 public:
  explicit SharedResolver(std::uint16_t port, ResolverClock clock = {})
      : resolver_((runtime::resolver_library_init(), io_),
                  {config::Endpoint{*policy::IpAddr::parse("127.0.0.1"), port}},
                  std::chrono::milliseconds(900), {}, clock) {}

  // Start `n` lookups of `name` at once and wait for all of them.
  std::vector<ResolveResult> resolve(const std::string& name, int n = 1) {
    std::vector<ResolveResult> out(static_cast<std::size_t>(n));
    int done = 0;
    for (auto& slot : out) {
      asio::co_spawn(
          io_,
          [&, name]() -> asio::awaitable<void> {
            slot = co_await resolver_.async_resolve(name, asio::use_awaitable);
            ++done;
          },
          asio::detached);
    }
    // Until they are done, not until the loop runs out of work: a planned refresh's timer
    // may keep it busy for the rest of the entry's life.
    run_until([&] { return done == n; }, std::chrono::seconds(10));
    EXPECT_EQ(done, n);
    return out;
  }
  Resolver& resolver() { return resolver_; }
  // Runs the loop past the resolver's next look at its clock (with ManualClock its refresh
  // timer waits at most 1 ms), then through a lookup of a name the server does not know.
  // The server takes queries in the order sent, so one the resolver sent at that look has
  // reached it by the time the lookup is answered.
  void let_the_refresh_timer_look() {
    bool later = false;
    asio::steady_timer after(io_, std::chrono::milliseconds(2));
    after.async_wait([&](const asio::error_code&) { later = true; });
    EXPECT_TRUE(run_until([&] { return later; }));
    EXPECT_FALSE(resolve("unknown.test")[0].ok);
  }
  // Run the loop until `until` holds (checked every 10 ms) or `limit` passes.
  template <typename Pred>
  bool run_until(Pred until, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!until() && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(10));
    }
    return until();
  }

 private:
  asio::io_context io_;
  Resolver resolver_;
};

TEST(ResolverCache, SecondLookupIsAnsweredFromCache) {
  FakeDns dns(false);
  SharedResolver r(dns.port());
  auto first = r.resolve("a.test");
  int asked = dns.queries();
  auto second = r.resolve("a.test");
  ASSERT_TRUE(second[0].ok);
  EXPECT_FALSE(first[0].cached);
  EXPECT_TRUE(second[0].cached);
  EXPECT_EQ(second[0].addrs, first[0].addrs);
  EXPECT_EQ(dns.queries(), asked);  // nothing new on the wire
  ResolveResult direct;
  ASSERT_TRUE(r.resolver().cached("a.test", direct));  // the synchronous path sees it too
  EXPECT_EQ(direct.addrs, first[0].addrs);
  EXPECT_FALSE(r.resolver().cached("other.test", direct));
}

TEST(ResolverCache, TtlZeroIsNeverCached) {
  FakeDns dns(false);
  SharedResolver r(dns.port());
  r.resolve("zero.test");
  int asked = dns.queries();
  auto again = r.resolve("zero.test");
  ASSERT_TRUE(again[0].ok);
  EXPECT_FALSE(again[0].cached);
  EXPECT_GT(dns.queries(), asked);
}

TEST(ResolverCache, FailuresAreNotCached) {
  FakeDns dns(false);
  SharedResolver r(dns.port());
  r.resolve("nope.test");
  int asked = dns.queries();
  auto again = r.resolve("nope.test");
  EXPECT_FALSE(again[0].ok);
  EXPECT_GT(dns.queries(), asked);
}

TEST(ResolverCache, ConcurrentLookupsShareOneQuery) {
  FakeDns dns(false);
  SharedResolver r(dns.port());
  auto results = r.resolve("a.test", 8);
  for (const auto& res : results) {
    ASSERT_TRUE(res.ok);
    EXPECT_EQ(res.addrs.size(), 2u);
  }
  EXPECT_EQ(dns.queries(), 2);  // one A and one AAAA question for all eight
}

// The cache's time, moved only by the test: an answer's life starts at the time it arrives,
// which is the time the test last set, so refresh and expiry times are exact. The refresh
// timer looks at it every millisecond of real time.
class ManualClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  ManualClock() { now_ = start(); }
  static time_point start() { return time_point(std::chrono::hours(1)); }
  // Sets the cache's time to `since` after start().
  void at(std::chrono::milliseconds since) { now_ = start() + since; }
  ResolverClock clock() const {
    return {[] { return now_; }, std::chrono::milliseconds(1)};
  }

 private:
  static inline time_point now_;
};

// short.test has a TTL of 2 s, so an entry in use is refreshed 1.8 s into its life.
std::string first_address(const ResolveResult& r) {
  return r.addrs.empty() ? std::string() : r.addrs.front().to_string();
}

using std::chrono::milliseconds;

TEST(ResolverCache, ANameAskedForAgainIsRefreshedBeforeItExpires) {
  FakeDns dns(false);
  ManualClock time;
  SharedResolver r(dns.port(), time.clock());
  auto first = r.resolve("short.test");  // its life: 0 to 2000 ms
  ASSERT_TRUE(first[0].ok);
  EXPECT_EQ(first_address(first[0]), "198.51.100.1");
  int asked = dns.queries();

  // Asked for again, several times, early in its life: each is answered from the cache, and
  // together they plan one refresh, at 1800 ms.
  for (int i = 0; i < 5; ++i) {
    ResolveResult hit;
    ASSERT_TRUE(r.resolver().cached("short.test", hit));
    EXPECT_EQ(first_address(hit), "198.51.100.1");
  }
  EXPECT_EQ(dns.queries(), asked);  // not yet
  time.at(milliseconds(1799));
  r.let_the_refresh_timer_look();
  EXPECT_EQ(dns.short_a_queries(), 1) << "refreshed before nine tenths of its life";
  asked = dns.queries();
  time.at(milliseconds(1800));
  ASSERT_TRUE(r.run_until([&] { return dns.queries() >= asked + 2; }))
      << "no refresh reached the server";
  EXPECT_TRUE(r.run_until([&] {
    ResolveResult now;
    return r.resolver().cached("short.test", now) && first_address(now) == "198.51.100.2";
  })) << "the refresh's answer did not replace the entry";
  EXPECT_EQ(dns.queries(), asked + 2);  // one A and one AAAA question for the five hits

  // Past the first answer's expiry the name is answered from the cache, without a lookup
  // on the caller's path.
  time.at(milliseconds(2300));
  auto later = r.resolve("short.test");
  ASSERT_TRUE(later[0].ok);
  EXPECT_TRUE(later[0].cached);
  EXPECT_EQ(first_address(later[0]), "198.51.100.2");

  // The refreshed answer's life started at 1800 ms: it is served until 3800 ms, and not at
  // 3800 ms.
  ResolveResult last;
  time.at(milliseconds(3799));
  ASSERT_TRUE(r.resolver().cached("short.test", last)) << "expired early";
  EXPECT_EQ(first_address(last), "198.51.100.2");
  time.at(milliseconds(3800));
  EXPECT_FALSE(r.resolver().cached("short.test", last)) << "served past its TTL";
}

TEST(ResolverCache, AHitLateInTheLifeRefreshesAtOnce) {
  FakeDns dns(false);
  ManualClock time;
  SharedResolver r(dns.port(), time.clock());
  ASSERT_TRUE(r.resolve("short.test")[0].ok);
  int asked = dns.queries();
  time.at(milliseconds(1900));  // past the 1800 ms a refresh would have been planned for
  ResolveResult hit;
  ASSERT_TRUE(r.resolver().cached("short.test", hit));
  EXPECT_EQ(first_address(hit), "198.51.100.1");  // the old answer, at once
  // The loop is not run between: the time stays at 1900 ms, so only a query sent by the
  // hit itself can reach the server.
  EXPECT_TRUE(r.run_until([&] {
    ResolveResult now;
    return r.resolver().cached("short.test", now) && first_address(now) == "198.51.100.2";
  })) << "the refresh's answer did not replace the entry";
  EXPECT_EQ(dns.queries(), asked + 2);
}

TEST(ResolverCache, ANameNotAskedForAgainExpiresWithoutARefresh) {
  FakeDns dns(false);
  ManualClock time;
  SharedResolver r(dns.port(), time.clock());
  ASSERT_TRUE(r.resolve("short.test")[0].ok);
  // The loop runs with the time past when a refresh would be due and then past the expiry;
  // a refresh sent meanwhile would also show in the answer below (198.51.100.3).
  time.at(milliseconds(1900));
  r.let_the_refresh_timer_look();
  time.at(milliseconds(2000));
  r.let_the_refresh_timer_look();
  EXPECT_EQ(dns.short_a_queries(), 1);
  ResolveResult gone;
  EXPECT_FALSE(r.resolver().cached("short.test", gone));  // expired at exactly 2000 ms
  auto again = r.resolve("short.test");
  ASSERT_TRUE(again[0].ok);
  EXPECT_FALSE(again[0].cached);
  EXPECT_EQ(first_address(again[0]), "198.51.100.2");
}

}  // namespace
}  // namespace vibepit::proxy
