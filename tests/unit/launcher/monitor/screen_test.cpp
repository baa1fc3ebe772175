// vibepit monitor's screen: every line the terminal's width and printable ASCII, the held
// row first with its wait, the selection marked, and nothing the sandbox sent reaching the
// terminal as a control sequence, at 80x24 and at any other size.
#include "vibepit/launcher/monitor/screen.hpp"

#include <gtest/gtest.h>

namespace vibepit::launcher::monitor {
namespace {

constexpr std::int64_t kNow = 1796551210'000000;  // 2026-12-06T10:00:10Z

Model sample() {
  Model m;
  m.status().session = "s1";
  m.status().ask = true;
  m.status().ask_timeout_ms = 60'000;
  m.on_line(R"({"id":1,"ts":"2026-12-06T10:00:00.000000Z","src":"proxy","event":"decision",)"
            R"("method":"CONNECT","host":"registry.npmjs.org","port":443,"verdict":"deny",)"
            R"("reason":"not_allowlisted","rule":"","gen":4,"mode":"enforce"})");
  m.on_line(R"({"id":2,"ts":"2026-12-06T10:00:07.000000Z","src":"proxy","event":"held",)"
            R"("method":"CONNECT","host":"api.github.com","port":443,"verdict":"deny",)"
            R"("reason":"not_allowlisted","rule":"","gen":4,"mode":"enforce"})");
  return m;
}

void expect_clean(const std::vector<Line>& screen, int width, int height) {
  ASSERT_EQ(screen.size(), static_cast<std::size_t>(height));
  for (const auto& l : screen) {
    EXPECT_EQ(l.text.size(), static_cast<std::size_t>(width)) << "[" << l.text << "]";
    for (char ch : l.text) {
      const auto c = static_cast<unsigned char>(ch);
      ASSERT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " in [" << l.text << "]";
    }
  }
}

TEST(MonitorScreen, At80x24TheHeldRowIsFirstSelectedAndShowsItsWait) {
  const Model m = sample();
  const auto s = layout(m, 80, 24, kNow, "");
  expect_clean(s, 80, 24);
  EXPECT_EQ(s[0].tone, Tone::status);
  EXPECT_EQ(
      s[0].text.find("held 1  denied 1  allowed 0 (hidden)  enforce gen 4  ask 60s  session s1"),
      0u)
      << s[0].text;
  EXPECT_NE(s[0].text.find("gen 4"), std::string::npos) << s[0].text;
  EXPECT_NE(s[0].text.find("ask 60s"), std::string::npos) << s[0].text;
  EXPECT_NE(s[0].text.find("held 1"), std::string::npos) << s[0].text;
  EXPECT_EQ(s[1].tone, Tone::header);
  EXPECT_EQ(s[2].tone, Tone::held);
  EXPECT_TRUE(s[2].selected);
  EXPECT_EQ(s[2].text.substr(0, 6), ">conn ");
  EXPECT_NE(s[2].text.find("api.github.com"), std::string::npos) << s[2].text;
  EXPECT_NE(s[2].text.find("HELD 3s"), std::string::npos) << s[2].text;
  // Its count is the held request, not 0 for the decisions it has not had yet.
  EXPECT_NE(s[2].text.find(" 443      1   3s HELD 3s"), std::string::npos) << s[2].text;
  EXPECT_EQ(s[3].tone, Tone::denied);
  EXPECT_NE(s[3].text.find("registry.npmjs.org"), std::string::npos) << s[3].text;
  EXPECT_NE(s[3].text.find("10s"), std::string::npos) << s[3].text;
  EXPECT_NE(s[3].text.find("no rule"), std::string::npos) << s[3].text;
  EXPECT_EQ(s[23].tone, Tone::help);
  EXPECT_NE(s[23].text.find("a allow"), std::string::npos);
}

TEST(MonitorScreen, WhatTheSandboxSentIsEscaped) {
  Model m;
  // A DNS name may hold any byte; JSON carries it escaped, and the screen must not
  // unescape it into the terminal.
  m.on_line(R"({"id":1,"ts":"2026-12-06T10:00:00.000000Z","src":"dns","event":"decision",)"
            R"("qname":"a\u001b]0;pwned\u0007\u001b[2J\u009b.test","verdict":"deny",)"
            R"("reason":"not_allowlisted\u001b[31m","rule":""})");
  const auto s = layout(m, 120, 10, kNow, "message \x1b[H");
  expect_clean(s, 120, 10);
  EXPECT_NE(s[2].text.find("a\\x1b]0;pwned\\x07\\x1b[2J\\xc2\\x9b.test"), std::string::npos)
      << s[2].text;
  EXPECT_NE(s[8].text.find("message \\x1b[H"), std::string::npos) << s[8].text;
}

TEST(MonitorScreen, AnySizeGivesACleanScreenAndTheSelectionStaysOnIt) {
  Model m = sample();
  for (int i = 0; i < 60; ++i) {
    m.on_line(R"({"id":)" + std::to_string(100 + i) +
              R"(,"ts":"2026-12-06T09:59:00.000000Z","src":"proxy","event":"decision",)"
              R"("method":"GET","host":"h)" +
              std::to_string(i) +
              R"(.test","port":80,"verdict":"deny","reason":"not_allowlisted","rule":""})");
  }
  m.move(+40);
  for (auto [w, h] : {std::pair{80, 24}, {20, 5}, {1, 1}, {200, 60}, {40, 3}, {80, 10}}) {
    const auto s = layout(m, w, h, kNow, "");
    expect_clean(s, w, h);
    if (h > 4) {
      bool shown = false;
      for (const auto& l : s) shown = shown || l.selected;
      EXPECT_TRUE(shown) << w << "x" << h;
    }
  }
  EXPECT_TRUE(layout(m, 0, 0, kNow, "").empty());
}

TEST(MonitorScreen, ABusySessionsStatusFitsIn80ColumnsWithTheSessionLast) {
  Model m = sample();
  m.status().session = "0123456789ab";
  m.status().generation = 123456;
  m.status().connected = false;
  for (int i = 0; i < 3; ++i) {
    m.on_line(R"({"id":)" + std::to_string(10 + i) +
              R"(,"ts":"2026-12-06T10:00:00.000000Z","src":"proxy","event":"decision",)"
              R"("method":"GET","host":"h.test","port":80,"verdict":"deny",)"
              R"("reason":"not_allowlisted","rule":"","count":4000000})");
  }
  const auto s = layout(m, 80, 24, kNow, "");
  expect_clean(s, 80, 24);
  // Reconnecting, millions denied: everything but the session's id is in the 80 columns.
  EXPECT_EQ(s[0].text.find("RECONNECTING  held 1  denied 12M  allowed 0 (hidden)  enforce gen "
                           "123k  ask 60s"),
            0u)
      << s[0].text;
  m.status().connected = true;
  const auto t = layout(m, 80, 24, kNow, "");
  EXPECT_EQ(t[0].text.find("held 1  denied 12M"), 0u) << t[0].text;
  EXPECT_NE(t[0].text.find("ask 60s  session 0123"), std::string::npos) << t[0].text;
}

TEST(MonitorScreen, Counts) {
  EXPECT_EQ(count_text(0), "0");
  EXPECT_EQ(count_text(99'999), "99999");
  EXPECT_EQ(count_text(100'000), "100k");
  EXPECT_EQ(count_text(9'999'999), "9999k");
  EXPECT_EQ(count_text(10'000'000), "10M");
  EXPECT_EQ(count_text(18'446'744'073'709'551'615ULL), "18446744073709M");
}

TEST(MonitorScreen, Ages) {
  EXPECT_EQ(age(0), "0s");
  EXPECT_EQ(age(99'000'000), "99s");
  EXPECT_EQ(age(100'000'000), "1m");
  EXPECT_EQ(age(7'200'000'000), "2h");
  EXPECT_EQ(age(3LL * 86'400'000'000), "3d");
  EXPECT_EQ(age(-5), "0s");
}

}  // namespace
}  // namespace vibepit::launcher::monitor
