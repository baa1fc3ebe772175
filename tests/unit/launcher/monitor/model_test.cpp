// vibepit monitor's model: rows per destination from the decision stream, the held
// requests, the selection that follows the newest held row until the user moves it, and
// the filter.
#include "vibepit/launcher/monitor/model.hpp"

#include <gtest/gtest.h>

namespace vibepit::launcher::monitor {
namespace {

std::string proxy(std::uint64_t id, const char* event, const char* method, const char* host,
                  int port, const char* verdict, const char* ts = "2026-12-06T10:00:00.000000Z",
                  const char* extra = "") {
  char buf[768];
  std::snprintf(
      buf, sizeof buf,
      R"({"seq":%llu,"id":%llu,"ts":"%s","src":"proxy","event":"%s","client":"172.31.0.3:1",)"
      R"("method":"%s","host":"%s","port":%d,"verdict":"%s","reason":"%s","rule":"%s",)"
      R"("gen":3,"mode":"enforce"%s})",
      static_cast<unsigned long long>(id), static_cast<unsigned long long>(id), ts, event, method,
      host, port, verdict, std::string(verdict) == "allow" ? "allowlisted" : "not_allowlisted",
      std::string(verdict) == "allow" ? "ok.test:443" : "", extra);
  return buf;
}

TEST(MonitorModel, OneRowPerDestinationWithCountsAndTheNewestVerdict) {
  Model m;
  EXPECT_TRUE(m.on_line(proxy(1, "decision", "CONNECT", "a.test", 443, "deny")));
  EXPECT_TRUE(m.on_line(
      proxy(2, "decision", "CONNECT", "a.test", 443, "deny", "2026-12-06T10:00:05.000000Z")));
  EXPECT_TRUE(m.on_line(proxy(3, "decision", "GET", "a.test", 80, "deny")));
  EXPECT_TRUE(m.on_line(proxy(4, "close", "CONNECT", "a.test", 443, "allow")));  // no count
  EXPECT_TRUE(m.on_line(R"({"seq":5,"id":5,"ts":"2026-12-06T10:00:01.000000Z","src":"dns",)"
                        R"("event":"decision","qname":"b.test","qtype":"A","verdict":"deny",)"
                        R"("reason":"not_allowlisted","rule":"","count":7})"));
  EXPECT_TRUE(m.on_line("not json"));
  EXPECT_TRUE(m.on_line(""));
  const auto rows = m.visible();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]->key, (Key{Proto::connect, "a.test", 443}));  // newest first
  EXPECT_EQ(rows[0]->count, 2u);
  EXPECT_EQ(rows[1]->key, (Key{Proto::dns, "b.test", 0}));
  EXPECT_EQ(rows[1]->count, 7u);  // a summary counts for what it stands for
  EXPECT_EQ(rows[2]->key, (Key{Proto::http, "a.test", 80}));
  EXPECT_EQ(m.denied(), 10u);
  EXPECT_EQ(m.status().generation, 3u);
  EXPECT_EQ(m.status().mode, "enforce");
}

TEST(MonitorModel, TheEndOfTheFeedEndsTheSession) {
  Model m;
  EXPECT_TRUE(m.on_line(R"({"end":3})"));  // found by fuzz_monitor: not the end, and no throw
  EXPECT_TRUE(m.on_line(R"({"end":false})"));
  EXPECT_FALSE(m.on_line(R"({"end":true,"last":10,"dropped":0,"unwritten":0})"));
}

TEST(MonitorModel, AllowedRowsAreHiddenUntilShownAndTheFilterMatchesHosts) {
  Model m;
  m.on_line(proxy(1, "decision", "CONNECT", "ok.test", 443, "allow"));
  m.on_line(proxy(2, "decision", "CONNECT", "no.test", 443, "deny"));
  ASSERT_EQ(m.visible().size(), 1u);
  m.toggle_allowed();
  EXPECT_EQ(m.visible().size(), 2u);
  m.set_filter("ok.");
  ASSERT_EQ(m.visible().size(), 1u);
  EXPECT_EQ(m.visible()[0]->key.host, "ok.test");
  m.set_filter("nothing");
  EXPECT_EQ(m.selected(), nullptr);
}

