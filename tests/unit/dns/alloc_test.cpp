// A DNS query makes no allocation on its I/O thread once the server is warm, whatever its
// answer: a refusal (written to the log, or folded past decision-log-per-client), a cached
// answer, or an upstream's answer to a cache miss. Each used to cost one to seven: the
// denial's explanation and the QNAME copied into the record, the answer's addresses, the
// state of a query in flight upstream (its Forward, its copy of the packet, its entry in
// the ID map) and the deadline queue's blocks. Now a record's explanation is a literal it
// borrows, its QNAME and address buffers come back from the log's writer (or from the last
// folded record), and the forwarder reuses the state of answered queries.
//
// Its own executable: it replaces the global operator new, to count the allocations of the
// handler's thread only. The upstream is a thread with a blocking UDP socket on 127.0.0.1.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "../counting_new.hpp"
#include "../log_written.hpp"
#include "dns_builder.hpp"
#include "query_handler.hpp"

namespace vibepit::dns {
namespace {

using testing::g_allocations;
using testing::t_counting;
using namespace std::chrono_literals;

constexpr int kWarm = 300;  // past the folding budget of 100, and every spare used once
constexpr int kCounted = 300;

// Answers every query with its question and one A record of TTL 0 (never cached), until
// destroyed.
class FakeUpstream {
 public:
  FakeUpstream() {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("fake upstream: no socket on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    timeval tv{0, 100'000};  // so that it sees stop_ in time
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeUpstream() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  void serve() {
    std::uint8_t in[1500];
    while (!stop_) {
      sockaddr_in from{};
      socklen_t len = sizeof from;
      const ssize_t n = ::recvfrom(fd_, in, sizeof in, 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < static_cast<ssize_t>(kHeaderSize)) continue;
      std::size_t at = kHeaderSize;  // past the QNAME's labels, then QTYPE and QCLASS
      while (at < static_cast<std::size_t>(n) && in[at] != 0) at += 1 + in[at];
      at += 5;
      if (at > static_cast<std::size_t>(n)) continue;
      test::Msg m;
      m.raw(std::span<const std::uint8_t>(in, at));
      m.b[2] = 0x81;  // QR, RD
      m.b[3] = 0x80;  // RA, NOERROR
      for (std::size_t i = 4; i < kHeaderSize; ++i) m.b[i] = 0;
      m.b[5] = 1;  // QDCOUNT
      m.b[7] = 1;  // ANCOUNT
      m.ptr(kHeaderSize)
          .u16(qtype::A)
          .u16(kClassIN)
          .u32(0)
          .u16(4)
          .raw(test::addr_rdata("203.0.113.7"));
      ::sendto(fd_, m.b.data(), m.b.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }

  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Replies as the handler hands them to its transport; each one calls `on_reply`.
struct Recorder final : Replier {
  int replies = 0;
  int last_rcode = -1;
  std::function<void()> on_reply;
  void deliver(const ReplyTo&, std::span<const std::uint8_t> reply) override {
    ++replies;
    last_rcode = reply.size() >= kHeaderSize ? reply[3] & 0x0f : -1;
    if (on_reply) on_reply();
  }
  void begin_batch(int) override {}
  void flush_batch() override {}
};

class DnsAllocation : public ::testing::Test {
 protected:
  // The configuration's defaults but for the upstream and the folding budget: the
  // per-client rate limit (1 000 queries/s, a burst of 2 000) is on, as in production.
  void start(std::uint32_t per_client) {
    g_allocations = 0;  // counted per test
    cfg = config::parse_config(R"({"proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["127.0.0.1:)" +
                               std::to_string(upstream.port()) +
                               R"("], "decision-log-per-client": )" + std::to_string(per_client) +
                               "}")
              .dns;
    policy::RuleSet r;
    r.allow_dns = {"*.cached.test", "*.miss.test"};
    store.publish(std::get<0>(policy::compile_mutable(r)));
    handler = std::make_unique<QueryHandler>(io, cfg, store, producer, cache, sent);
    log.start();
  }

  ~DnsAllocation() override {
    handler.reset();
    log.stop();
  }

  // Queries for `names`, made before anything is counted.
  static std::vector<test::Bytes> queries(const std::vector<std::string>& names) {
    std::vector<test::Bytes> out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      out.push_back(test::make_query(
          test::QuerySpec{.name = names[i], .id = static_cast<std::uint16_t>(i), .edns = true}));
    }
    return out;
  }

  // A query from a Docker bridge client, whose reply comes now or later.
  void ask(const test::Bytes& pkt) { ASSERT_TRUE(handler->handle(pkt, client, 45678, ReplyTo{})); }

  // Waits (on the loop's thread) until the writer has taken every record pushed, so that
  // their buffers are back: what a busy server's writer does all along.
  void settle(std::uint64_t written) { testing::wait_written(log, written); }

  // Runs `body` on the loop, in one run() as the worker does (Asio recycles handler memory
  // per run()), with the counting on from query kWarm; at most 20 s.
  void run(const std::function<void()>& body) {
    asio::post(io, body);
    asio::steady_timer watchdog(io, 20s);
    watchdog.async_wait([this](const asio::error_code& ec) {
      if (!ec) io.stop();
    });
    io.run();
    t_counting = false;
  }

  void count_from(int i) {
    if (i == kWarm) t_counting = true;
  }

  // Each query answered at once (from the policy or the cache), one after another, with
  // the counting on from query kWarm; with `catch_up`, the writer catches up every 16.
  void ask_in_turn(const std::vector<test::Bytes>& pkts, bool catch_up) {
    run([&] {
      for (std::size_t i = 0; i < pkts.size(); ++i) {
        count_from(static_cast<int>(i));
        ask(pkts[i]);
        if (catch_up && i % 16 == 15) settle(i + 1);
      }
      io.stop();
    });
  }

  FakeUpstream upstream;
  asio::io_context io;
  config::DnsConfig cfg;
  policy::SnapshotStore store{nullptr};
  decision_log::DecisionLog log{"", 1 << 12};
  decision_log::DecisionLog::Producer& producer = log.make_producer();
  SharedCache cache{CacheLimits{}};
  Recorder sent;
  std::unique_ptr<QueryHandler> handler;
  asio::ip::address client = asio::ip::make_address("172.18.0.3");
};

// Names past std::string's 15 inline characters, as real ones are.
std::string denied(int i) {
  return "d" + std::to_string(100000 + i) + ".denied.test";
}
std::string missed(int i) {
  return "m" + std::to_string(100000 + i) + ".miss.test";
}

TEST_F(DnsAllocation, ADeniedQueryWrittenToTheLogAllocatesNothing) {
  start(0);  // every denial written
  std::vector<std::string> names;
  for (int i = 0; i < kWarm + kCounted; ++i) names.push_back(denied(i));
  const auto pkts = queries(names);
  ask_in_turn(pkts, true);
  EXPECT_EQ(sent.replies, kWarm + kCounted);
  EXPECT_EQ(sent.last_rcode, 5);  // REFUSED
  settle(kWarm + kCounted);
  EXPECT_EQ(log.written(), static_cast<std::uint64_t>(kWarm + kCounted));
  EXPECT_EQ(g_allocations.load(), 0)
      << "allocations on the I/O thread in " << kCounted << " denied queries, each written";
}

TEST_F(DnsAllocation, ADeniedQueryFoldedPastTheBudgetAllocatesNothing) {
  start(100);  // the default: past 100 denials of a client, the rest are folded
  std::vector<std::string> names;
  for (int i = 0; i < kWarm + kCounted; ++i) names.push_back(denied(i));
  const auto pkts = queries(names);
  ask_in_turn(pkts, false);
  EXPECT_EQ(sent.replies, kWarm + kCounted);
  settle(100);
  EXPECT_EQ(log.written(), 100u) << "the rest folded into a summary, not yet due";
  EXPECT_EQ(g_allocations.load(), 0)
      << "allocations on the I/O thread in " << kCounted << " denied queries, each folded";
}

// www.cached.test A 203.0.113.7, TTL 300, in the cache.
void plant(SharedCache& cache) {
  test::QuerySpec spec{.name = "www.cached.test"};
  auto pkt = test::make_query(spec);
  Query q;
  ASSERT_EQ(parse_query(pkt, q), WireError::none);
  auto up = test::response_to(spec, 1, 0, 0);
  up.rr_at(12, qtype::A, 300, test::addr_rdata("203.0.113.7"));
  ResponseInfo info;
  ASSERT_EQ(parse_response(up.b, q, info), WireError::none);
  cache.insert(q, up.b, info, Cache::clock::now());
}

// From an IPv4 and an IPv6 client: the per-client rate limit keys its buckets by address,
// where an IPv6 client's 16 bytes as a std::string key cost one allocation a query.
class CachedAnswer : public DnsAllocation, public ::testing::WithParamInterface<const char*> {};

TEST_P(CachedAnswer, AllocatesNothing) {
  client = asio::ip::make_address(GetParam());
  start(0);
  plant(cache);
  const auto pkts = queries(std::vector<std::string>(kWarm + kCounted, "www.cached.test"));
  ask_in_turn(pkts, true);
  EXPECT_EQ(sent.replies, kWarm + kCounted);
  EXPECT_EQ(sent.last_rcode, 0);
  EXPECT_EQ(g_allocations.load(), 0)
      << "allocations on the I/O thread in " << kCounted << " cache hits for " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Clients, CachedAnswer, ::testing::Values("172.18.0.3", "2001:db8:18::3"));

TEST_F(DnsAllocation, ACacheMissAnsweredUpstreamAllocatesNothing) {
  start(0);
  std::vector<std::string> names;
  for (int i = 0; i < kWarm + kCounted; ++i) names.push_back(missed(i));
  const auto pkts = queries(names);
  // One query in flight at a time: each reply asks the next name. Every 16 the writer is
  // let catch up.
  int next = 0;
  sent.on_reply = [&] {
    if (next == kWarm + kCounted) return io.stop();
    if (next % 16 == 0) settle(static_cast<std::uint64_t>(next));
    count_from(next);
    ask(pkts[static_cast<std::size_t>(next)]);
    ++next;
  };
  run([&] {
    ask(pkts[0]);
    next = 1;
  });
  EXPECT_EQ(sent.replies, kWarm + kCounted) << "the upstream answered every query";
  EXPECT_EQ(sent.last_rcode, 0);
  EXPECT_EQ(g_allocations.load(), 0)
      << "allocations on the I/O thread in " << kCounted << " cache misses answered upstream";
}

}  // namespace
}  // namespace vibepit::dns
