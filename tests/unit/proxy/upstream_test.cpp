// Component test of the path to the outside: decide -> resolve -> select -> dial, with a
// fake resolver and a fake dialler. No sockets, no root: the fakes record every lookup and
// every address the proxy tried to dial, so "only checked addresses are dialled" and each
// refusal's status, record and text are asserted directly.
#include "vibepit/proxy/upstream.hpp"

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <map>
#include <optional>
#include <vector>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
using policy::IpAddr;
using policy::Reason;
using policy::Verdict;

IpAddr ip(std::string_view text) {
  return *IpAddr::parse(text);
}

class FakeResolver {
 public:
  ResolveResult answer;
  std::vector<std::string> asked;
  bool cached(const std::string&, ResolveResult&) { return false; }  // every name is asked
  asio::awaitable<ResolveResult> resolve(const std::string& host) {
    asked.push_back(host);
    co_return answer;
  }
};

class FakeDialler {
 public:
  // The result for each address; an address not listed connects.
  std::map<std::string, DialResult> results;
  std::vector<std::string> dialled;  // "addr:port", in order
  asio::awaitable<DialResult> dial(const tcp::endpoint& to) {
    const std::string addr = to.address().to_string();
    dialled.push_back(policy::join_host_port(addr, to.port()));
    auto it = results.find(addr);
    co_return it == results.end() ? DialResult{} : it->second;
  }
};

static_assert(NameResolver<FakeResolver> && Dialler<FakeDialler>);

DialResult refused() {
  return {asio::error::connection_refused, false, false};
}
DialResult timed_out() {
  return {asio::error::operation_aborted, true, false};
}

struct OpenUpstream : ::testing::Test {
  std::shared_ptr<const policy::Snapshot> snap;
  FakeResolver resolver;
  FakeDialler dialler;

  void rules(std::vector<std::string> allow_http, std::vector<std::string> block_cidr = {}) {
    policy::RuleSet r;
    r.allow_http = std::move(allow_http);
    r.block_cidr = std::move(block_cidr);
    auto compiled = policy::compile(r, 1);
    snap = std::get<std::shared_ptr<const policy::Snapshot>>(compiled);
  }

  // The whole pipeline for one CONNECT target, as a Session runs it: the record as it
  // would be written, and whether the fakes were asked at all.
  struct Run {
    Outcome outcome;
    decision_log::DecisionRecord rec;
    bool cancelled = false;
  };
  Run run(std::string_view authority) {
    auto parsed = http::parse_authority(authority, std::nullopt);
    const auto& target = std::get<http::Authority>(parsed);
    Run out;
    policy::Decision d = policy::decide_http(target.host, target.port, *snap);
    if (d.verdict == Verdict::deny) {
      out.outcome = explain(std::move(d), target.display());
    } else {
      asio::io_context io;
      std::optional<bool> answered;
      asio::co_spawn(
          io, open_upstream(target, std::move(d), snap->classifier, resolver, dialler, out.outcome),
          [&](std::exception_ptr e, bool a) {
            if (e) std::rethrow_exception(e);
            answered = a;
          });
      io.run();
      EXPECT_TRUE(answered.has_value());
      out.cancelled = !answered.value_or(false);
    }
    record_outcome(out.rec, out.outcome);
    return out;
  }
};

TEST_F(OpenUpstream, OnlyAddressesThatPassAreDialled) {
  rules({"a.test:443"});
  resolver.answer.ok = true;
  resolver.answer.addrs = {ip("10.0.0.1"),    ip("127.0.0.1"),  ip("198.51.100.7"),
                           ip("169.254.1.1"), ip("::1"),        ip("::ffff:10.1.2.3"),
                           ip("2001:db8::5"), ip("203.0.113.9")};
  dialler.results["198.51.100.7"] = refused();
  dialler.results["2001:db8::5"] = refused();
  const Run r = run("a.test:443");
  EXPECT_EQ(resolver.asked, std::vector<std::string>{"a.test"});  // one lookup
  EXPECT_EQ(dialler.dialled,
            (std::vector<std::string>{"198.51.100.7:443", "[2001:db8::5]:443", "203.0.113.9:443"}));
  EXPECT_FALSE(r.outcome.refused());
  EXPECT_EQ(r.outcome.status, 200);
  EXPECT_EQ(r.rec.verdict, Verdict::allow);
  EXPECT_EQ(r.rec.reason, Reason::allowlisted);
  EXPECT_EQ(r.rec.rule, "a.test:443");
  EXPECT_EQ(r.rec.addr, "203.0.113.9");
  EXPECT_EQ(r.rec.status, 0);  // the caller sets it when it answers
}

