// The rule grammar. Every rejection names the entry and the rule it breaks, because these
// messages are what a user sees when `vibepit allow-http` refuses an entry.
#include "vibepit/policy/rules.hpp"

#include <cstdio>

#include "ip_detail.hpp"
#include "vibepit/policy/classify.hpp"
#include "vibepit/policy/name.hpp"

namespace vibepit::policy {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (is_ascii_upper(c)) c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string printable(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", u);
  return buf;
}

// `text` in double quotes, with quotes, backslashes and control bytes escaped, so that
// entries from config or the control API cannot inject anything into logs or terminals.
std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += printable(c);
    }
  }
  out += '"';
  return out;
}

// Checks common to every list. Returns an error text, or empty when the entry may proceed.
std::string check_entry(std::string_view entry) {
  if (entry.empty()) return "empty entry";
  for (char c : entry) {
    if (is_space(c)) return "whitespace is not allowed";
  }
  return {};
}

// The outcome of parsing the domain part of an entry.
struct DomainParse {
  std::string error;  // set on failure
  bool is_ip = false;
  IpAddr ip;  // when is_ip: a strict dotted quad
  DomainPattern pattern;
};

DomainParse parse_domain(std::string_view text) {
  DomainParse out;
  if (text.empty()) {
    out.error = "empty domain";
    return out;
  }
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      out.error = "non-ASCII name; IDNs must be given in punycode (\"xn--...\")";
      return out;
    }
  }
  if (text == "*") {
    out.error = "a bare '*' would allow every name; use a domain such as \"*.example.com\"";
    return out;
  }
  bool wildcard = text.size() >= 2 && text[0] == '*' && text[1] == '.';
  std::string_view name = wildcard ? text.substr(2) : text;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);  // one trailing dot
  if (name.empty()) {
    out.error = "empty label in domain";
    return out;
  }
  if (name.size() + (wildcard ? 2 : 0) > kMaxNameLength) {
    out.error = "name longer than 253 octets";
    return out;
  }
  char bad = 0;
  switch (const NameProblem problem = check_name(name, &bad)) {
    case NameProblem::ok:
      break;
    case NameProblem::dotted_quad:
      if (wildcard) {
        out.error = describe(NameProblem::numeric);
        return out;
      }
      out.is_ip = true;
      out.ip = *IpAddr::parse(name);
      return out;
    case NameProblem::bad_char:
      out.error = "invalid character '" + printable(bad) +
                  "' in domain (letters, digits, '-' and '_' only)";
      return out;
    default:
      out.error = describe(problem);
      return out;
  }
  out.pattern.name = lower(name);
  out.pattern.wildcard = wildcard;
  return out;
}

// Validates a port glob and returns its canonical form (runs of '*' collapsed) in `glob`.
std::string parse_port_glob(std::string_view text, std::string& glob) {
  if (text.empty()) return "empty port";
  std::string shown = quote(text);
  bool star = false;
  for (char c : text) {
    if ((c < '0' || c > '9') && c != '*') return "bad port " + shown + ": digits and '*' only";
    if (c == '*') {
      if (!glob.empty() && glob.back() == '*') continue;
      star = true;
    }
    glob += c;
  }
  if (!star) {
    if (glob.size() > 1 && glob[0] == '0') return "bad port " + shown + ": leading zero";
    if (glob.size() > 5) return "port " + glob + " out of range (1-65535)";
    unsigned value = 0;
    for (char c : glob) value = value * 10 + static_cast<unsigned>(c - '0');
    if (value == 0) return "port 0 is not allowed";
    if (value > 65535) return "port " + glob + " out of range (1-65535)";
    return {};
  }
  // Five digits plus a '*' between and around each is the longest glob worth writing.
  if (glob.size() > 11) return "bad port " + shown + ": too long";
  for (unsigned p = 1; p <= 65535; ++p) {
    if (port_glob_matches(glob, static_cast<std::uint16_t>(p))) return {};
  }
  return "port glob " + shown + " matches no port in 1-65535";
}

std::string always_blocked_error(const IpAddr& ip) {
  Classification c = classify_always_blocked(ip);
  if (!c.blocked) return {};
  std::string what = "address " + ip.to_string();
  if (!c.embedded.empty()) what += " embeds " + c.embedded + ", which";
  what += " is in the always-blocked range " + c.range + " (" + std::string(c.kind) + ")";
  return what;
}

}  // namespace

std::string RuleError::message() const {
  return list + " entry " + quote(entry) + ": " + what;
}

std::string DomainPattern::to_string() const {
  return wildcard ? "*." + name : name;
}

std::variant<DnsRule, RuleError> parse_dns_rule(std::string_view entry) {
  auto fail = [&](std::string what) {
    return RuleError{"allow-dns", std::string(entry), std::move(what)};
  };
  if (auto e = check_entry(entry); !e.empty()) return fail(std::move(e));
  DomainParse d = parse_domain(entry);
  if (!d.error.empty()) return fail(std::move(d.error));
  if (d.is_ip) return fail("an IP address is not a DNS name");
  DnsRule rule;
  rule.text = d.pattern.to_string();
  rule.domain = std::move(d.pattern);
  return rule;
}

constexpr const char* kSpaces =
    "whitespace is not allowed (but for the single spaces of DOMAIN:PORT METHODS PATH)";

