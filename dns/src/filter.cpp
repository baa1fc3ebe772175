// The DNS side of policy: which queries go upstream, and which answers may reach the client.
#include "vibepit/dns/filter.hpp"

#include "vibepit/config/config.hpp"

namespace vibepit::dns {

namespace {
constexpr std::uint16_t kIxfr = 251, kMailb = 253, kMaila = 254;
}  // namespace

QtypeSet::QtypeSet() {
  for (std::uint16_t t : config::DnsConfig{}.qtypes) bits_.set(t);
}

QueryVerdict check_query(const Query& q, const policy::Snapshot& snap, const QtypeSet& types,
                         policy::TenantId tenant) {
  using policy::Reason;
  // Zone transfers and the obsolete mail meta types are refused before the name is even
  // looked at: no rule can allow them.
  if (q.qtype == qtype::AXFR || q.qtype == kIxfr || q.qtype == kMailb || q.qtype == kMaila) {
    return {QueryAction::notimp, Reason::invalid_target, {}, "query type not implemented"};
  }
  if (q.qclass != kClassIN) {
    return {QueryAction::deny, Reason::not_allowlisted, {}, "class not IN"};
  }
  // A name with escaped octets cannot be written as an allow-dns entry: no rule names it.
  if (!q.qname.plain) {
    return {QueryAction::deny, Reason::invalid_target, {}, "name has escaped octets"};
  }
  const policy::Decision d = policy::decide_dns(q.qname.view(), snap, tenant);
  if (d.verdict == policy::Verdict::deny) {
    return {QueryAction::deny,
            d.reason,
            {},
            d.reason == Reason::invalid_target ? "not a host name" : "name not in allow-dns"};
  }
  if (q.qtype == qtype::ANY) {
    return {QueryAction::any_hinfo, d.reason, d.rule, "ANY answered per RFC 8482", d.would_deny};
  }
  // dns-qtypes is configuration, not a rule: a type outside it stays refused in audit mode.
  if (!types.contains(q.qtype)) {
    return {QueryAction::deny_qtype, Reason::not_allowlisted, d.rule, "query type not allowed"};
  }
  return {QueryAction::forward, d.reason, d.rule,
          d.would_deny ? "audit: no allow-dns rule matched" : "allow-dns rule matched",
          d.would_deny};
}

AnswerVerdict check_answer(std::span<const policy::IpAddr> addrs, const policy::Snapshot& snap) {
  for (const policy::IpAddr& a : addrs) {
    policy::Classification c = snap.classifier.classify(a);
    if (c.blocked) return {false, a, std::move(c.range)};
  }
  return {};
}

}  // namespace vibepit::dns
