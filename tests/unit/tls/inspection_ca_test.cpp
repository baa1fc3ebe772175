// The inspection CA: what its certificate and its leaves say, that a leaf verifies against
// it for its host only, that the key never leaves it, and its cache.
#include "vibepit/tls/inspection_ca.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace vibepit::tls {
namespace {

using namespace std::chrono_literals;

InspectionCa::Options options(std::size_t max_leaves = 1024) {
  InspectionCa::Options o;
  o.session_id = "s1";
  o.lifetime = 2h;
  o.max_leaves = max_leaves;
  return o;
}

TEST(InspectionCa, ItsCertificateIsAP256CaForTheSessionsLifeOnly) {
  InspectionCa ca(options());
  const auto info = inspect_certificate(ca.cert_pem());
  EXPECT_TRUE(info.is_ca);
  EXPECT_EQ(info.key_type, "EC");
  EXPECT_EQ(info.subject_cn, "vibepit inspection CA s1");
  EXPECT_GE(info.serial_bits, 120u);
  EXPECT_EQ(info.not_after - info.not_before, 2h + 5min);
  EXPECT_TRUE(verifies_against(ca.cert_pem(), ca.cert_pem()));
  EXPECT_EQ(ca.cert_pem().find("PRIVATE KEY"), std::string::npos);
}

TEST(InspectionCa, ALeafVerifiesForItsHostAndNoOther) {
  InspectionCa ca(options());
  auto leaf = ca.leaf("api.github.com");
  ASSERT_NE(leaf, nullptr);
  EXPECT_TRUE(verifies_against(leaf->cert_pem, ca.cert_pem(), "api.github.com"));
  EXPECT_FALSE(verifies_against(leaf->cert_pem, ca.cert_pem(), "gist.github.com"));
  EXPECT_FALSE(verifies_against(leaf->cert_pem, ca.cert_pem(), "evil.api.github.com"));
  InspectionCa other(options());
  EXPECT_FALSE(verifies_against(leaf->cert_pem, other.cert_pem(), "api.github.com"));
  const auto info = inspect_certificate(leaf->cert_pem);
  EXPECT_FALSE(info.is_ca);
  EXPECT_TRUE(info.server_auth);
  EXPECT_FALSE(info.client_auth);
  EXPECT_EQ(info.key_type, "EC");
  EXPECT_EQ(info.san_names, std::vector<std::string>{"api.github.com"});
  EXPECT_TRUE(info.san_ips.empty());
  // It ends when the CA does, not later.
  EXPECT_LE(info.not_after, inspect_certificate(ca.cert_pem()).not_after);
  EXPECT_GT(info.not_after, std::chrono::system_clock::now() + 1h);
  EXPECT_TRUE(key_matches_certificate(to_pem(leaf->key), leaf->cert_pem));
  // Not the CA's key: a leaf's key cannot sign for the CA.
  EXPECT_FALSE(key_matches_certificate(to_pem(leaf->key), ca.cert_pem()));
}

TEST(InspectionCa, AnIpLeafNamesTheAddress) {
  InspectionCa ca(options());
  for (const std::string ip : {"203.0.113.7", "2001:db8::1"}) {
    auto leaf = ca.leaf(ip);
    EXPECT_TRUE(verifies_against(leaf->cert_pem, ca.cert_pem(), ip)) << ip;
    EXPECT_EQ(inspect_certificate(leaf->cert_pem).san_ips, std::vector<std::string>{ip});
  }
}

TEST(InspectionCa, WhatIsNoHostNameIsRefused) {
  InspectionCa ca(options());
  for (const std::string bad : {"", "a,DNS:evil.test", "A.test", "a b", "x:y", "a\n.test"}) {
    EXPECT_THROW(ca.leaf(bad), CertificateError) << bad;
  }
}

TEST(InspectionCa, LeavesAreCachedAndTheLeastRecentGo) {
  InspectionCa ca(options(2));
  auto a = ca.leaf("a.test");
  EXPECT_EQ(ca.leaf("a.test"), a);
  auto b = ca.leaf("b.test");
  EXPECT_EQ(ca.leaf("a.test"), a);  // a is now the most recent
  ca.leaf("c.test");                // b goes
  EXPECT_EQ(ca.leaf("a.test"), a);
  EXPECT_NE(ca.leaf("b.test"), b);
  const auto s = ca.stats();
  EXPECT_EQ(s.issued, 4u);
  EXPECT_EQ(s.reused, 3u);
  EXPECT_EQ(s.cached, 2u);
  // A leaf in use outlives its place in the cache.
  EXPECT_TRUE(verifies_against(b->cert_pem, ca.cert_pem(), "b.test"));
}

TEST(InspectionCa, ManyThreadsAskingAtOnceGetOneLeafPerHost) {
  InspectionCa ca(options());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::vector<std::vector<std::shared_ptr<const Leaf>>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto leaf = ca.leaf("h" + std::to_string(i % 10) + ".test");
        if (leaf->host != "h" + std::to_string(i % 10) + ".test") ++failures;
        got[t].push_back(leaf);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  std::set<const Leaf*> distinct;
  for (int i = 0; i < 10; ++i) distinct.insert(ca.leaf("h" + std::to_string(i) + ".test").get());
  EXPECT_EQ(distinct.size(), 10u);
  EXPECT_EQ(ca.stats().cached, 10u);
}

}  // namespace
}  // namespace vibepit::tls