TEST_F(OpenUpstream, BlockCidrAddressesAreNotDialledEither) {
  rules({"a.test:443"}, {"198.51.100.0/24"});
  resolver.answer.ok = true;
  resolver.answer.addrs = {ip("198.51.100.7"), ip("203.0.113.9")};
  const Run r = run("a.test:443");
  EXPECT_EQ(dialler.dialled, std::vector<std::string>{"203.0.113.9:443"});
  EXPECT_EQ(r.rec.addr, "203.0.113.9");
}

TEST_F(OpenUpstream, AtMostEightAddressesAreTried) {
  rules({"a.test:443"});
  resolver.answer.ok = true;
  for (int i = 1; i <= 12; ++i) {
    const std::string a = "198.51.100." + std::to_string(i);
    resolver.answer.addrs.push_back(ip(a));
    dialler.results[a] = refused();
  }
  const Run r = run("a.test:443");
  EXPECT_EQ(dialler.dialled.size(), kMaxDialAddresses);
  EXPECT_EQ(r.outcome.status, 502);
  EXPECT_NE(r.outcome.text.find("(tried 8 addresses)"), std::string::npos) << r.outcome.text;
}

TEST_F(OpenUpstream, EveryAddressBlockedIsRefusedWithoutADial) {
  rules({"a.test:443"});
  resolver.answer.ok = true;
  resolver.answer.addrs = {ip("127.0.0.1"), ip("10.0.0.1")};
  const Run r = run("a.test:443");
  EXPECT_TRUE(dialler.dialled.empty());
  EXPECT_EQ(r.outcome.status, 403);
  EXPECT_EQ(r.outcome.error, ProxyError::destination_ip_prohibited);
  EXPECT_EQ(r.outcome.text,
            "access to a.test:443 denied: a.test resolves to 127.0.0.1, in the blocked range "
            "127.0.0.0/8. No rule can allow it.");
  EXPECT_EQ(r.rec.verdict, Verdict::deny);
  EXPECT_EQ(r.rec.reason, Reason::blocked_address);
  EXPECT_EQ(r.rec.range, "127.0.0.0/8");
  EXPECT_EQ(r.rec.addr, "127.0.0.1");
  EXPECT_EQ(r.rec.rule, "a.test:443");
  EXPECT_EQ(r.rec.status, 403);
}

TEST_F(OpenUpstream, NotAllowlistedIsRefusedBeforeAnyLookup) {
  rules({"a.test:443"});
  const Run r = run("b.test:443");
  EXPECT_TRUE(resolver.asked.empty());
  EXPECT_TRUE(dialler.dialled.empty());
  EXPECT_EQ(r.outcome.status, 403);
  EXPECT_EQ(r.outcome.error, ProxyError::http_request_denied);
  EXPECT_EQ(r.outcome.text,
            "access to b.test:443 denied: not allowlisted.\nTo allow it, run: vibepit allow-http "
            "b.test:443");
  EXPECT_EQ(r.rec.reason, Reason::not_allowlisted);
  EXPECT_EQ(r.rec.rule, "");
  EXPECT_EQ(r.rec.addr, "");
  EXPECT_EQ(r.rec.status, 403);
}

TEST_F(OpenUpstream, BlockedLiteralIsRefusedBeforeAnyLookup) {
  rules({"*.test:443"});  // no rule could name it; the range is named, not a hint
  const Run r = run("[::ffff:10.0.0.1]:443");
  EXPECT_TRUE(resolver.asked.empty());
  EXPECT_TRUE(dialler.dialled.empty());
  EXPECT_EQ(r.outcome.status, 403);
  EXPECT_EQ(r.outcome.error, ProxyError::destination_ip_prohibited);
  EXPECT_NE(r.outcome.text.find("the address is in the blocked range"), std::string::npos)
      << r.outcome.text;
  EXPECT_EQ(r.rec.reason, Reason::blocked_address);
  EXPECT_FALSE(r.rec.range.empty());
}

