// Authorities and request targets. The host that policy sees must be the host that is
// dialled, so anything a resolver or inet_aton could read two ways is refused here.
#include "vibepit/http/authority.hpp"

#include <string>
#include <utility>

#include "vibepit/policy/name.hpp"

namespace vibepit::http {
namespace {

using policy::IpAddr;

constexpr std::size_t kMaxPortDigits = 5;

TargetError err(std::string_view what) {
  return TargetError{std::string(what)};
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::optional<TargetError> parse_port(std::string_view s, std::uint16_t& port) {
  if (s.empty()) return err("empty port");
  for (char c : s) {
    if (!is_digit(c)) return err("invalid port");
  }
  if (s.size() > kMaxPortDigits) return err("port out of range");
  unsigned value = 0;
  for (char c : s) value = value * 10 + static_cast<unsigned>(c - '0');
  if (value == 0 || value > 65535) return err("port out of range");
  port = static_cast<std::uint16_t>(value);
  return std::nullopt;
}

std::optional<TargetError> parse_host(std::string_view host, Authority& a) {
  if (host.empty()) return err("empty host");
  if (host.size() > policy::kMaxNameLength + 1) return err("host name too long");
  for (char c : host) {
    if (!(is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_')) {
      return err("invalid character in host");
    }
  }
  const bool trailing_dot = host.back() == '.';
  if (trailing_dot) host.remove_suffix(1);
  if (host.empty()) return err("empty host");
  if (host.size() > policy::kMaxNameLength) return err("host name too long");
  // The rule grammar's own check: a host that passes here is one a rule can name.
  switch (const policy::NameProblem problem = policy::check_name(host)) {
    case policy::NameProblem::ok:
      break;
    case policy::NameProblem::empty_label:
      return err("empty label in host");
    case policy::NameProblem::label_too_long:
      return err("host label too long");
    case policy::NameProblem::numeric:
      return err("non-canonical IPv4 address");
    case policy::NameProblem::dotted_quad: {
      // check_name says dotted_quad only for four decimal parts, 0..255, no leading zeros.
      if (trailing_dot) return err("non-canonical IPv4 address");
      const auto ip = IpAddr::parse(host);
      if (!ip || ip->v6) return err("invalid IPv4 address");
      a.host = ip->to_string();
      a.ip = ip;
      return std::nullopt;
    }
    default:
      return err("invalid host: " + policy::describe(problem));
  }
  policy::normalize_name(host, a.host);
  return std::nullopt;
}

std::optional<std::uint16_t> scheme_default_port(std::string_view scheme) {
  if (scheme == "http") return 80;
  if (scheme == "https") return 443;
  return std::nullopt;
}

}  // namespace

std::string Authority::display() const {
  return policy::join_host_port(host, port);  // only IPv6 text holds ':'
}

std::optional<TargetError> parse_authority(std::string_view text,
                                           std::optional<std::uint16_t> default_port,
                                           Authority& a) {
  a.ip.reset();
  a.port = 0;
  if (text.empty()) return err("empty authority");
  for (char c : text) {
    if (c == '@') return err("userinfo not allowed");
    if (c == '%') return err("percent-encoding not allowed in authority");
  }
  std::string_view port_text;
  bool has_port = false;
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return err("unterminated IPv6 literal");
    const auto ip = IpAddr::parse(text.substr(1, close - 1));
    if (!ip || !ip->v6) return err("invalid IPv6 literal");
    a.host = ip->to_string();
    a.ip = ip;
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return err("invalid character after IPv6 literal");
      has_port = true;
      port_text = rest.substr(1);
    }
  } else {
    const std::size_t colon = text.find(':');
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = text.substr(colon + 1);
      if (port_text.find(':') != std::string_view::npos) {
        return err("IPv6 address must be in brackets");
      }
    }
    if (auto e = parse_host(text.substr(0, colon), a)) return *e;
  }
  if (has_port) {
    if (auto e = parse_port(port_text, a.port)) return *e;
  } else if (default_port) {
    a.port = *default_port;
  } else {
    return err("missing port");
  }
  return std::nullopt;
}

std::variant<Authority, TargetError> parse_authority(std::string_view text,
                                                     std::optional<std::uint16_t> default_port) {
  Authority a;
  if (auto e = parse_authority(text, default_port, a)) return std::move(*e);
  return a;
}

std::optional<TargetError> parse_target(std::string_view method, std::string_view target,
                                        Target& t) {
  // Every field is set anew (the strings keep their capacity): nothing of the last
  // request's target survives into this one's.
  t.form = TargetForm::origin;
  t.scheme.clear();
  t.path.clear();
  t.authority.host.clear();
  t.authority.ip.reset();
  t.authority.port = 0;
  if (target.empty()) return err("empty request target");
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u >= 0x7f) return err("invalid character in request target");
  }
  if (method == "CONNECT") {
    if (auto e = parse_authority(target, std::nullopt, t.authority)) return e;
    t.form = TargetForm::authority;
    return std::nullopt;
  }
  if (target == "*") {
    if (method != "OPTIONS") return err("asterisk-form is only valid with OPTIONS");
    t.form = TargetForm::asterisk;
    return std::nullopt;
  }
  if (target.find('#') != std::string_view::npos) return err("fragment not allowed in target");
  if (target.front() == '/') {
    t.form = TargetForm::origin;
    t.path.assign(target);
    return std::nullopt;
  }
  // absolute-form: scheme "://" authority path-abempty [ "?" query ]
  std::size_t i = 0;
  if (!is_alpha(target[0])) return err("invalid request target");
  while (i < target.size() && (is_alpha(target[i]) || is_digit(target[i]) || target[i] == '+' ||
                               target[i] == '-' || target[i] == '.')) {
    ++i;
  }
  if (target.substr(i, 3) != "://") return err("invalid request target");
  t.scheme.resize(i);
  for (std::size_t k = 0; k < i; ++k) t.scheme[k] = lower(target[k]);
  const std::string_view rest = target.substr(i + 3);
  const std::size_t end = rest.find_first_of("/?");
  const std::string_view auth = rest.substr(0, end);
  if (auth.empty()) return err("empty host");
  if (auto e = parse_authority(auth, scheme_default_port(t.scheme), t.authority)) return e;
  t.form = TargetForm::absolute;
  if (end == std::string_view::npos) {
    t.path.assign("/");
  } else if (rest[end] == '?') {
    t.path.assign("/");
    t.path += rest.substr(end);
  } else {
    t.path.assign(rest.substr(end));
  }
  return std::nullopt;
}

std::string_view authority_text(std::string_view target) {
  if (const auto scheme = target.find("://"); scheme != std::string_view::npos)
    target.remove_prefix(scheme + 3);
  else if (target.empty() || target.front() == '/' || target.front() == '*')
    return {};
  target = target.substr(0, target.find_first_of("/?#"));
  if (const auto at = target.rfind('@'); at != std::string_view::npos) target.remove_prefix(at + 1);
  return target.substr(0, 256);
}

std::variant<Target, TargetError> parse_target(std::string_view method, std::string_view target) {
  Target t;
  if (auto e = parse_target(method, target, t)) return std::move(*e);
  return t;
}

}  // namespace vibepit::http
