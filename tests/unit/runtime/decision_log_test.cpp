#include "vibepit/runtime/decision_log.hpp"

#include "../allocated_bytes.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace vibepit::runtime {
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
  for (const char* key : {"id", "ts", "src", "client", "method", "host", "port", "verdict",
                          "reason", "rule", "addr", "gen"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["src"], "proxy");
  EXPECT_EQ(j["event"], "decision");
  EXPECT_EQ(j["verdict"], "allow");
  EXPECT_EQ(j["ts"], "2023-11-14T22:13:20.123456Z");
  EXPECT_FALSE(j.contains("bytes_up"));  // only on close
  EXPECT_EQ(j["mode"], "enforce");
  EXPECT_FALSE(j.contains("would_deny"));  // only when audit mode let it through
}

TEST(DecisionLog, AuditRecordsCarryTheModeAndWouldDeny) {
  auto r = sample();
  r.mode = policy::Mode::audit;
  r.reason = policy::Reason::not_allowlisted;
  r.rule.clear();
  r.would_deny = true;
  auto j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["mode"], "audit");
  EXPECT_EQ(j["verdict"], "allow");
  EXPECT_EQ(j["reason"], "not_allowlisted");
  EXPECT_EQ(j["would_deny"], true);
  r.src = "dns";
  r.qtype = 1;
  j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["mode"], "audit");
  EXPECT_EQ(j["would_deny"], true);
  // Denied at a later stage (the name resolved into a blocked range): a plain denial.
  r.verdict = policy::Verdict::deny;
  r.reason = policy::Reason::blocked_address;
  j = nlohmann::json::parse(to_json_line(r));
  EXPECT_FALSE(j.contains("would_deny"));
}

TEST(DecisionLog, DnsLineHasTheDnsFields) {
  DecisionRecord r;
  r.id = 9;
  r.src = "dns";
  r.client = "127.0.0.1:5353";
  r.transport = "udp";
  r.host = "rebind.test";
  r.qtype = 28;
  r.rcode = "REFUSED";
  r.reason = policy::Reason::blocked_address;
  r.range = "::1/128";
  r.addrs = {*policy::IpAddr::parse("::1"), *policy::IpAddr::parse("198.51.100.10")};
  r.cached = true;
  r.gen = 4;
  auto j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["src"], "dns");
  EXPECT_EQ(j["event"], "decision");
  EXPECT_EQ(j["qname"], "rebind.test");
  EXPECT_EQ(j["qtype"], "AAAA");
  EXPECT_EQ(j["rcode"], "REFUSED");
  EXPECT_EQ(j["addrs"], nlohmann::json::array({"::1", "198.51.100.10"}));
  EXPECT_EQ(j["cached"], true);
  EXPECT_EQ(j["verdict"], "deny");
  EXPECT_EQ(j["reason"], "blocked_address");
  EXPECT_EQ(j["range"], "::1/128");
  EXPECT_EQ(j["transport"], "udp");
  EXPECT_EQ(j["gen"], 4);
  EXPECT_FALSE(j.contains("method"));  // proxy fields stay out of DNS records
}

// Both I/O paths (DNS queries, proxy sessions) leave `client` empty and pass the address.
TEST(DecisionLog, TheClientAddressIsFormattedByTheWriter) {
  for (const char* src : {"dns", "proxy"}) {
    DecisionRecord r = sample();
    r.src = src;
    r.qtype = 1;
    r.client.clear();
    r.client_ip = *policy::IpAddr::parse("2001:db8::5");
    r.client_port = 5300;
    EXPECT_EQ(nlohmann::json::parse(to_json_line(r))["client"], "[2001:db8::5]:5300") << src;
    r.client_ip = *policy::IpAddr::parse("192.0.2.2");
    EXPECT_EQ(nlohmann::json::parse(to_json_line(r))["client"], "192.0.2.2:5300") << src;
    r.client = "198.51.100.1:7";  // text, when a record carries it, wins
    EXPECT_EQ(nlohmann::json::parse(to_json_line(r))["client"], "198.51.100.1:7") << src;
  }
}