TEST_F(OpenUpstream, AllowedLiteralIsDialledAsIsWithoutALookup) {
  rules({"198.51.100.7:8443"});
  const Run r = run("198.51.100.7:8443");
  EXPECT_TRUE(resolver.asked.empty());
  EXPECT_EQ(dialler.dialled, std::vector<std::string>{"198.51.100.7:8443"});
  EXPECT_EQ(r.rec.addr, "198.51.100.7");
}

TEST_F(OpenUpstream, ResolutionFailureIsA502ThatNamesTheResolversWords) {
  rules({"a.test:443"});
  resolver.answer.ok = false;
  resolver.answer.error = "no such name";
  Run r = run("a.test:443");
  EXPECT_TRUE(dialler.dialled.empty());
  EXPECT_EQ(r.outcome.status, 502);
  EXPECT_EQ(r.outcome.error, ProxyError::dns_error);
  EXPECT_EQ(r.outcome.text, "could not resolve a.test (no such name); the request was not sent.");
  EXPECT_EQ(r.rec.verdict, Verdict::deny);
  EXPECT_EQ(r.rec.reason, Reason::resolve_failed);
  EXPECT_EQ(r.rec.rule, "a.test:443");
  EXPECT_EQ(r.rec.detail, "no such name");
  EXPECT_EQ(r.rec.status, 502);

  resolver.answer.timed_out = true;
  r = run("a.test:443");
  EXPECT_EQ(r.outcome.error, ProxyError::dns_timeout);
}

TEST_F(OpenUpstream, FailedDialsStayAllowedAndSayWhatWasTried) {
  rules({"a.test:443"});
  resolver.answer.ok = true;
  resolver.answer.addrs = {ip("198.51.100.7"), ip("203.0.113.9")};
  dialler.results["198.51.100.7"] = refused();
  dialler.results["203.0.113.9"] = refused();
  Run r = run("a.test:443");
  EXPECT_EQ(r.outcome.status, 502);
  EXPECT_EQ(r.outcome.error, ProxyError::connection_refused);
  EXPECT_EQ(r.rec.verdict, Verdict::allow);  // the rules allowed it; the far end did not
  EXPECT_EQ(r.rec.addr, "203.0.113.9");
  EXPECT_EQ(r.rec.detail.view().rfind("connect failed: ", 0), 0u) << r.rec.detail;
  EXPECT_EQ(r.rec.status, 502);
  EXPECT_NE(r.outcome.text.find("could not connect to a.test:443"), std::string::npos);
  EXPECT_NE(r.outcome.text.find("(tried 2 addresses)"), std::string::npos) << r.outcome.text;

  dialler.dialled.clear();
  dialler.results["203.0.113.9"] = timed_out();
  r = run("a.test:443");
  EXPECT_EQ(r.outcome.status, 504);
  EXPECT_EQ(r.outcome.error, ProxyError::connection_timeout);
}

TEST_F(OpenUpstream, CancelledConnectionStopsWithoutAnOutcome) {
  rules({"a.test:443"});
  resolver.answer.ok = true;
  resolver.answer.cancelled = true;
  resolver.answer.addrs = {ip("198.51.100.7")};
  Run r = run("a.test:443");
  EXPECT_TRUE(r.cancelled);
  EXPECT_TRUE(dialler.dialled.empty());

  resolver.answer.cancelled = false;
  resolver.answer.addrs.push_back(ip("203.0.113.9"));
  dialler.results["198.51.100.7"] = DialResult{asio::error::operation_aborted, false, true};
  r = run("a.test:443");
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(dialler.dialled.size(), 1u);  // no further address after the cancel
}

TEST_F(OpenUpstream, ImpossibleNameGetsNoAllowHint) {
  // The authority parser refuses such names first; the table agrees if one gets this far.
  rules({"*.test:443"});
  const policy::Decision d = policy::decide_http("-a.test", 443, *snap);
  EXPECT_EQ(d.reason, Reason::invalid_target);
  const Outcome o = explain(d, "-a.test:443");
  EXPECT_EQ(o.status, 400);
  EXPECT_EQ(o.error, ProxyError::http_request_error);
  EXPECT_EQ(o.text.find("allow-http"), std::string::npos) << o.text;
}

}  // namespace
}  // namespace vibepit::proxy
