#include "vibepit/proxy/decision_log.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace vibepit::proxy {
namespace {

DecisionRecord sample() {
  DecisionRecord r;
  r.id = 7;
  r.ts_us = 1'700'000'000'123'456;
  r.client = "127.0.0.1:5000";
  r.method = "CONNECT";
  r.host = "example.com";
  r.port = 443;
  r.verdict = policy::Verdict::allow;
  r.reason = policy::Reason::allowlisted;
  r.rule = "example.com:443";
  r.addr = "203.0.113.7";
  r.gen = 3;
  return r;
}

TEST(DecisionLog, DecisionLineHasTheContractFields) {
  auto line = to_json_line(sample());
  ASSERT_EQ(line.back(), '\n');
  auto j = nlohmann::json::parse(line);
  for (const char* key :
       {"id", "ts", "src", "client", "method", "host", "port", "verdict", "reason", "rule",
        "addr", "gen"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["src"], "proxy");
  EXPECT_EQ(j["event"], "decision");
  EXPECT_EQ(j["verdict"], "allow");
  EXPECT_EQ(j["ts"], "2023-11-14T22:13:20.123456Z");
  EXPECT_FALSE(j.contains("bytes_up"));  // only on close
}

TEST(DecisionLog, CloseLineAddsBytesAndDuration) {
  auto r = sample();
  r.close = true;
  r.bytes_up = 10;
  r.bytes_down = 20;
  r.ms = 30;
  auto j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["event"], "close");
  EXPECT_EQ(j["bytes_up"], 10);
  EXPECT_EQ(j["bytes_down"], 20);
  EXPECT_EQ(j["ms"], 30);
}

TEST(DecisionLog, InvalidUtf8FromTheWireDoesNotThrow) {
  auto r = sample();
  r.host = "bad\xff\xfehost";
  EXPECT_NO_THROW(nlohmann::json::parse(to_json_line(r)));
}

void wait_written(const DecisionLog& log, std::uint64_t n) {
  for (int i = 0; i < 2000 && log.written() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(DecisionLog, RingKeepsTheNewestAndReportsLoss) {
  DecisionLog log("", 4);
  auto& p = log.make_producer(64);
  log.start();
  for (int i = 0; i < 10; ++i) {
    auto r = sample();
    r.id = p.next_id();
    p.push(std::move(r));
  }
  wait_written(log, 10);
  std::uint64_t lost = 0;
  auto all = log.since(0, 100, lost);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(lost, 6u);  // records 1..6 fell out of a ring of 4
  EXPECT_EQ(all.front().seq, 7u);
  auto tail = log.since(8, 100, lost);
  EXPECT_EQ(lost, 0u);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].seq, 9u);
  auto limited = log.since(0, 1, lost);
  EXPECT_EQ(limited.size(), 1u);
  log.stop();
}

TEST(DecisionLog, FullQueueDropsAndCountsInsteadOfBlocking) {
  DecisionLog log("", 100);
  auto& p = log.make_producer(4);  // writer not started: nothing drains
  for (int i = 0; i < 10; ++i) p.push(sample());
  EXPECT_EQ(p.dropped(), 6u);
  log.start();
  wait_written(log, 4);
  log.stop();
  EXPECT_EQ(log.written(), 4u);
}

TEST(DecisionLog, IdsAreUniqueAcrossProducers) {
  DecisionLog log("", 10);
  auto& a = log.make_producer();
  auto& b = log.make_producer();
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    EXPECT_TRUE(seen.insert(a.next_id()).second);
    EXPECT_TRUE(seen.insert(b.next_id()).second);
  }
}

TEST(DecisionLog, ProducersOnManyThreadsLoseNothingWhenThereIsRoom) {
  DecisionLog log("", 100000);
  std::vector<DecisionLog::Producer*> producers;
  for (int i = 0; i < 4; ++i) producers.push_back(&log.make_producer(1 << 12));
  log.start();
  std::vector<std::thread> threads;
  for (auto* p : producers) {
    threads.emplace_back([p] {
      for (int i = 0; i < 2000; ++i) {
        auto r = sample();
        r.id = p->next_id();
        p->push(std::move(r));
        if (i % 512 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads) t.join();
  wait_written(log, 8000);
  log.stop();
  std::uint64_t dropped = 0;
  for (auto* p : producers) dropped += p->dropped();
  EXPECT_EQ(dropped, 0u);  // each queue holds more than its producer ever pushes
  EXPECT_EQ(log.written(), 8000u);
}

}  // namespace
}  // namespace vibepit::proxy
