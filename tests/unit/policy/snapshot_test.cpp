// compile() and SnapshotStore: validation, generations, lifetimes, and concurrent readers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {
namespace {

std::shared_ptr<Snapshot> build(const RuleSet& rules) {
  return std::get<std::shared_ptr<Snapshot>>(compile_mutable(rules));
}

TEST(CompileTest, CanonicalDeduplicatedInOrder) {
  RuleSet rules;
  rules.allow_http = {"Example.com:443", "*.example.com:8*", "example.com.:443",
                      "[2001:DB8::1]:443"};
  rules.allow_dns = {"b.test", "A.test", "b.test.", "*.c.test"};
  rules.block_cidr = {"198.51.100.0/24", "2001:DB8:BAD::/48", "198.51.100.0/24"};
  auto result = compile(rules, 7);
  auto* snap = std::get_if<std::shared_ptr<const Snapshot>>(&result);
  ASSERT_NE(snap, nullptr);
  EXPECT_EQ((*snap)->generation, 7u);
  EXPECT_EQ((*snap)->rules.allow_http.to_vector(),
            (std::vector<std::string>{"example.com:443", "*.example.com:8*", "[2001:db8::1]:443"}));
  EXPECT_EQ((*snap)->rules.allow_dns.to_vector(),
            (std::vector<std::string>{"b.test", "a.test", "*.c.test"}));
  EXPECT_EQ((*snap)->rules.block_cidr,
            (std::vector<std::string>{"198.51.100.0/24", "2001:db8:bad::/48"}));
  EXPECT_EQ((*snap)->http.size(), 3u);
  EXPECT_EQ((*snap)->dns.size(), 3u);
  EXPECT_EQ((*snap)->classifier.extra_blocked().size(), 2u);
  EXPECT_NE((*snap)->dns.match("x.c.test"), nullptr);
  EXPECT_TRUE((*snap)->classifier.classify(*IpAddr::parse("198.51.100.1")).blocked);
}

TEST(CompileTest, ReportsEveryError) {
  RuleSet rules;
  rules.allow_http = {"ok.test:443", "foo*.com:443", "127.0.0.1:80"};
  rules.allow_dns = {"ok.test", "*"};
  rules.block_cidr = {"10.0.0.1/8"};
  auto result = compile(rules, 1);
  auto* errors = std::get_if<std::vector<RuleError>>(&result);
  ASSERT_NE(errors, nullptr);
  std::vector<std::string> messages;
  for (const auto& e : *errors) messages.push_back(e.message());
  EXPECT_EQ(messages,
            (std::vector<std::string>{
                "allow-http entry \"foo*.com:443\": '*' must be a whole label at the start "
                "(\"*.example.com\")",
                "allow-http entry \"127.0.0.1:80\": address 127.0.0.1 is in the always-blocked "
                "range 127.0.0.0/8 (loopback)",
                "allow-dns entry \"*\": a bare '*' would allow every name; use a domain such as "
                "\"*.example.com\"",
                "block-cidr entry \"10.0.0.1/8\": host bits set; did you mean \"10.0.0.0/8\"?",
            }));
}

TEST(CompileTest, EmptyRuleSetAllowsNothing) {
  auto snap = std::get<std::shared_ptr<const Snapshot>>(compile(RuleSet{}, 0));
  EXPECT_EQ(snap->http.size(), 0u);
  EXPECT_EQ(snap->dns.size(), 0u);
  EXPECT_EQ(snap->http.match("example.com", 443), nullptr);
}

TEST(CompileTest, WithAddedCopiesTheBaseAndLeavesItAlone) {
  RuleSet rules;
  rules.allow_http = {"a.test:443"};
  rules.allow_dns = {"a.test"};
  rules.block_cidr = {"198.51.100.0/24"};
  rules.mode = Mode::audit;
  auto base = std::get<std::shared_ptr<const Snapshot>>(compile(rules, 1));
  ParsedRules added;
  added.allow_http.push_back(std::get<HttpRule>(parse_http_rule("*.b.test:80")));
  added.allow_http.push_back(std::get<HttpRule>(parse_http_rule("a.test:443")));  // present
  added.allow_dns.push_back(std::get<DnsRule>(parse_dns_rule("*.b.test")));
  auto next = with_added(*base, std::move(added));
  EXPECT_EQ(next->rules.allow_http.to_vector(),
            (std::vector<std::string>{"a.test:443", "*.b.test:80"}));
  EXPECT_EQ(next->rules.allow_dns.to_vector(), (std::vector<std::string>{"a.test", "*.b.test"}));
  EXPECT_EQ(next->rules.block_cidr, base->rules.block_cidr);
  EXPECT_EQ(next->rules.mode, Mode::audit);
  EXPECT_NE(next->http.match("a.test", 443), nullptr);
  EXPECT_NE(next->http.match("x.b.test", 80), nullptr);
  EXPECT_NE(next->dns.match("x.b.test"), nullptr);
  EXPECT_TRUE(next->classifier.classify(*IpAddr::parse("198.51.100.1")).blocked);
  // The base, which readers may still hold, is unchanged.
  EXPECT_EQ(base->http.match("x.b.test", 80), nullptr);
  EXPECT_EQ(base->rules.allow_http.size(), 1u);
}

TEST(SnapshotStoreTest, GenerationIncrements) {
  SnapshotStore store(std::get<std::shared_ptr<const Snapshot>>(compile(RuleSet{}, 5)));
  EXPECT_EQ(store.generation(), 5u);
  EXPECT_EQ(store.current()->generation, 5u);
  EXPECT_EQ(store.publish(build({{"a.test:443"}, {}, {}})), 6u);
  EXPECT_EQ(store.generation(), 6u);
  auto snap = store.current();
  EXPECT_EQ(snap->generation, 6u);  // publish stamps the generation into the snapshot
  EXPECT_NE(snap->http.match("a.test", 443), nullptr);
  EXPECT_EQ(store.publish(build({})), 7u);
  EXPECT_EQ(store.current()->generation, 7u);
}

TEST(SnapshotStoreTest, NullInitialIsEmptyAndNullPublishThrows) {
  SnapshotStore store(nullptr);
  ASSERT_NE(store.current(), nullptr);
  EXPECT_EQ(store.current()->generation, 0u);
  EXPECT_EQ(store.current()->http.size(), 0u);
  EXPECT_THROW(store.publish(nullptr), std::invalid_argument);
  EXPECT_EQ(store.generation(), 0u);
}

TEST(SnapshotStoreTest, ReaderKeepsOldSnapshotAlive) {
  SnapshotStore store(build({{"old.test:443"}, {}, {}}));
  auto old = store.current();
  std::weak_ptr<const Snapshot> watch = old;
  store.publish(build({{"new.test:443"}, {}, {}}));
  auto fresh = store.current();  // refreshes this thread's cache
  ASSERT_FALSE(watch.expired());
  EXPECT_NE(old->http.match("old.test", 443), nullptr);  // still usable
  EXPECT_EQ(fresh->http.match("old.test", 443), nullptr);
  EXPECT_NE(fresh->http.match("new.test", 443), nullptr);
  old.reset();
  EXPECT_TRUE(watch.expired());  // the last reader gone, the old snapshot is freed
}

TEST(SnapshotStoreTest, RepeatedReadsShareOneSnapshot) {
  SnapshotStore store(build({}));
  auto a = store.current();
  auto b = store.current();
  EXPECT_EQ(a.get(), b.get());
}

TEST(SnapshotStoreTest, SeveralStoresAreIndependent) {
  SnapshotStore one(build({{"one.test:443"}, {}, {}}));
  SnapshotStore two(build({{"two.test:443"}, {}, {}}));
  for (int round = 0; round < 3; ++round) {
    EXPECT_NE(one.current()->http.match("one.test", 443), nullptr);
    EXPECT_NE(two.current()->http.match("two.test", 443), nullptr);
    EXPECT_EQ(one.current()->http.match("two.test", 443), nullptr);
    one.publish(build({{"one.test:443"}, {}, {}}));
  }
  EXPECT_EQ(one.generation(), 3u);
  EXPECT_EQ(two.generation(), 0u);
}

TEST(SnapshotStoreTest, NewStoreAtSameAddressIsNotConfused) {
  // The per-thread cache is keyed by a store id, never by address: a store built where a
  // destroyed one lived must not see the old store's cached snapshot.
  alignas(SnapshotStore) unsigned char buf[sizeof(SnapshotStore)];
  auto* first = new (buf) SnapshotStore(build({{"first.test:443"}, {}, {}}));
  EXPECT_NE(first->current()->http.match("first.test", 443), nullptr);
  first->~SnapshotStore();
  auto* second = new (buf) SnapshotStore(build({{"second.test:443"}, {}, {}}));
  EXPECT_EQ(second->current()->http.match("first.test", 443), nullptr);
  EXPECT_NE(second->current()->http.match("second.test", 443), nullptr);
  second->~SnapshotStore();
}

TEST(SnapshotStoreTest, DeadStoresReleaseTheirSnapshots) {
  std::weak_ptr<const Snapshot> watch;
  {
    SnapshotStore store(build({}));
    watch = store.current();
  }
  // This thread's cache still holds the dead store's snapshot until its next miss.
  SnapshotStore other(build({}));
  other.current();
  EXPECT_TRUE(watch.expired());
}

TEST(SnapshotStoreTest, ManyStoresOnOneThread) {
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int i = 0; i < 40; ++i) {
    stores.push_back(
        std::make_unique<SnapshotStore>(build({{"s" + std::to_string(i) + ".test:443"}, {}, {}})));
  }
  for (int round = 0; round < 2; ++round) {  // more stores than cache slots: evictions
    for (int i = 0; i < 40; ++i) {
      EXPECT_NE(stores[static_cast<std::size_t>(i)]->current()->http.match(
                    "s" + std::to_string(i) + ".test", 443),
                nullptr);
    }
  }
}

