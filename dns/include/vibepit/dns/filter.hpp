#pragma once
// The DNS side of policy, pure: which queries may be forwarded, and whether an answer may
// reach the client (the rebinding defence). No I/O, no clocks.
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>

#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::dns {

// The query types an allowed name may ask for (config key dns-qtypes).
class QtypeSet {
 public:
  QtypeSet();  // the default of dns-qtypes (config::DnsConfig)
  static QtypeSet none() { return QtypeSet(Empty{}); }
  void add(std::uint16_t t) { bits_.set(t); }
  bool contains(std::uint16_t t) const { return bits_.test(t); }

 private:
  struct Empty {};
  explicit QtypeSet(Empty) {}
  std::bitset<65536> bits_;
};

enum class QueryAction {
  forward,     // allowed: answer from the cache or the upstream
  deny,        // the name is not allowlisted (or not a plain name): the deny rcode
  deny_qtype,  // the name is allowed but the type is not: the deny rcode
  any_hinfo,   // ANY for an allowed name: the RFC 8482 minimal answer
  notimp,      // AXFR/IXFR and other meta types: NOTIMP
};

struct QueryVerdict {
  QueryAction action = QueryAction::deny;
  policy::Reason reason = policy::Reason::not_allowlisted;
  std::string_view rule;    // the allow-dns rule that matched (snapshot's text)
  const char* detail = "";  // a short human phrase: a literal, borrowed by the record
  bool would_deny = false;  // audit mode: forwarded although no rule matched
};

// Judge a parsed query in the snapshot's mode: the wire-level checks (meta types, class,
// escaped octets), then the name by policy::decide_dns, then the type. Allocation-free. In
// audit mode a valid name that no rule matches is forwarded (would_deny); everything else
// is judged as in enforce.
// `tenant` is whose names the client may ask for (config::dns_tenant).
QueryVerdict check_query(const Query& q, const policy::Snapshot& snap, const QtypeSet& types,
                         policy::TenantId tenant = policy::kEveryTenant);

struct AnswerVerdict {
  bool allowed = true;
  policy::IpAddr addr;  // the first blocked address, when !allowed
  std::string range;    // the range that blocked it
};

// The rebinding defence: an answer is refused when any address in it is blocked.
AnswerVerdict check_answer(std::span<const policy::IpAddr> addrs, const policy::Snapshot& snap);

}  // namespace vibepit::dns
