// The copy-on-write parts of a snapshot: a copy changed never changes its original, and a
// copy with one rule added shares almost everything with its original.
#include "vibepit/policy/cow.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../allocated_bytes.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {
namespace {

TEST(CowNameMap, ACopyChangedLeavesTheOriginalAlone) {
  CowNameMap<int> a;
  bool inserted = false;
  for (int i = 0; i < 5000; ++i) a.get_or_insert("k" + std::to_string(i), inserted) = i;
  EXPECT_EQ(a.size(), 5000u);
  CowNameMap<int> b = a;
  b.get_or_insert("k7", inserted) = -7;  // a changed value
  EXPECT_FALSE(inserted);
  b.get_or_insert("new", inserted) = 1;  // a new key
  EXPECT_TRUE(inserted);
  ASSERT_NE(a.find("k7"), nullptr);
  EXPECT_EQ(*a.find("k7"), 7);
  EXPECT_EQ(a.find("new"), nullptr);
  EXPECT_EQ(a.size(), 5000u);
  EXPECT_EQ(*b.find("k7"), -7);
  EXPECT_EQ(*b.find("new"), 1);
  EXPECT_EQ(b.size(), 5001u);
  for (int i = 0; i < 5000; i += 97) {
    ASSERT_NE(a.find("k" + std::to_string(i)), nullptr);
    EXPECT_EQ(*a.find("k" + std::to_string(i)), i);
    if (i != 7) {
      EXPECT_EQ(*b.find("k" + std::to_string(i)), i);
    }
  }
}

TEST(CowList, ACopyAppendedToLeavesTheOriginalAlone) {
  constexpr std::size_t n = CowList<std::string>::kChunk * 2 + 5;
  CowList<std::string> a;
  for (std::size_t i = 0; i < n; ++i) a.push_back(std::to_string(i));
  CowList<std::string> b = a;
  b.push_back("b");
  CowList<std::string> c = a;  // a second copy grows the same shared last chunk
  c.push_back("c");
  EXPECT_EQ(a.size(), n);
  EXPECT_EQ(b.size(), n + 1);
  EXPECT_EQ(b[n], "b");
  EXPECT_EQ(c[n], "c");
  const auto all = a.to_vector();
  ASSERT_EQ(all.size(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(all[i], std::to_string(i));
  EXPECT_EQ(b.to_vector().back(), "b");
}

using vibepit::testing::allocated_bytes;

// Adding one rule to a snapshot of 40 000 allocates a few shards and the last chunk of a
// list, not a second copy of the matchers (which is what the heap grew by when with_added
// copied the whole snapshot: 25 MB here).
TEST(CowSnapshot, AddingOneRuleSharesTheRest) {
  RuleSet rules;
  for (int i = 0; i < 20'000; ++i) {
    rules.allow_http.push_back("host" + std::to_string(i) + ".exact.test:443");
    rules.allow_http.push_back("*.zone" + std::to_string(i) + ".example.com:8*");
    rules.allow_dns.push_back("host" + std::to_string(i) + ".exact.test");
  }
  const std::size_t empty = allocated_bytes();
  auto base = std::get<std::shared_ptr<const Snapshot>>(compile(rules, 1));
  const std::size_t whole = allocated_bytes() - empty;
  ParsedRules added;
  added.allow_http.push_back(std::get<HttpRule>(parse_http_rule("*.added.test:443")));
  added.allow_dns.push_back(std::get<DnsRule>(parse_dns_rule("added.test")));
  const std::size_t before = allocated_bytes();
  auto next = with_added(*base, std::move(added));
  const std::size_t grown = allocated_bytes() - before;
  EXPECT_LT(grown, whole / 20) << "the snapshot holds " << whole << " bytes; the copy added "
                               << grown;
  EXPECT_NE(next->http.match("x.added.test", 443), nullptr);
  EXPECT_EQ(base->http.match("x.added.test", 443), nullptr);
  EXPECT_NE(next->http.match("host19999.exact.test", 443), nullptr);
  EXPECT_EQ(next->rules.allow_http.size(), 40'001u);
  EXPECT_EQ(base->rules.allow_http.size(), 40'000u);
}

}  // namespace
}  // namespace vibepit::policy