std::variant<HttpRule, RuleError> parse_http_rule(std::string_view whole) {
  auto fail = [&](std::string what) {
    return RuleError{"allow-http", std::string(whole), std::move(what)};
  };
  // DOMAIN:PORT, or DOMAIN:PORT METHODS PATH: one space between the parts, no other blank.
  std::string_view entry = whole, methods, path;
  if (const auto sp = whole.find(' '); sp != std::string_view::npos && sp > 0) {
    entry = whole.substr(0, sp);
    const auto rest = whole.substr(sp + 1);
    const auto sp2 = rest.find(' ');
    if (sp2 == std::string_view::npos || rest.find(' ', sp2 + 1) != std::string_view::npos ||
        sp2 == 0 || sp2 + 1 == rest.size()) {
      return fail(kSpaces);
    }
    methods = rest.substr(0, sp2);
    path = rest.substr(sp2 + 1);
    for (char c : rest) {
      if (is_space(c) && c != ' ') return fail(kSpaces);
    }
  }
  if (auto e = check_entry(entry); !e.empty()) return fail(std::move(e));
  HttpRule rule;
  std::string_view port;
  if (entry.front() == '[') {
    auto close = entry.find(']');
    if (close == std::string_view::npos) return fail("missing ']' after IPv6 address");
    auto ip = IpAddr::parse(entry.substr(1, close - 1));
    if (!ip || !ip->v6) return fail("not a valid IPv6 address in brackets");
    std::string_view rest = entry.substr(close + 1);
    if (rest.empty()) return fail("missing port (expected [IPV6]:PORT)");
    if (rest.front() != ':') return fail("expected ':PORT' after ']'");
    port = rest.substr(1);
    rule.kind = HttpRule::Kind::ip;
    rule.ip = *ip;
  } else {
    auto colon = entry.rfind(':');
    if (colon == std::string_view::npos) return fail("missing port (expected DOMAIN:PORT)");
    std::string_view host = entry.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      auto v6 = IpAddr::parse(host);
      if ((v6 && v6->v6) || IpAddr::parse(entry)) {
        return fail("an IPv6 address must be in brackets, e.g. \"[2001:db8::1]:443\"");
      }
      return fail(describe(NameProblem::numeric));
    }
    DomainParse d = parse_domain(host);
    if (!d.error.empty()) return fail(std::move(d.error));
    if (d.is_ip) {
      rule.kind = HttpRule::Kind::ip;
      rule.ip = d.ip;
    } else {
      rule.domain = std::move(d.pattern);
    }
    port = entry.substr(colon + 1);
  }
  if (auto e = parse_port_glob(port, rule.port_glob); !e.empty()) return fail(std::move(e));
  if (rule.kind == HttpRule::Kind::ip) {
    if (auto e = always_blocked_error(rule.ip); !e.empty()) return fail(std::move(e));
    rule.text = bracket_host(rule.ip.to_string());
  } else {
    rule.text = rule.domain.to_string();
  }
  rule.text += ':';
  rule.text += rule.port_glob;
  if (!path.empty()) {
    auto r = parse_request_rule(methods, path);
    if (auto* e = std::get_if<std::string>(&r)) return fail(std::move(*e));
    rule.request = std::move(std::get<RequestRule>(r));
    rule.text += ' ';
    rule.text += rule.request->text;
  }
  return rule;
}

std::variant<Cidr, RuleError> parse_block_cidr(std::string_view entry) {
  auto fail = [&](std::string what) {
    return RuleError{"block-cidr", std::string(entry), std::move(what)};
  };
  if (auto e = check_entry(entry); !e.empty()) return fail(std::move(e));
  Cidr cidr;
  auto slash = entry.find('/');
  switch (detail::parse_cidr(entry, cidr)) {
    case detail::CidrParse::ok:
      return cidr;
    case detail::CidrParse::missing_slash:
      return fail("missing prefix length (expected ADDRESS/PREFIX, e.g. \"203.0.113.0/24\")");
    case detail::CidrParse::bad_address:
      return fail(quote(entry.substr(0, slash)) + " is not a valid IP address");
    case detail::CidrParse::bad_prefix:
      return fail("bad prefix length " + quote(entry.substr(slash + 1)));
    case detail::CidrParse::prefix_range:
      return fail("prefix length " + std::to_string(cidr.prefix) + " out of range for " +
                  (cidr.base.v6 ? "IPv6 (0-128)" : "IPv4 (0-32)"));
    case detail::CidrParse::host_bits:
      return fail("host bits set; did you mean \"" +
                  detail::truncate(cidr.base, cidr.prefix).to_string() + "\"?");
  }
  return fail("invalid range");
}

bool port_glob_matches(std::string_view glob, std::uint16_t port) {
  if (glob.size() == 1 && glob[0] == '*') return true;
  char buf[5];
  int n = 0;
  char rev[5];
  unsigned p = port;
  do {
    rev[n++] = static_cast<char>('0' + p % 10);
    p /= 10;
  } while (p != 0);
  for (int i = 0; i < n; ++i) buf[i] = rev[n - 1 - i];
  std::string_view text(buf, static_cast<std::size_t>(n));
  // Iterative glob match: on a mismatch, let the last '*' swallow one more digit.
  std::size_t g = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      resume = t;
    } else if (g < glob.size() && glob[g] == text[t]) {
      ++g;
      ++t;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

}  // namespace vibepit::policy
