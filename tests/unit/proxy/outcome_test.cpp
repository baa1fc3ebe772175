#include "vibepit/proxy/outcome.hpp"

#include <gtest/gtest.h>

#include <string>

namespace vibepit::proxy {
namespace {

using policy::Decision;
using policy::Reason;
using policy::Verdict;

// The refusal table is total: every reason a denial can carry has a 4xx/5xx status, an
// error type and a text that names the target; only not_allowlisted suggests a rule.
TEST(OutcomeTest, EveryReasonHasAStatusErrorAndText) {
  for (Reason r :
       {Reason::not_allowlisted, Reason::blocked_address, Reason::resolve_failed,
        Reason::invalid_target, Reason::rate_limited, Reason::overloaded, Reason::sni_mismatch,
        Reason::no_sni, Reason::not_tls, Reason::bad_client_hello, Reason::unauthenticated}) {
    Decision d;
    d.verdict = Verdict::deny;
    d.reason = r;
    const auto o = explain(d, "x.test:443");
    EXPECT_TRUE(o.refused()) << to_string(r);
    EXPECT_GE(o.status, 400) << to_string(r);
    EXPECT_LT(o.status, 600) << to_string(r);
    EXPECT_FALSE(o.text.empty()) << to_string(r);
    EXPECT_EQ(o.text.find("allow-http") != std::string::npos, r == Reason::not_allowlisted)
        << o.text;
  }
  Decision unauthenticated;
  unauthenticated.reason = Reason::unauthenticated;
  EXPECT_EQ(explain(unauthenticated, "x.test:443").status, 407);
  Decision allowed;
  allowed.verdict = Verdict::allow;
  allowed.reason = Reason::allowlisted;
  EXPECT_FALSE(explain(allowed, "x.test:443").refused());
  EXPECT_TRUE(explain(allowed, "x.test:443").text.empty());
}

}  // namespace
}  // namespace vibepit::proxy
