// What a record costs its I/O thread: its standard explanations are borrowed literals, and
// the buffers of its host, rule and addresses come back from the log's writer once it has
// formatted a record (RecordBuffers, DecisionLog::Producer::reuse_buffers), within bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "../log_written.hpp"
#include "vibepit/decision_log/decision_log.hpp"

namespace vibepit::decision_log {
namespace {

using namespace std::chrono_literals;

void wait_written(const DecisionLog& log, std::uint64_t n) {
  testing::wait_written(log, n);
  ASSERT_EQ(log.written(), n);
}

DecisionRecord dns_record(std::string host, std::size_t addrs) {
  DecisionRecord r;
  r.src = "dns";
  r.host = std::move(host);
  for (std::size_t i = 0; i < addrs; ++i) r.addrs.push_back(*policy::IpAddr::parse("203.0.113.7"));
  return r;
}

constexpr std::size_t kInline = std::string().capacity();

TEST(RecordText, ALiteralIsBorrowedAndOwnTextIsCopied) {
  static constexpr const char* kWhy = "name not in allow-dns";
  RecordText t;
  EXPECT_TRUE(t.empty());
  t.set_literal(kWhy);
  EXPECT_EQ(t.view().data(), kWhy) << "borrowed, not copied";
  EXPECT_EQ(t, "name not in allow-dns");
  std::string mine = "upstream: timeout";
  t = mine;
  EXPECT_NE(t.view().data(), mine.data()) << "own text is a copy";
  EXPECT_EQ(t, "upstream: timeout") << "and it replaces the literal";
  RecordText moved = std::move(t);
  EXPECT_EQ(moved, "upstream: timeout");
  t.set_literal("");
  EXPECT_TRUE(t.empty());
}

TEST(RecordText, ALiteralDetailIsWrittenAsText) {
  auto r = dns_record("d1.denied.test", 0);
  r.detail.set_literal("name not in allow-dns");
  EXPECT_NE(to_json_line(r).find(R"("detail":"name not in allow-dns")"), std::string::npos);
  r.detail.set_literal("");
  EXPECT_EQ(to_json_line(r).find("detail"), std::string::npos) << "an empty one is left out";
}

TEST(RecordBuffers, TheWritersBuffersComeBackEmptyWithTheirCapacity) {
  DecisionLog log("", 100);
  auto& p = log.make_producer(64);
  log.start();
  const std::string name(40, 'a');
  for (int i = 0; i < 10; ++i) p.push(dns_record(name, 3));
  wait_written(log, 10);
  log.stop();  // the writer has given back what it formatted
  for (int i = 0; i < 10; ++i) {
    DecisionRecord r;
    p.reuse_buffers(r);
    EXPECT_TRUE(r.host.empty());
    EXPECT_GE(r.host.capacity(), name.size()) << "record " << i;
    EXPECT_TRUE(r.addrs.empty());
    EXPECT_GE(r.addrs.capacity(), 3u) << "record " << i;
  }
  DecisionRecord none;
  p.reuse_buffers(none);
  EXPECT_EQ(none.host.capacity(), kInline) << "ten given back, ten taken";
  EXPECT_EQ(none.addrs.capacity(), 0u);
}

TEST(RecordBuffers, AtMostSoManyAreKeptAndNoneTooLargeOrInline) {
  DecisionLog log("", 1000);
  auto& p = log.make_producer(1024);
  log.start();
  const std::size_t n = DecisionLog::Producer::kSpares + 36;
  for (std::size_t i = 0; i < n; ++i) p.push(dns_record(std::string(40, 'a'), 0));
  p.push(dns_record(std::string(DecisionLog::Producer::kSpareTextMax + 1, 'b'), 0));
  p.push(dns_record("short.test", 0));  // inline: nothing to give back
  wait_written(log, n + 2);
  log.stop();
  std::size_t reused = 0;
  for (std::size_t i = 0; i < n + 2; ++i) {
    DecisionRecord r;
    p.reuse_buffers(r);
    EXPECT_LE(r.host.capacity(), DecisionLog::Producer::kSpareTextMax);
    if (r.host.capacity() > kInline) ++reused;
  }
  EXPECT_EQ(reused, DecisionLog::Producer::kSpares);
}

DecisionRecord proxy_record(std::string host, std::string rule, std::string addr) {
  DecisionRecord r;
  r.host = std::move(host);
  r.rule = std::move(rule);
  r.addr = std::move(addr);
  return r;
}

// A proxy record's long texts: a real host, the rule that matched it, an IPv6 upstream.
TEST(RecordBuffers, AProxyRecordsHostRuleAndAddressComeBack) {
  DecisionLog log("", 100);
  auto& p = log.make_producer(64);
  log.start();
  const std::string host = "registry.packages.example.test";
  const std::string rule = "*.packages.example.test:443";
  const std::string addr = "2001:db8:85a3::8a2e:370:7334";
  p.push(proxy_record(host, rule, addr));
  wait_written(log, 1);
  log.stop();
  DecisionRecord r;
  p.reuse_buffers(r);
  EXPECT_TRUE(r.host.empty() && r.rule.empty() && r.addr.empty());
  EXPECT_GE(r.host.capacity(), host.size());
  EXPECT_GE(r.rule.capacity(), rule.size());
  EXPECT_GE(r.addr.capacity(), addr.size());
}

TEST(RecordBuffers, TakeKeepsTheLargerAndGiveLeavesNone) {
  RecordBuffers b;
  EXPECT_TRUE(b.empty());
  auto small = proxy_record(std::string(20, 'h'), "", "");
  EXPECT_TRUE(b.take(small));
  EXPECT_FALSE(b.empty());
  auto large = proxy_record(std::string(100, 'h'), std::string(5, 'r'), "");
  EXPECT_TRUE(b.take(large));
  EXPECT_GE(b.host.capacity(), 100u) << "the larger host buffer is kept";
  EXPECT_GE(large.host.capacity(), 20u) << "and the smaller goes to the record instead";
  EXPECT_EQ(b.rule.capacity(), kInline) << "an inline rule has nothing to give";
  auto smaller = proxy_record(std::string(50, 'h'), "", "");
  EXPECT_FALSE(b.take(smaller)) << "nothing larger than what is held";
  auto huge = proxy_record(std::string(RecordBuffers::kTextMax + 1, 'h'), "", "");
  EXPECT_FALSE(b.take(huge)) << "nor past the bound";

  DecisionRecord fresh;
  b.give(fresh);
  EXPECT_TRUE(fresh.host.empty());
  EXPECT_GE(fresh.host.capacity(), 100u);
  EXPECT_TRUE(b.empty()) << "everything held went to the record";
}

}  // namespace
}  // namespace vibepit::decision_log
