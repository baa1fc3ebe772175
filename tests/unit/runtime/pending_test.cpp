// Ask mode's table of held requests: bounds, endings, wakes, and the guarantee that a wake
// never runs once its holder has left, with holders and deciders on threads of their own
// (run under TSan in CI).
#include "vibepit/runtime/pending.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace vibepit::runtime {
namespace {

using namespace std::chrono_literals;
using Admit = PendingTable::Admit;

config::AskConfig on(std::size_t per_client = 64, std::size_t total = 1024) {
  config::AskConfig c;
  c.enabled = true;
  c.timeout = 60s;
  c.max_per_client = per_client;
  c.max_total = total;
  return c;
}

PendingRequest request(std::uint64_t id, std::string_view client = "203.0.113.9") {
  PendingRequest r;
  r.id = id;
  r.method = "CONNECT";
  r.host = "svc.test";
  r.port = 443;
  r.client_ip = *policy::IpAddr::parse(client);
  r.client_port = 40000;
  return r;
}

TEST(PendingTableTest, OffHoldsNothing) {
  PendingTable t;
  EXPECT_FALSE(t.asking());
  Admit admit;
  EXPECT_EQ(t.hold(
                request(1), [] {}, admit),
            nullptr);
  EXPECT_EQ(admit, Admit::off);
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTableTest, HoldsAndPublishesWithTheTimeout) {
  PendingTable t(on());
  EXPECT_TRUE(t.asking());
  Admit admit;
  const auto before = std::chrono::steady_clock::now();
  auto e = t.hold(
      request(7), [] {}, admit);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(admit, Admit::held);
  EXPECT_EQ(e->ended(), HoldEnd::none);
  EXPECT_EQ(e->request().timeout, 60s);
  EXPECT_GE(e->request().deadline, before + 60s);
  auto list = t.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, 7u);
  EXPECT_EQ(list[0].host, "svc.test");
  t.leave(*e);
  t.leave(*e);  // idempotent
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTableTest, BoundsPerClientAndInTotal) {
  PendingTable t(on(2, 3));
  Admit admit;
  auto a = t.hold(
      request(1, "203.0.113.1"), [] {}, admit);
  auto b = t.hold(
      request(2, "203.0.113.1"), [] {}, admit);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(t.hold(
                request(3, "203.0.113.1"), [] {}, admit),
            nullptr);
  EXPECT_EQ(admit, Admit::client_full);
  auto c = t.hold(
      request(4, "203.0.113.2"), [] {}, admit);  // another client: room in total
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(t.hold(
                request(5, "203.0.113.3"), [] {}, admit),
            nullptr);
  EXPECT_EQ(admit, Admit::table_full);
  t.leave(*a);  // room again, for the first client too
  EXPECT_NE(t.hold(
                request(6, "203.0.113.1"), [] {}, admit),
            nullptr);
  EXPECT_EQ(admit, Admit::held);
}

TEST(PendingTableTest, RefuseEndsOneAndWakesIt) {
  PendingTable t(on());
  int woken1 = 0, woken2 = 0;
  Admit admit;
  auto a = t.hold(
      request(1), [&] { ++woken1; }, admit);
  auto b = t.hold(
      request(2), [&] { ++woken2; }, admit);
  EXPECT_TRUE(t.refuse(1));
  EXPECT_FALSE(t.refuse(1));  // no longer held
  EXPECT_FALSE(t.refuse(99));
  EXPECT_EQ(a->ended(), HoldEnd::refused);
  EXPECT_EQ(b->ended(), HoldEnd::none);
  EXPECT_EQ(woken1, 1);
  EXPECT_EQ(woken2, 0);
  EXPECT_EQ(t.size(), 1u);
  t.leave(*a);  // the holder still leaves: nothing changes
  EXPECT_EQ(t.size(), 1u);
}

TEST(PendingTableTest, RulesChangedWakesEveryHolderAndEndsNone) {
  PendingTable t(on());
  int woken = 0;
  Admit admit;
  auto a = t.hold(
      request(1), [&] { ++woken; }, admit);
  auto b = t.hold(
      request(2), [&] { ++woken; }, admit);
  t.rules_changed();
  EXPECT_EQ(woken, 2);
  EXPECT_EQ(a->ended(), HoldEnd::none);
  EXPECT_EQ(t.size(), 2u);
  t.leave(*a);
  t.rules_changed();
  EXPECT_EQ(woken, 3);  // only b: a left
}

