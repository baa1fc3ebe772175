// The DNS policy checks: one row per (rules, name, type), with the reason in a comment; then
// the rebinding defence over the addresses of an answer.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "dns_builder.hpp"
#include "vibepit/dns/filter.hpp"

namespace vibepit::dns {
namespace {

using policy::Reason;
using QA = QueryAction;

std::shared_ptr<const policy::Snapshot> snapshot(std::vector<std::string> allow_dns,
                                                 std::vector<std::string> block_cidr = {},
                                                 policy::Mode mode = policy::Mode::enforce) {
  policy::RuleSet rules;
  rules.mode = mode;
  rules.allow_dns = std::move(allow_dns);
  rules.block_cidr = std::move(block_cidr);
  return std::get<std::shared_ptr<const policy::Snapshot>>(policy::compile(rules, 1));
}

struct Row {
  const char* what;
  std::vector<std::string> rules;
  test::Bytes qname;  // the wire name
  std::uint16_t qtype;
  std::uint16_t qclass;
  QA action;
  Reason reason;
  std::string_view rule;  // the matched rule's text, empty for none
};

test::Bytes wire(std::string_view dotted) {
  return test::Msg().name(dotted).b;
}

// One question with the default dns-qtypes, parsed and judged.
QueryVerdict judge(const policy::Snapshot& snap, const test::Bytes& qname, std::uint16_t qtype,
                   std::uint16_t qclass, const char* what) {
  const test::Bytes pkt =
      test::Msg().header(1, kFlagRD, 1, 0, 0, 0).raw(qname).u16(qtype).u16(qclass).b;
  Query q;
  EXPECT_EQ(parse_query(pkt, q), WireError::none) << what;
  return check_query(q, snap, QtypeSet());
}

TEST(CheckQuery, Table) {
  const std::vector<std::string> rules = {"example.com", "*.allowed.test"};
  constexpr std::uint16_t IN = kClassIN;
  const Row rows[] = {
      {"exact name", rules, wire("example.com"), qtype::A, IN, QA::forward, Reason::allowlisted,
       "example.com"},
      {"exact name, any case", rules, wire("EXAMPLE.com"), qtype::AAAA, IN, QA::forward,
       Reason::allowlisted, "example.com"},
      {"exact rule does not cover subdomains", rules, wire("www.example.com"), qtype::A, IN,
       QA::deny, Reason::not_allowlisted, ""},
      {"wildcard, deep", rules, wire("a.b.allowed.test"), qtype::HTTPS, IN, QA::forward,
       Reason::allowlisted, "*.allowed.test"},
      {"wildcard does not cover the apex", rules, wire("allowed.test"), qtype::A, IN, QA::deny,
       Reason::not_allowlisted, ""},
      {"empty rule set denies",
       {},
       wire("example.com"),
       qtype::A,
       IN,
       QA::deny,
       Reason::not_allowlisted,
       ""},
      {"root: no rule names it", rules, wire("."), qtype::NS, IN, QA::deny, Reason::invalid_target,
       ""},
      {"an address is not a name", rules, wire("203.0.113.7"), qtype::A, IN, QA::deny,
       Reason::invalid_target, ""},
      {"a label may not start with '-'", rules, wire("-a.allowed.test"), qtype::A, IN, QA::deny,
       Reason::invalid_target, ""},
      {"escaped dot cannot pose as a label boundary", rules,
       test::Msg().label("x.allowed").name("test").b, qtype::A, IN, QA::deny,
       Reason::invalid_target, ""},
      {"odd octet in an allowed zone", rules, test::Msg().label("a b").name("allowed.test").b,
       qtype::A, IN, QA::deny, Reason::invalid_target, ""},
      {"ANY for an allowed name: RFC 8482", rules, wire("example.com"), qtype::ANY, IN,
       QA::any_hinfo, Reason::allowlisted, "example.com"},
      {"ANY for another name", rules, wire("other.test"), qtype::ANY, IN, QA::deny,
       Reason::not_allowlisted, ""},
      {"AXFR", rules, wire("example.com"), qtype::AXFR, IN, QA::notimp, Reason::invalid_target, ""},
      {"IXFR", rules, wire("example.com"), 251, IN, QA::notimp, Reason::invalid_target, ""},
      {"MAILB", rules, wire("other.test"), 253, IN, QA::notimp, Reason::invalid_target, ""},
      {"MAILA", rules, wire("example.com"), 254, IN, QA::notimp, Reason::invalid_target, ""},
      {"HINFO is not a default type", rules, wire("example.com"), qtype::HINFO, IN, QA::deny_qtype,
       Reason::not_allowlisted, "example.com"},
      {"unknown type", rules, wire("x.allowed.test"), 99, IN, QA::deny_qtype,
       Reason::not_allowlisted, "*.allowed.test"},
      {"class CH", rules, wire("example.com"), qtype::A, 3, QA::deny, Reason::not_allowlisted, ""},
      {"class ANY", rules, wire("example.com"), qtype::A, 255, QA::deny, Reason::not_allowlisted,
       ""},
  };
  for (const Row& r : rows) {
    const auto snap = snapshot(r.rules);
    const QueryVerdict v = judge(*snap, r.qname, r.qtype, r.qclass, r.what);
    EXPECT_EQ(v.action, r.action) << r.what;
    EXPECT_EQ(v.reason, r.reason) << r.what;
    EXPECT_EQ(v.rule, r.rule) << r.what;
    EXPECT_STRNE(v.detail, "") << r.what;
  }
}

// Audit mode: a plain name no rule matches is forwarded and marked would_deny; what no rule
// could ever allow (escaped octets, other classes, meta and unlisted types) is refused as in
// enforce.
TEST(CheckQuery, AuditTable) {
  const auto snap = snapshot({"example.com"}, {}, policy::Mode::audit);
  constexpr std::uint16_t IN = kClassIN;
  struct AuditRow {
    const char* what;
    test::Bytes qname;
    std::uint16_t qtype, qclass;
    QA action;
    Reason reason;
    bool would_deny;
  } rows[] = {
      {"allowed name", wire("example.com"), qtype::A, IN, QA::forward, Reason::allowlisted, false},
      {"unlisted name goes ahead", wire("other.test"), qtype::A, IN, QA::forward,
       Reason::not_allowlisted, true},
      {"unlisted name, AAAA", wire("www.example.com"), qtype::AAAA, IN, QA::forward,
       Reason::not_allowlisted, true},
      {"unlisted ANY: RFC 8482 answer", wire("other.test"), qtype::ANY, IN, QA::any_hinfo,
       Reason::not_allowlisted, true},
      {"escaped octets stay refused", test::Msg().label("a b").name("other.test").b, qtype::A, IN,
       QA::deny, Reason::invalid_target, false},
      {"an address stays refused", wire("203.0.113.7"), qtype::A, IN, QA::deny,
       Reason::invalid_target, false},
      {"class CH stays refused", wire("other.test"), qtype::A, 3, QA::deny, Reason::not_allowlisted,
       false},
      {"AXFR stays refused", wire("other.test"), qtype::AXFR, IN, QA::notimp,
       Reason::invalid_target, false},
      {"a type outside dns-qtypes stays refused", wire("other.test"), qtype::HINFO, IN,
       QA::deny_qtype, Reason::not_allowlisted, false},
  };
  for (const auto& r : rows) {
    const QueryVerdict v = judge(*snap, r.qname, r.qtype, r.qclass, r.what);
    EXPECT_EQ(v.action, r.action) << r.what;
    EXPECT_EQ(v.reason, r.reason) << r.what;
    EXPECT_EQ(v.would_deny, r.would_deny) << r.what;
  }
}

TEST(CheckQuery, Details) {
  const auto snap = snapshot({"example.com"});
  Query q;
  const auto verdict = [&](std::uint16_t type, std::uint16_t klass, std::string_view name) {
    const test::Bytes pkt = test::Msg().header(1, 0, 1, 0, 0, 0).question(name, type, klass).b;
    EXPECT_EQ(parse_query(pkt, q), WireError::none);
    return check_query(q, *snap, QtypeSet());
  };
  EXPECT_STREQ(verdict(qtype::A, 3, "example.com").detail, "class not IN");
  EXPECT_STREQ(verdict(qtype::A, kClassIN, "nope.test").detail, "name not in allow-dns");
  EXPECT_STREQ(verdict(99, kClassIN, "example.com").detail, "query type not allowed");
}

TEST(CheckQuery, CustomTypeSet) {
  const auto snap = snapshot({"example.com"});
  QtypeSet only_a = QtypeSet::none();
  only_a.add(qtype::A);
  EXPECT_FALSE(only_a.contains(qtype::AAAA));
  Query q;
  const auto pkt = [](std::uint16_t type) {
    return test::make_query({.name = "example.com", .type = type});
  };
  ASSERT_EQ(parse_query(pkt(qtype::A), q), WireError::none);
  EXPECT_EQ(check_query(q, *snap, only_a).action, QA::forward);
  ASSERT_EQ(parse_query(pkt(qtype::AAAA), q), WireError::none);
  EXPECT_EQ(check_query(q, *snap, only_a).action, QA::deny_qtype);
  // The default set.
  const QtypeSet d;
  for (std::uint16_t t : {qtype::A, qtype::AAAA, qtype::CNAME, qtype::HTTPS, qtype::SVCB, qtype::MX,
                          qtype::TXT, qtype::SRV, qtype::NS, qtype::SOA, qtype::PTR}) {
    EXPECT_TRUE(d.contains(t)) << t;
  }
  EXPECT_FALSE(d.contains(qtype::HINFO));
  EXPECT_FALSE(d.contains(qtype::ANY));
}

struct AnswerRow {
  std::vector<std::string_view> addrs;
  bool allowed;
  std::string_view first_blocked;
  std::string_view range;
};

TEST(CheckAnswer, Table) {
  const auto snap = snapshot({}, {"198.51.100.128/25"});
  const AnswerRow rows[] = {
      {{}, true, "", ""},                                             // nothing to judge
      {{"203.0.113.7", "2001:db8::1"}, true, "", ""},                 // documentation, public
      {{"198.51.100.1"}, true, "", ""},                               // outside the block-cidr
      {{"10.0.0.1"}, false, "10.0.0.1", "10.0.0.0/8"},                // private
      {{"127.0.0.1"}, false, "127.0.0.1", "127.0.0.0/8"},             // loopback
      {{"::1"}, false, "::1", "::1/128"},                             // IPv6 loopback
      {{"::ffff:10.0.0.1"}, false, "::ffff:10.0.0.1", "10.0.0.0/8"},  // mapped private
      {{"203.0.113.7", "169.254.169.254", "10.0.0.1"},
       false,
       "169.254.169.254",
       "169.254.0.0/16"},                                                  // the first blocked one
      {{"198.51.100.200"}, false, "198.51.100.200", "198.51.100.128/25"},  // block-cidr
  };
  for (const AnswerRow& r : rows) {
    std::vector<policy::IpAddr> addrs;
    for (std::string_view a : r.addrs) addrs.push_back(test::ip(a));
    const AnswerVerdict v = check_answer(addrs, *snap);
    EXPECT_EQ(v.allowed, r.allowed) << (r.addrs.empty() ? "" : r.addrs[0]);
    if (!r.allowed) {
      EXPECT_EQ(v.addr, test::ip(r.first_blocked));
      EXPECT_EQ(v.range, r.range);
    } else {
      EXPECT_TRUE(v.range.empty());
    }
  }
}

}  // namespace
}  // namespace vibepit::dns
