#include "vibepit/decision_log/decision_log.hpp"

#include "../allocated_bytes.hpp"
#include "decision_log_helpers.hpp"

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

namespace vibepit::decision_log {
namespace {

using test::sample;
using test::wait_written;

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

TEST(DecisionLog, AnInspectedRequestNamesItsPathAndTunnel) {
  auto r = sample();
  EXPECT_FALSE(nlohmann::json::parse(to_json_line(r)).contains("tunnel"));
  r.method = "GET";
  r.path = "/repos/acme/x";
  r.tunnel = 41;
  auto j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["path"], "/repos/acme/x");
  EXPECT_EQ(j["tunnel"], 41);
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

// Waits until the writer has parked, at most 10 s: a liveness bound, not a schedule.
bool wait_parked(const DecisionLog& log) {
  for (int i = 0; i < 10'000 && !log.writer_parked(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return log.writer_parked();
}

// An idle proxy costs no wake-ups: once the queues have stayed empty for a while the writer
// parks (it used to poll every 2 ms forever, 500 wake-ups a second), and a record pushed
// while it is parked still reaches the log. When it polls and when it parks is
// PollSchedule's (poll_schedule_test.cpp, on a virtual clock); this is the thread doing it.
TEST(DecisionLog, AnIdleWriterParksAndTheNextRecordWakesIt) {
  DecisionLog log("", 100);
  auto& p = log.make_producer();
  log.start();
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(wait_parked(log)) << "round " << round;
    const auto before = log.writer_wakeups();
    p.push(sample());
    wait_written(log, static_cast<std::uint64_t>(round));
    EXPECT_EQ(log.written(), static_cast<std::uint64_t>(round)) << "the push did not wake it";
    EXPECT_GT(log.writer_wakeups(), before);
  }
  log.stop();
}

// A busy producer's records are all written, and the writer parks when they stop.
TEST(DecisionLog, ABusyProducersRecordsAreWrittenAndTheWriterThenParks) {
  DecisionLog log("", 1000);
  auto& p = log.make_producer();
  log.start();
  constexpr int kMillis = 400, kPerMilli = 10;  // about 10 000 records a second
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kMillis; ++i) {
    for (int k = 0; k < kPerMilli; ++k) p.push(sample());
    std::this_thread::sleep_until(start + std::chrono::milliseconds(i + 1));
  }
  wait_written(log, kMillis * kPerMilli);
  EXPECT_EQ(log.written(), static_cast<std::uint64_t>(kMillis * kPerMilli));
  EXPECT_EQ(log.dropped(), 0u);
  EXPECT_TRUE(wait_parked(log)) << "the writer kept polling after the load stopped";
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

// stop() and reopen() wake a parked writer too: neither waits for a record. (A stop() that
// did not wake it would never return, and the test would time out.)
TEST(DecisionLog, StopAndReopenWakeAParkedWriter) {
  DecisionLog log("", 100);
  log.make_producer();
  log.start();
  ASSERT_TRUE(wait_parked(log));
  const auto before = log.writer_wakeups();
  log.reopen();
  for (int i = 0; i < 10'000 && log.writer_wakeups() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(log.writer_wakeups(), before);
  ASSERT_TRUE(wait_parked(log));
  log.stop();
  EXPECT_TRUE(log.stopped());
  EXPECT_FALSE(log.writer_parked());
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
}  // namespace vibepit::decision_log
