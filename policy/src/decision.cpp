// Pure decisions over one snapshot. Hosts are validated here as well as normalised, so
// that forms a resolver would read as an address ("127.1") never reach the name rules.
#include "vibepit/policy/decision.hpp"

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

Decision decide_http(std::string_view host, std::uint16_t port, const Snapshot& snap) {
  if (host.empty() || port == 0) return deny(Reason::invalid_target);
  std::string_view literal = host;
  if (literal.size() >= 2 && literal.front() == '[' && literal.back() == ']') {
    literal = literal.substr(1, literal.size() - 2);  // tolerate "[2001:db8::1]"
  }
  if (auto ip = IpAddr::parse(literal)) {
    Classification c = snap.classifier.classify(*ip);
    if (c.blocked) {
      Decision d = deny(Reason::blocked_address);
      d.range = std::move(c.range);
      return d;
    }
    return apply_mode(from_match(snap.http.match(ip->to_string(), port)), snap.rules.mode);
  }
  std::string storage;
  const auto name = matchable_name(host, storage);
  if (!name) return deny(Reason::invalid_target);
  return apply_mode(from_match(snap.http.match(*name, port)), snap.rules.mode);
}

Decision decide_dns(std::string_view qname, const Snapshot& snap) {
  std::string storage;
  const auto name = matchable_name(qname, storage);
  if (!name) return deny(Reason::invalid_target);
  return apply_mode(from_match(snap.dns.match(*name)), snap.rules.mode);
}

}  // namespace vibepit::policy
