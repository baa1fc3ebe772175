// Pure decisions over one snapshot. Hosts are validated here as well as normalised, so
// that forms a resolver would read as an address ("127.1") never reach the name rules.
#include "vibepit/policy/decision.hpp"

#include <optional>

#include "vibepit/policy/name.hpp"

namespace vibepit::policy {
namespace {

Decision deny(Reason reason) {
  Decision d;
  d.verdict = Verdict::deny;
  d.reason = reason;
  return d;
}

template <class Rule>
Decision from_match(const Rule* rule) {
  if (rule == nullptr) return deny(Reason::not_allowlisted);
  Decision d;
  d.verdict = Verdict::allow;
  d.reason = Reason::allowlisted;
  d.rule = rule->text;
  return d;
}

}  // namespace

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::allow:
      return "allow";
    case Verdict::deny:
      return "deny";
  }
  return "unknown";
}

std::string_view to_string(Reason r) {
  switch (r) {
    case Reason::allowlisted:
      return "allowlisted";
    case Reason::not_allowlisted:
      return "not_allowlisted";
    case Reason::blocked_address:
      return "blocked_address";
    case Reason::resolve_failed:
      return "resolve_failed";
    case Reason::invalid_target:
      return "invalid_target";
    case Reason::rate_limited:
      return "rate_limited";
    case Reason::overloaded:
      return "overloaded";
    case Reason::sni_mismatch:
      return "sni_mismatch";
    case Reason::no_sni:
      return "no_sni";
    case Reason::not_tls:
      return "not_tls";
    case Reason::bad_client_hello:
      return "bad_client_hello";
    case Reason::unauthenticated:
      return "unauthenticated";
  }
  return "unknown";
}

Decision apply_mode(Decision d, Mode mode) {
  if (mode == Mode::audit && d.verdict == Verdict::deny && d.reason == Reason::not_allowlisted) {
    d.verdict = Verdict::allow;
    d.would_deny = true;
  }
  return d;
}

namespace {

// The form of `host` the HTTP rules are keyed by (canonical IP text, or the matchable name,
// which may live in `storage`), or the denial that comes first: an invalid target, or a
// literal in a blocked range.
std::optional<std::string_view> http_key(std::string_view host, std::uint16_t port,
                                         const Snapshot& snap, std::string& storage,
                                         Decision& refused) {
  if (host.empty() || port == 0) {
    refused = deny(Reason::invalid_target);
    return std::nullopt;
  }
  std::string_view literal = host;
  if (literal.size() >= 2 && literal.front() == '[' && literal.back() == ']') {
    literal = literal.substr(1, literal.size() - 2);  // tolerate "[2001:db8::1]"
  }
  if (auto ip = IpAddr::parse(literal)) {
    Classification c = snap.classifier.classify(*ip);
    if (c.blocked) {
      refused = deny(Reason::blocked_address);
      refused.range = std::move(c.range);
      return std::nullopt;
    }
    storage = ip->to_string();
    return std::string_view(storage);
  }
  const auto name = matchable_name(host, storage);
  if (!name) refused = deny(Reason::invalid_target);
  return name;
}

// Whether a credential names host:port: its requests get the credential, so it is inspected.
bool has_credential(std::string_view key, std::uint16_t port, const Snapshot& snap) {
  if (!snap.credentials) return false;
  for (const auto& c : *snap.credentials) {
    if (credential_matches(c.spec, key, port)) return true;
  }
  return false;
}

// host:port against the rules (the top level's, then the tenant's): a plain rule allows it
// whole; rules with methods and a path allow it as far as its requests go (per_request), and
// make it inspected either way, as a credential for it does.
Decision match_http(std::string_view key, std::uint16_t port, const Snapshot& snap,
                    const Tenant* tenant) {
  const HttpRule* plain = snap.http.match(key, port);
  if (plain == nullptr && tenant != nullptr) plain = tenant->http.match(key, port);
  const HttpRule* inspecting = snap.http.inspection_rule(key, port);
  if (inspecting == nullptr && tenant != nullptr)
    inspecting = tenant->http.inspection_rule(key, port);
  Decision d = from_match(plain != nullptr ? plain : inspecting);
  // A credential never allows anything by itself; it only makes its host inspected.
  d.inspect = inspecting != nullptr || has_credential(key, port, snap);
  d.per_request = plain == nullptr && inspecting != nullptr;
  return d;
}

}  // namespace

Decision decide_http(std::string_view host, std::uint16_t port, const Snapshot& snap,
                     TenantId tenant) {
  std::string storage;
  Decision refused;
  const auto key = http_key(host, port, snap, storage, refused);
  if (!key) return refused;
  return apply_mode(match_http(*key, port, snap, tenant_of(snap, tenant)), snap.rules.mode);
}

Decision decide_request(std::string_view host, std::uint16_t port, std::string_view method,
                        std::string_view path, const Snapshot& snap, TenantId tenant) {
  std::string storage;
  Decision refused;
  const auto key = http_key(host, port, snap, storage, refused);
  if (!key) return refused;
  const Tenant* t = tenant_of(snap, tenant);
  Decision d = match_http(*key, port, snap, t);
  if (d.per_request) {
    const HttpRule* r = snap.http.match_request(*key, port, method, path);
    if (r == nullptr && t != nullptr) r = t->http.match_request(*key, port, method, path);
    if (r != nullptr) {
      d.rule = r->text;
    } else {
      d.verdict = Verdict::deny;
      d.reason = Reason::not_allowlisted;
      d.rule = {};
    }
  }
  return apply_mode(d, snap.rules.mode);
}

Decision decide_dns(std::string_view qname, const Snapshot& snap, TenantId tenant) {
  std::string storage;
  const auto name = matchable_name(qname, storage);
  if (!name) return deny(Reason::invalid_target);
  const DnsRule* rule = snap.dns.match(*name);
  if (rule == nullptr && tenant == kEveryTenant) {
    rule = snap.tenant_dns.match(*name);
  } else if (rule == nullptr) {
    if (const Tenant* t = tenant_of(snap, tenant)) rule = t->dns.match(*name);
  }
  return apply_mode(from_match(rule), snap.rules.mode);
}

}  // namespace vibepit::policy
