#pragma once
// Pure decisions: no clocks, sockets or DNS. decide() judges (host, port) against the
// allowlist; classify() then judges each address the name resolved to.
#include <cstdint>
#include <string>
#include <string_view>

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {

enum class Verdict { allow, deny };

enum class Reason {
  allowlisted,      // matched an allow rule
  not_allowlisted,  // no rule matched
  blocked_address,  // a literal or every resolved address was in a blocked range
  resolve_failed,   // the name could not be resolved
  invalid_target,   // the target could not be parsed
  rate_limited,     // the client is over its query rate (DNS)
  overloaded,       // too many upstream queries in flight (DNS): failed fast
  // A CONNECT tunnel's first client bytes (the SNI check, config key tunnel-tls). Each one
  // stands in every mode: no rule can allow it.
  sni_mismatch,      // the TLS ClientHello names another host than the CONNECT
  no_sni,            // tunnel-tls "require": a ClientHello that names no host
  not_tls,           // tunnel-tls "require": the first bytes are no TLS ClientHello
  bad_client_hello,  // a TLS ClientHello that is malformed or past the reader's bounds
  // A shared gateway's client that did not prove which tenant it is (tenant.hpp): no rule
  // can allow it.
  unauthenticated,
};

std::string_view to_string(Verdict v);
std::string_view to_string(Reason r);

struct Decision {
  Verdict verdict = Verdict::deny;
  Reason reason = Reason::not_allowlisted;
  // The entry that matched, empty when none: a view into the snapshot decided against,
  // valid while that snapshot is held.
  std::string_view rule;
  std::string range;  // for blocked_address: the range that blocked
  // Audit mode only: no rule matched (reason not_allowlisted), yet the verdict is allow.
  bool would_deny = false;
  // A rule with methods and a path names this host:port: its TLS is inspected, and each
  // request in it is decided (decide_request).
  bool inspect = false;
  // No plain rule allows host:port whole: only the requests a method/path rule matches are
  // allowed (decide_request); a tunnel to it is allowed for inspection only.
  bool per_request = false;
};

// The mode's last word on a decision: in audit mode a denial whose only reason is that no
// rule matched becomes an allow marked would_deny. Every other denial stands.
Decision apply_mode(Decision d, Mode mode);

// `host` is a normalised name or canonical IP text. IP literals are also classified here.
// Both apply the snapshot's mode. A tenant's request (tenant.hpp) is decided by the
// top-level rules and then its tenant's; kNoTenant: by the top-level rules alone.
Decision decide_http(std::string_view host, std::uint16_t port, const Snapshot& snap,
                     TenantId tenant = kNoTenant);
// One request to host:port: decide_http, and where only method/path rules name host:port,
// the first of them that matches `method` and `path` (as normalize_path gives it) allows it;
// none: not_allowlisted. Applies the snapshot's mode.
Decision decide_request(std::string_view host, std::uint16_t port, std::string_view method,
                        std::string_view path, const Snapshot& snap, TenantId tenant = kNoTenant);
// A DNS name in text form (a trailing dot and any case are accepted). A name that is no
// valid host name (an address, "-a.example", the root) is invalid_target: no rule names it.
// The top-level rules, then `tenant`'s; kEveryTenant: every tenant's (a client the DNS
// server cannot tie to one); kNoTenant: none.
Decision decide_dns(std::string_view qname, const Snapshot& snap, TenantId tenant = kEveryTenant);

}  // namespace vibepit::policy