// The writer makes room for each field's longest form before writing it (a control byte
// is six bytes escaped): fields at their longest, one after another, are all written whole.
TEST(DecisionLog, FieldsAtTheirLongestAreWrittenWhole) {
  const std::string controls(3000, '\x01');  // each becomes \u0001
  const std::string invalid(3000, '\xff');   // each becomes U+FFFD, three bytes
  const auto widest = *policy::IpAddr::parse("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
  for (const char* src : {"dns", "proxy"}) {
    DecisionRecord r = sample();
    r.src = src;
    r.client.clear();
    r.client_ip = widest;
    r.client_port = 65535;
    r.method = controls;
    r.host = controls;
    r.rule = invalid;
    r.range = controls;
    r.addr = controls + invalid;
    r.detail = controls;
    r.addrs.assign(16, widest);
    r.totals = true;  // the proxy record carries its byte counts
    r.id = r.gen = r.count = r.bytes_up = r.bytes_down = r.ms = UINT64_MAX;
    std::string out = "a line before\n";
    append_json_line(out, r);
    ASSERT_EQ(out.substr(0, 14), "a line before\n");
    const auto j = nlohmann::json::parse(out.substr(14));
    EXPECT_EQ(j["client"], "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535") << src;
    EXPECT_EQ(j[std::string_view(src) == "dns" ? "qname" : "host"], controls) << src;
    EXPECT_EQ(j["range"], controls) << src;
    EXPECT_EQ(j["detail"], controls) << src;
    EXPECT_EQ(j["gen"], UINT64_MAX) << src;
    EXPECT_EQ(j["count"], UINT64_MAX) << src;
    EXPECT_EQ(out.back(), '\n');
    if (std::string_view(src) == "dns") {
      EXPECT_EQ(j["addrs"].size(), 16U);
      EXPECT_EQ(j["addrs"][15], "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    } else {
      EXPECT_EQ(j["method"], controls);
      EXPECT_EQ(j["bytes_down"], UINT64_MAX);
      std::string replaced;
      for (int i = 0; i < 3000; ++i) replaced += "\xef\xbf\xbd";
      EXPECT_EQ(j["rule"], replaced);
      EXPECT_EQ(j["addr"], controls + replaced);
    }
  }
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

struct Escape {
  std::string host;      // as it came from the wire
  std::string expected;  // as a JSON parser reads it back
};

class DecisionLogEscaping : public ::testing::TestWithParam<Escape> {};

TEST_P(DecisionLogEscaping, EveryLineIsValidJson) {
  auto r = sample();
  r.host = GetParam().host;
  auto line = to_json_line(r);
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);  // one record, one line
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
  EXPECT_EQ(j["host"], GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, DecisionLogEscaping,
    ::testing::Values(
        Escape{"plain.example", "plain.example"},                      // nothing to escape
        Escape{"q\"uote\\back", "q\"uote\\back"},                      // JSON metacharacters
        Escape{"line\nbreak\ttab\x01", "line\nbreak\ttab\x01"},        // control bytes as \\u00XX
        Escape{"caf\xc3\xa9", "caf\xc3\xa9"},                          // valid UTF-8 kept
        Escape{"bad\xff\xfehost", "bad\xef\xbf\xbd\xef\xbf\xbdhost"},  // invalid bytes -> U+FFFD
        Escape{"trunc\xe2\x82", "trunc\xef\xbf\xbd\xef\xbf\xbd"},      // cut sequence
        Escape{"over\xc0\xaf", "over\xef\xbf\xbd\xef\xbf\xbd"},        // overlong '/'
        Escape{"surr\xed\xa0\x80",
               "surr\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}));  // UTF-16 surrogate

TEST(DecisionLog, CompletedRequestRecordCarriesTotals) {
  auto r = sample();
  r.totals = true;
  r.bytes_up = 5;
  auto j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["event"], "decision");
  EXPECT_EQ(j["bytes_up"], 5);
  EXPECT_TRUE(j.contains("ms"));
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

// Long enough for the writer to give up polling and sleep.
constexpr std::chrono::milliseconds kSettle{250};
static_assert((DecisionLog::kParkAfter + DecisionLog::kPollMax) * 2 < kSettle);

// An idle proxy costs no wake-ups: once the queues have stayed empty for a while the
// writer sleeps (it used to poll every 2 ms forever, 500 wake-ups a second), and a record
// pushed while it sleeps still reaches the log at once.
TEST(DecisionLog, AnIdleWriterSleepsAndTheNextRecordWakesIt) {
  DecisionLog log("", 100);
  auto& p = log.make_producer();
  log.start();
  const auto settle = kSettle;
  std::this_thread::sleep_for(settle);
  const auto before = log.writer_wakeups();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(log.writer_wakeups(), before) << "the writer kept polling an idle log";

  for (int round = 1; round <= 3; ++round) {
    const auto pushed_at = std::chrono::steady_clock::now();
    p.push(sample());
    wait_written(log, static_cast<std::uint64_t>(round));
    EXPECT_EQ(log.written(), static_cast<std::uint64_t>(round));
    EXPECT_LT(std::chrono::steady_clock::now() - pushed_at, std::chrono::milliseconds(500));
    std::this_thread::sleep_for(settle);  // asleep again before the next round
  }
  log.stop();
}

// A trickle of records (one a millisecond, as a lightly used proxy makes) costs a wake-up per
// poll, not one per record or per 2 ms: the writer takes what came in each interval in one go.
TEST(DecisionLog, ATrickleOfRecordsWakesTheWriterOncePerPoll) {
  DecisionLog log("", 1000);
  auto& p = log.make_producer();
  log.start();
  std::this_thread::sleep_for(kSettle);  // asleep: the trickle starts from a sleeping writer
  const auto before = log.writer_wakeups();
  constexpr int kRecords = 400;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRecords; ++i) {
    p.push(sample());
    std::this_thread::sleep_until(start + std::chrono::milliseconds(i + 1));
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const auto wakeups = log.writer_wakeups() - before;
  wait_written(log, kRecords);
  EXPECT_EQ(log.written(), static_cast<std::uint64_t>(kRecords));
  // One wake per poll, the first from the long sleep, and one spare for a pause of the
  // pushing thread long enough to send the writer to sleep: at 20 records a poll each poll
  // sleeps at least kPollMax (sleep_for only ever overshoots), however slowly the writer runs.
  // (Counting passes instead, a writer slowed by TSan made three in one poll: one that
  // wrote, one for the records pushed meanwhile, one that found the queue empty.)
  const auto polls = elapsed / DecisionLog::kPollMax + 1;
  EXPECT_LE(wakeups, static_cast<std::uint64_t>(polls + 2))
      << "over " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms";
  EXPECT_LT(wakeups, static_cast<std::uint64_t>(kRecords / 4)) << "the writer woke per record";
  log.stop();
}

// The poll interval follows the rate: at a steady rate it settles on an interval (kPollMax /
// 2^k, no shorter than kPollMin) whose polls find half a batch to a batch of records, so
// that the writer's stretch of work on a shared core stays short however busy the proxy.
TEST(DecisionLog, ThePollIntervalSettlesWhereAPollFindsUpToABatch) {
  using us = std::chrono::microseconds;
  constexpr std::size_t kBatch = DecisionLog::kPollBatch;
  // The interval after 20 polls from the longest, each finding found(interval) records.
  const auto settle = [](auto found) {
    us interval = DecisionLog::kPollMax;
    for (int poll = 0; poll < 20; ++poll) {
      interval = DecisionLog::next_poll(interval, found(interval));
    }
    return interval;
  };
  for (int per_4ms = 0; per_4ms <= 2000; ++per_4ms) {  // 0 to 500 records a millisecond
    const auto found = [&](us interval) {
      return static_cast<std::size_t>(per_4ms * interval.count() / 4000);
    };
    const us interval = settle(found);
    const std::string rate = std::to_string(per_4ms / 4.0) + " a ms";
    EXPECT_EQ(DecisionLog::next_poll(interval, found(interval)), interval) << rate << ": unsettled";
    if (interval > DecisionLog::kPollMin) {
      EXPECT_LE(found(interval), kBatch) << rate;
    }
    if (interval < DecisionLog::kPollMax) {
      EXPECT_GE(found(interval), kBatch / 2) << rate;
    }
  }
  const auto settled = [&](std::size_t per_ms) {
    return settle([per_ms](us interval) { return per_ms * interval.count() / 1000; });
  };
  EXPECT_EQ(settled(0), DecisionLog::kPollMax);    // nothing comes: the longest
  EXPECT_EQ(settled(1), DecisionLog::kPollMax);    // a trickle: 20 records a poll
  EXPECT_EQ(settled(4), us{5'000});                // 4 000 a second: 20 a poll
  EXPECT_EQ(settled(10), us{2'500});               // 10 000 a second: 25 a poll
  EXPECT_EQ(settled(100), DecisionLog::kPollMin);  // more than kPollMin keeps to a batch
  EXPECT_EQ(DecisionLog::kPollMin, us{2'500});     // at most 400 wake-ups a second
}

// A busy producer shortens the writer's polls; when it stops, the writer goes back to the
// longest interval and then to sleep.
TEST(DecisionLog, ABusyProducerShortensThePollsAndTheWriterSleepsWhenItStops) {
  DecisionLog log("", 1000);
  auto& p = log.make_producer();
  log.start();
  std::this_thread::sleep_for(kSettle);
  auto before = log.writer_wakeups();
  constexpr int kMillis = 400, kPerMilli = 10;  // 10 000 records a second
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kMillis; ++i) {
    for (int k = 0; k < kPerMilli; ++k) p.push(sample());
    std::this_thread::sleep_until(start + std::chrono::milliseconds(i + 1));
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const auto busy = log.writer_wakeups() - before;
  wait_written(log, kMillis * kPerMilli);
  EXPECT_EQ(log.written(), static_cast<std::uint64_t>(kMillis * kPerMilli));
  // Polling every kPollMax would wake 20 times; settled at 2.5 ms (kPollMin), about 160.
  EXPECT_GT(busy, static_cast<std::uint64_t>(3 * (elapsed / DecisionLog::kPollMax)))
      << "over " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms";
  EXPECT_LE(busy, static_cast<std::uint64_t>(elapsed / DecisionLog::kPollMin + 2));
  std::this_thread::sleep_for(kSettle);
  before = log.writer_wakeups();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(log.writer_wakeups(), before) << "the writer kept polling after the load stopped";
  log.stop();
}

// The records are pushed before the writer starts, so it finds them all in one pass.
std::uint64_t yields_taking(std::size_t records) {
  DecisionLog log("", records);
  auto& p = log.make_producer(records);
  for (std::size_t i = 0; i < records; ++i) p.push(sample());
  log.start();
  wait_written(log, records);
  log.stop();
  EXPECT_EQ(log.written(), records);
  EXPECT_EQ(log.dropped(), 0u);
  return log.writer_yields();
}

// While it keeps up, the writer steps aside after every kYieldEvery records, so that an I/O
// thread woken on its core meanwhile waits a few records, not the whole stretch.
TEST(DecisionLog, AWriterThatKeepsUpStepsAsideBetweenRecords) {
  constexpr std::size_t kRecords = DecisionLog::kPollBatch;
  EXPECT_EQ(yields_taking(kRecords), kRecords / DecisionLog::kYieldEvery);
}

// Behind (more than kPollBatch records waiting), it does not: stepping aside for a busy core
// would leave it further behind until the queues fill and drop records. It starts again
// once no more than kPollBatch wait.
TEST(DecisionLog, AWriterThatIsBehindDoesNotStepAsideUntilItCatchesUp) {
  constexpr std::size_t kRecords = 1000;
  EXPECT_EQ(yields_taking(kRecords), DecisionLog::kPollBatch / DecisionLog::kYieldEvery + 1);
}

// stop() and reopen() wake a sleeping writer too: neither waits for a record.
TEST(DecisionLog, StopAndReopenWakeASleepingWriter) {
  DecisionLog log("", 100);
  log.make_producer();
  log.start();
  std::this_thread::sleep_for(kSettle);
  auto before = log.writer_wakeups();
  log.reopen();
  for (int i = 0; i < 500 && log.writer_wakeups() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(log.writer_wakeups(), before);
  std::this_thread::sleep_for(kSettle);
  const auto started = std::chrono::steady_clock::now();
  log.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(500));
}

using vibepit::testing::allocated_bytes;

// A drained queue holds no heap memory: its slots are empty records, not the strings of
// records long written. (Moved out by assignment, each of the 16 384 slots kept the buffers
// of the writer's previous record, several MiB for each I/O thread of the proxy.)
TEST(DecisionLog, ADrainedQueueKeepsNoStringBuffers) {
  constexpr std::size_t kSlots = 1 << 14;
  DecisionLog log("", 1);
  auto& p = log.make_producer(kSlots);
  log.start();
  auto record = [] {
    auto r = sample();
    r.client = "198.51.100.200:54321 (a client name longer than any short string)";
    r.host = "a-host-name-that-no-short-string-optimisation-can-hold.example";
    r.rule = "*.a-rule-long-enough-to-need-the-heap.example:443";
    r.detail = "a detail that is long enough to be allocated on the heap";
    return r;
  };
  // The writer's own buffers (a full batch of lines) are allocated once, before the baseline.
  std::uint64_t pushed = 0;
  for (std::size_t i = 0; i < kSlots / 2; ++i, ++pushed) p.push(record());
  wait_written(log, pushed);
  const std::size_t before = allocated_bytes();
  for (int round = 0; round < 4; ++round) {  // every slot is used twice
    for (std::size_t i = 0; i < kSlots / 2; ++i, ++pushed) p.push(record());
    wait_written(log, pushed);
  }
  ASSERT_EQ(log.written(), pushed);
  ASSERT_EQ(p.dropped(), 0u);
  const std::size_t after = allocated_bytes();
  log.stop();
  // 4 heap strings in each of 16 384 slots would be about 5 MiB; 64 KiB allows for the
  // allocator's own bookkeeping.
  EXPECT_LT(after, before + 64 * 1024) << "before " << before << ", after " << after;
}

// The ring's memory is what its budget allows, not what its lines happen to be: a mix of
// records whose lines grow by a few bytes (a generation or an id gaining a digit) leaves it
// where it was. (One heap string per line, each reserved at 320 bytes, doubled to 640 when
// a line passed 320: a soak's heap rose by 1 MiB the moment the generation reached 1 000.)
TEST(DecisionLog, TheRingsMemoryDoesNotFollowTheLengthOfItsLines) {
  constexpr std::size_t kRing = 10'000;
  DecisionLog log("", kRing);
  auto& p = log.make_producer(1 << 14);
  log.start();
  auto record = [](std::size_t line_size) {
    auto r = sample();
    r.detail = "x";
    r.detail = std::string(1 + line_size - to_json_line(r).size(), 'x');
    return r;
  };
  std::uint64_t pushed = 0;
  auto push = [&](std::size_t line_size, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i, ++pushed) {
      p.push(record(line_size));
      if (i % 4096 == 4095) wait_written(log, pushed + 1);
    }
    wait_written(log, pushed);
  };
  push(310, 2 * kRing);  // a full ring of 310-byte lines
  const std::size_t before = allocated_bytes();
  push(330, 2 * kRing);  // then a full ring of 330-byte lines
  const std::size_t after = allocated_bytes();
  ASSERT_EQ(log.written(), pushed);
  ASSERT_EQ(p.dropped(), 0u);
  std::uint64_t lost = 0;
  EXPECT_EQ(log.since(0, 2 * kRing, lost).size(), kRing);
  log.stop();
  EXPECT_LT(after, before + 64 * 1024) << "before " << before << ", after " << after;
}

}  // namespace
}  // namespace vibepit::runtime

namespace vibepit::runtime {
namespace {

// The file is rotated before the line that would take it past max_bytes; PATH.1 is the
// newest old file, PATH.<keep> the oldest, and nothing older is kept.
TEST(DecisionLog, RotatesPastMaxBytesKeepingTheNewestFiles) {
  char dir_template[] = "/tmp/vibepit-rotate-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  const std::size_t line = to_json_line(sample()).size();
  {
    DecisionLog log(path, 10, LogRotation{10 * line, 2});
    auto& p = log.make_producer(1 << 10);
    log.start();
    for (int i = 0; i < 45; ++i) p.push(sample());  // ids 0: every line is the same size
    log.stop();
    EXPECT_EQ(log.written(), 45u);
    EXPECT_EQ(log.rotations(), 4u);  // 45 lines, 10 a file: 4 full files, then 5 lines
  }
  auto lines = [](const std::string& f) {
    std::ifstream in(f);
    std::size_t n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  };
  EXPECT_EQ(lines(path), 5u);
  EXPECT_EQ(lines(path + ".1"), 10u);
  EXPECT_EQ(lines(path + ".2"), 10u);
  EXPECT_FALSE(std::filesystem::exists(path + ".3"));
  // Reopened with the file at 5 lines: the count starts from its size.
  {
    DecisionLog log(path, 10, LogRotation{10 * line, 2});
    auto& p = log.make_producer(1 << 10);
    log.start();
    for (int i = 0; i < 6; ++i) p.push(sample());
    log.stop();
    EXPECT_EQ(log.rotations(), 1u);
  }
  EXPECT_EQ(lines(path), 1u);
  EXPECT_EQ(lines(path + ".1"), 10u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vibepit::runtime

namespace vibepit::runtime {
namespace {

std::size_t count_lines(const std::string& f) {
  std::ifstream in(f);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

// cachestat(2) (Linux 6.5): how many of a file's pages are cached, dirty, under write-back.
// Debian 12's headers predate it, hence the numbers here.
struct CacheStatRange {
  std::uint64_t off, len;
};
struct CacheStat {
  std::uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
constexpr long kSysCachestat = 451;  // new system calls are numbered alike on every architecture

// The writer starts the disk write of what it has written a MiB at a time, instead of leaving
// it all dirty for the kernel to flush in one go 30 s later: once the writer has stopped, at
// most about a MiB of the file may still wait. Without it, all 8 MiB do.
TEST(DecisionLog, WrittenRecordsAreHandedToTheDiskAsTheyGo) {
  char dir_template[] = "/tmp/vibepit-writeback-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << dir << " is in memory: there is no disk to write back to";
  }
  const std::uint64_t target = 8u << 20;
  const std::size_t line = to_json_line(sample()).size();
  {
    DecisionLog log(path, 10);
    auto& p = log.make_producer(1 << 14);
    log.start();
    std::uint64_t pushed = 0;
    while (pushed * line < target) {
      for (int i = 0; i < 4096; ++i) p.push(sample());
      pushed += 4096;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (log.written() < pushed && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(log.written(), pushed);
    }
    log.stop();
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  CacheStatRange range{0, 0};  // the whole file
  CacheStat cs{};
  const long rc = ::syscall(kSysCachestat, fd, &range, &cs, 0);
  const int err = errno;
  ::close(fd);
  std::filesystem::remove_all(dir);
  if (rc != 0 && err == ENOSYS) GTEST_SKIP() << "this kernel has no cachestat(2) (Linux 6.5)";
  ASSERT_EQ(rc, 0) << std::strerror(err);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_GE(cs.nr_cache * page, target / 2) << "the file is not in the page cache at all";
  EXPECT_LE(cs.nr_dirty * page, DecisionLog::kWritebackChunk + (256u << 10))
      << cs.nr_dirty << " pages of " << cs.nr_cache << " still dirty";
}

// After an outside rotation (the file renamed away), reopen() starts PATH anew.
TEST(DecisionLog, ReopenStartsThePathAnew) {
  char dir_template[] = "/tmp/vibepit-reopen-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  DecisionLog log(path, 10);
  auto& p = log.make_producer(64);
  log.start();
  for (int i = 0; i < 3; ++i) p.push(sample());
  wait_written(log, 3);
  std::filesystem::rename(path, path + ".old");
  log.reopen();
  for (int i = 0; i < 2; ++i) p.push(sample());
  log.stop();
  EXPECT_EQ(count_lines(path + ".old"), 3u);
  EXPECT_EQ(count_lines(path), 2u);
  EXPECT_EQ(log.unwritten(), 0u);
  std::filesystem::remove_all(dir);
}

// A file that takes nothing (a full disk) costs the records their file copy, counted, and
// nothing else: they are still in the ring.
TEST(DecisionLog, WhatAFullDiskRefusesIsCountedNotLost) {
  DecisionLog log("/dev/full", 100);
  auto& p = log.make_producer(64);
  log.start();
  for (int i = 0; i < 7; ++i) p.push(sample());
  log.stop();
  EXPECT_EQ(log.written(), 7u);
  EXPECT_EQ(log.unwritten(), 7u);
  std::uint64_t lost = 0;
  EXPECT_EQ(log.since(0, 100, lost).size(), 7u);
}

}  // namespace
}  // namespace vibepit::runtime