TEST(PendingTableTest, TurningAskOffEndsEveryHold) {
  PendingTable t(on());
  int woken = 0;
  Admit admit;
  auto a = t.hold(
      request(1), [&] { ++woken; }, admit);
  auto s = t.settings();
  s.timeout = 5s;
  t.set_settings(s);  // a new timeout: nothing ends
  EXPECT_EQ(a->ended(), HoldEnd::none);
  EXPECT_EQ(a->request().timeout, 60s);
  s.enabled = false;
  t.set_settings(s);
  EXPECT_FALSE(t.asking());
  EXPECT_EQ(a->ended(), HoldEnd::ask_off);
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTableTest, ShutdownEndsEveryHoldAndHoldsNothingMore) {
  PendingTable t(on());
  Admit admit;
  auto a = t.hold(
      request(1), [] {}, admit);
  EXPECT_EQ(t.end_all(HoldEnd::shutdown), 1u);
  EXPECT_EQ(a->ended(), HoldEnd::shutdown);
  EXPECT_FALSE(t.asking());
  EXPECT_EQ(t.hold(
                request(2), [] {}, admit),
            nullptr);
  EXPECT_EQ(admit, Admit::off);
  t.set_settings(on());  // settings cannot reopen a closed table
  EXPECT_FALSE(t.asking());
}

// Holders on threads of their own hold, wait a random while (their "expiry") or until they
// are ended, and leave, while other threads change the rules, refuse, turn ask mode off and
// on, and finally shut the table. Every wake must find its holder still there (not left),
// and the table must end empty with its counts intact.
TEST(PendingTableTest, HoldersAndDecidersRaceAndNoWakeOutlivesItsHolder) {
  PendingTable t(on(8, 64));
  std::atomic<bool> stop{false};
  std::atomic<int> late_wakes{0}, held{0}, ended_outside{0};
  std::atomic<std::uint64_t> next_id{1};

  auto holder = [&](int n) {
    std::mt19937 rng(static_cast<unsigned>(n));
    const std::string client = "203.0.113." + std::to_string(n % 4 + 1);
    while (!stop.load()) {
      auto woken = std::make_shared<std::atomic<int>>(0);
      Admit admit;
      auto e = t.hold(
          request(next_id++, client), [woken] { ++*woken; }, admit);
      if (!e) {
        std::this_thread::yield();
        continue;
      }
      ++held;
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 500);
      while (e->ended() == HoldEnd::none && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      if (e->ended() != HoldEnd::none) ++ended_outside;
      t.leave(*e);
      const int at_leave = woken->load();
      std::this_thread::sleep_for(50us);  // a wake that was still to come would land now
      if (woken->load() != at_leave) ++late_wakes;
    }
  };
  auto decider = [&](int n) {
    std::mt19937 rng(static_cast<unsigned>(100 + n));
    while (!stop.load()) {
      switch (rng() % 4) {
        case 0:
          t.rules_changed();
          break;
        case 1:
          t.refuse(rng() % (next_id.load() + 1));
          break;
        case 2:
          for (const auto& r : t.list()) t.refuse(r.id);
          break;
        default: {
          auto s = t.settings();
          s.enabled = !s.enabled || rng() % 2;
          t.set_settings(s);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(holder, i);
  for (int i = 0; i < 2; ++i) threads.emplace_back(decider, i);
  std::this_thread::sleep_for(300ms);
  t.end_all(HoldEnd::shutdown);
  std::this_thread::sleep_for(20ms);
  stop = true;
  for (auto& th : threads) th.join();

  EXPECT_GT(held.load(), 0);
  EXPECT_GT(ended_outside.load(), 0);
  EXPECT_EQ(late_wakes.load(), 0);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.list().empty());
  Admit admit;
  EXPECT_EQ(t.hold(
                request(next_id++), [] {}, admit),
            nullptr);  // shut
}

}  // namespace
}  // namespace vibepit::runtime