// Meant for TSan: one writer publishes a fixed number of snapshots while four readers
// read and match. Bounded by count, not time. Each snapshot k allows exactly "g<k>.test",
// where k is its generation, so a reader can check that what it sees is consistent.
TEST(SnapshotStoreTest, ConcurrentPublishAndRead) {
  constexpr std::uint64_t kPublishes = 2000;
  constexpr int kReaders = 4;
  SnapshotStore store(build({{"g0.test:443"}, {"g0.test"}, {}}));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      std::uint64_t last = 0;
      std::uint64_t reads = 0;
      while (true) {
        bool finished = done.load(std::memory_order_acquire);
        auto snap = store.current();
        std::uint64_t g = snap->generation;
        std::string name = "g" + std::to_string(g) + ".test";
        bool ok = g >= last && snap->http.match(name, 443) != nullptr &&
                  snap->dns.match(name) != nullptr && snap->http.size() == 1 &&
                  snap->rules.allow_http.size() == 1 &&
                  snap->rules.allow_http[0] == name + ":443" &&
                  snap->http.match("g" + std::to_string(g + 1) + ".test", 443) == nullptr;
        if (!ok) failures.fetch_add(1);
        last = g;
        ++reads;
        if (finished && reads > 100) {
          if (g != kPublishes) failures.fetch_add(1);  // the final snapshot is seen
          break;
        }
      }
    });
  }
  for (std::uint64_t k = 1; k <= kPublishes; ++k) {
    std::string name = "g" + std::to_string(k) + ".test";
    EXPECT_EQ(store.publish(build({{name + ":443"}, {name}, {}})), k);
  }
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store.generation(), kPublishes);
}

}  // namespace
}  // namespace vibepit::policy
