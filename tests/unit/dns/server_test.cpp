// The DNS query path (QueryHandler) against a real snapshot store and the shared cache, with
// answers planted in the cache so that no upstream is needed: the policy is checked before
// the cache, and cached answers are judged by the rules in force when they are served.
#include <gtest/gtest.h>

#include <optional>

#include "dns_builder.hpp"
#include "query_handler.hpp"

namespace vibepit::dns {
namespace {

using test::addr_rdata;
using test::Bytes;
using test::QuerySpec;

config::DnsConfig config() {
  auto cfg = config::parse_config(R"({"proxy-listen": ["127.0.0.1:0"],
                                     "upstream-dns": ["127.0.0.1:9"],
                                     "dns-client-qps": 5, "dns-client-burst": 3})");
  return cfg.dns;
}

std::shared_ptr<policy::Snapshot> rules(std::vector<std::string> allow_dns,
                                        std::vector<std::string> block = {}) {
  policy::RuleSet r;
  r.allow_dns = std::move(allow_dns);
  r.block_cidr = std::move(block);
  return std::get<0>(policy::compile_mutable(r));
}

// Replies as the handler hands them to its transport.
struct Recorder final : Replier {
  std::vector<Bytes> replies;
  void deliver(const ReplyTo&, std::span<const std::uint8_t> reply) override {
    replies.emplace_back(reply.begin(), reply.end());
  }
  void begin_batch(int) override {}
  void flush_batch() override {}
};

struct Fixture : ::testing::Test {
  asio::io_context io;
  config::DnsConfig cfg = config();
  policy::SnapshotStore store{rules({"www.example.com"})};
  decision_log::DecisionLog log{"", 100};
  decision_log::DecisionLog::Producer& producer = log.make_producer();
  SharedCache cache{CacheLimits{}};
  Recorder sent;
  QueryHandler handler{io, cfg, store, producer, cache, sent};
  const asio::ip::address client = asio::ip::make_address("192.0.2.2");

  // Plant www.example.com A 203.0.113.7 (TTL 300) in the cache.
  void plant() {
    QuerySpec spec;
    auto pkt = test::make_query(spec);
    Query q;
    ASSERT_EQ(parse_query(pkt, q), WireError::none);
    auto up = test::response_to(spec, 1, 0, 0);
    up.rr_at(12, qtype::A, 300, addr_rdata("203.0.113.7"));
    ResponseInfo info;
    ASSERT_EQ(parse_response(up.b, q, info), WireError::none);
    cache.insert(q, up.b, info, Cache::clock::now());
  }

  // Send one query through the worker; the reply's rcode, or nullopt for no reply.
  std::optional<int> ask(const Bytes& pkt) {
    sent.replies.clear();
    bool answers = handler.handle(pkt, client, 5353, ReplyTo{});
    EXPECT_EQ(answers, !sent.replies.empty())
        << "a reply now, or none at all (no upstream in this test)";
    if (sent.replies.empty()) return std::nullopt;
    EXPECT_EQ(sent.replies.size(), 1u) << "one reply per query";
    const Bytes& reply = sent.replies.front();
    EXPECT_GE(reply.size(), kHeaderSize);
    EXPECT_EQ(test::get16(reply, 0), test::get16(pkt, 0));
    return reply[3] & 0x0f;
  }
};

TEST_F(Fixture, PolicyIsCheckedBeforeTheCache) {
  plant();
  auto query = test::make_query(QuerySpec{});
  EXPECT_EQ(ask(query), 0);  // NOERROR, from the cache
  // A snapshot without the rule: the cached answer must not be served any more.
  store.publish(rules({}));
  EXPECT_EQ(ask(query), 5);  // REFUSED
}

TEST_F(Fixture, CachedAnswersAreJudgedByTheCurrentRanges) {
  plant();
  auto query = test::make_query(QuerySpec{});
  EXPECT_EQ(ask(query), 0);
  store.publish(rules({"www.example.com"}, {"203.0.113.0/24"}));
  EXPECT_EQ(ask(query), 5);  // the cached address is now in a blocked range
}

TEST_F(Fixture, DeniedNamesAreAnsweredAtOnce) {
  EXPECT_EQ(ask(test::make_query(QuerySpec{.name = "other.example.com"})), 5);
}

TEST_F(Fixture, ResponsesAndRuntsGetNoReply) {
  auto response = test::make_query(QuerySpec{.flags = kFlagQR});
  EXPECT_EQ(ask(response), std::nullopt);
  EXPECT_EQ(ask(Bytes{1, 2, 3}), std::nullopt);
}

TEST_F(Fixture, ClientOverItsRateIsRefused) {
  plant();
  auto query = test::make_query(QuerySpec{});
  // burst 3: three answers, then REFUSED until tokens come back (5 per second).
  EXPECT_EQ(ask(query), 0);
  EXPECT_EQ(ask(query), 0);
  EXPECT_EQ(ask(query), 0);
  EXPECT_EQ(ask(query), 5);
}

TEST(RateLimiter, RefillsAtTheConfiguredRate) {
  RateLimiter limiter(10, 2);
  auto a = asio::ip::make_address("192.0.2.7");
  auto b = asio::ip::make_address("2001:db8::7");
  auto t = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  EXPECT_TRUE(limiter.allow(a, t));
  EXPECT_TRUE(limiter.allow(a, t));
  EXPECT_FALSE(limiter.allow(a, t));
  EXPECT_TRUE(limiter.allow(b, t));                                   // buckets are per client
  EXPECT_TRUE(limiter.allow(a, t + std::chrono::milliseconds(100)));  // one token back
  EXPECT_FALSE(limiter.allow(a, t + std::chrono::milliseconds(100)));
}

TEST(RateLimiter, ZeroMeansNoLimit) {
  RateLimiter limiter(0, 1);
  auto a = asio::ip::make_address("192.0.2.7");
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.allow(a, t));
}

}  // namespace
}  // namespace vibepit::dns