TEST(MonitorModel, HeldRowsGoFirstAndTheSelectionFollowsTheNewestUntilMoved) {
  Model m;
  m.on_line(
      proxy(1, "decision", "CONNECT", "old.test", 443, "deny", "2026-12-06T10:00:09.000000Z"));
  m.on_line(proxy(2, "held", "CONNECT", "first.test", 443, "deny", "2026-12-06T10:00:01.000000Z"));
  ASSERT_NE(m.selected(), nullptr);
  EXPECT_EQ(m.selected()->key.host, "first.test");
  EXPECT_TRUE(m.selected()->pending());
  m.on_line(proxy(3, "held", "GET", "second.test", 80, "deny", "2026-12-06T10:00:02.000000Z"));
  EXPECT_EQ(m.selected()->key.host, "second.test");  // it follows the newest
  EXPECT_EQ(m.held_count(), 2u);
  auto rows = m.visible();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2]->key.host, "old.test");  // below every held row, though newer

  m.move(+1);  // the user chose first.test: a newer held request does not move it
  EXPECT_EQ(m.selected()->key.host, "first.test");
  m.on_line(proxy(4, "held", "CONNECT", "third.test", 443, "deny", "2026-12-06T10:00:03.000000Z"));
  EXPECT_EQ(m.selected()->key.host, "first.test");
  m.move(+10);  // clamped
  EXPECT_EQ(m.selected()->key.host, "old.test");
  m.move(-10);
  EXPECT_EQ(m.selected()->key.host, "third.test");
}

TEST(MonitorModel, AnOutcomeEndsTheHoldAndThePendingListIsTheTruth) {
  Model m;
  m.on_line(proxy(7, "held", "CONNECT", "x.test", 443, "deny"));
  m.on_line(proxy(8, "held", "CONNECT", "x.test", 443, "deny"));
  ASSERT_EQ(m.visible().size(), 1u);
  EXPECT_EQ(m.visible()[0]->held.size(), 2u);
  m.on_line(proxy(7, "decision", "CONNECT", "x.test", 443, "allow", "2026-12-06T10:00:00.000000Z",
                  R"(,"hold":"released","held_ms":1200)"));
  EXPECT_EQ(m.held_count(), 1u);
  m.set_pending({{9, Proto::dns, "ignored.test", 0, 5}, {10, Proto::http, "y.test", 80, 6}});
  EXPECT_EQ(m.held_count(), 2u);  // 8 is no longer held: the list says so
  const auto rows = m.visible();
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0]->key.host, "y.test");
  m.set_pending({});
  EXPECT_EQ(m.held_count(), 0u);
}

TEST(MonitorModel, APendingListOlderThanTheStreamDoesNotUndoIt) {
  Model m;
  // Asked for at 10:00:05; meanwhile the stream said 1 ended and 2 was held at 10:00:06.
  m.on_line(proxy(1, "held", "CONNECT", "one.test", 443, "deny", "2026-12-06T10:00:01.000000Z"));
  m.on_line(proxy(1, "decision", "CONNECT", "one.test", 443, "deny", "2026-12-06T10:00:04.000000Z",
                  R"(,"hold":"refused","held_ms":3000)"));
  m.on_line(proxy(2, "held", "CONNECT", "two.test", 443, "deny", "2026-12-06T10:00:06.000000Z"));
  const std::int64_t asked = 1'796'551'205'000'000;  // 10:00:05
  m.set_pending({{1, Proto::connect, "one.test", 443, 1'796'551'201'000'000}}, asked);
  ASSERT_EQ(m.held_count(), 1u);
  EXPECT_EQ(m.visible()[0]->key.host, "two.test");
  // The next list, asked for later, is the truth again: 2 was answered meanwhile.
  m.set_pending({}, asked + 3'000'000);
  EXPECT_EQ(m.held_count(), 0u);
}

TEST(MonitorModel, ABoundedNumberOfRowsAndHeldRowsAreNeverForgotten) {
  Model m;
  m.on_line(proxy(1, "held", "CONNECT", "keep.test", 443, "deny", "2026-12-06T00:00:00.000000Z"));
  for (std::uint64_t i = 0; i < Model::kMaxRows + 50; ++i) {
    m.on_line(proxy(i + 10, "decision", "CONNECT", ("h" + std::to_string(i) + ".test").c_str(), 443,
                    "deny"));
  }
  EXPECT_EQ(m.rows(), Model::kMaxRows);
  EXPECT_EQ(m.visible()[0]->key.host, "keep.test");
}

}  // namespace
}  // namespace vibepit::launcher::monitor
