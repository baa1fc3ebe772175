// libFuzzer target: the rule grammar, IP and CIDR parsing, compile() and the decisions.
// Invariants are checked with CHECK, which aborts even in release builds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../unit/policy/path_glob_reference.hpp"
#include "fuzz_check.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/request_rule.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace {

using namespace vibepit::policy;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

void check_error(const RuleError& e, std::string_view list, std::string_view entry) {
  CHECK(e.list == list);
  CHECK(e.entry == entry);
  CHECK(!e.what.empty());
  CHECK(starts_with(e.message(), std::string(list) + " entry \""));
}

// Reference glob matcher: plain recursion, obviously right for short globs.
bool glob_ref(std::string_view g, std::string_view t) {
  if (g.empty()) return t.empty();
  if (g[0] == '*') {
    for (std::size_t i = 0; i <= t.size(); ++i) {
      if (glob_ref(g.substr(1), t.substr(i))) return true;
    }
    return false;
  }
  return !t.empty() && g[0] == t[0] && glob_ref(g.substr(1), t.substr(1));
}

// A port the glob matches, or 0 when a quick search finds none.
std::uint16_t some_port(const std::string& glob) {
  for (unsigned p = 1; p <= 65535; ++p) {
    if (port_glob_matches(glob, static_cast<std::uint16_t>(p)))
      return static_cast<std::uint16_t>(p);
  }
  return 0;
}

void fuzz_http(std::string_view in) {
  auto parsed = parse_http_rule(in);
  if (auto* err = std::get_if<RuleError>(&parsed)) {
    check_error(*err, "allow-http", in);
    return;
  }
  const HttpRule& rule = std::get<HttpRule>(parsed);
  // The canonical text is a fixed point of parsing.
  auto again = parse_http_rule(rule.text);
  CHECK(std::holds_alternative<HttpRule>(again));
  const HttpRule& rule2 = std::get<HttpRule>(again);
  CHECK(rule2.text == rule.text);
  CHECK(rule2.kind == rule.kind);
  CHECK(rule2.port_glob == rule.port_glob);
  CHECK(rule2.ip == rule.ip);
  CHECK(rule2.domain.name == rule.domain.name);
  CHECK(rule2.domain.wildcard == rule.domain.wildcard);
  // The port glob matches at least one valid port (load refuses globs that match none).
  std::uint16_t port = some_port(rule.port_glob);
  CHECK(port != 0);
  // An IP literal is never in an always-blocked range.
  if (rule.kind == HttpRule::Kind::ip) CHECK(!classify_always_blocked(rule.ip).blocked);
  // The rule matches what it names, through a snapshot and decide_http.
  auto snap = std::get<std::shared_ptr<const Snapshot>>(compile(RuleSet{{rule.text}, {}, {}}, 1));
  if (rule.kind == HttpRule::Kind::ip) {
    Decision d = decide_http(rule.ip.to_string(), port, *snap);
    CHECK(d.verdict == Verdict::allow || d.reason == Reason::blocked_address);
    if (d.verdict == Verdict::allow) CHECK(d.rule == rule.text);
  } else if (!rule.domain.wildcard) {
    Decision d = decide_http(rule.domain.name, port, *snap);
    CHECK(d.verdict == Verdict::allow && d.rule == rule.text);
  } else {
    CHECK(decide_http(rule.domain.name, port, *snap).verdict == Verdict::deny);  // the apex
    if (rule.domain.name.size() + 2 <= 253) {
      Decision d = decide_http("x." + rule.domain.name, port, *snap);
      CHECK(d.verdict == Verdict::allow && d.rule == rule.text);
    }
  }
}

void fuzz_dns(std::string_view in) {
  auto parsed = parse_dns_rule(in);
  if (auto* err = std::get_if<RuleError>(&parsed)) {
    check_error(*err, "allow-dns", in);
    return;
  }
  const DnsRule& rule = std::get<DnsRule>(parsed);
  auto again = parse_dns_rule(rule.text);
  CHECK(std::holds_alternative<DnsRule>(again));
  CHECK(std::get<DnsRule>(again).text == rule.text);
  CHECK(rule.text == rule.domain.to_string());
  CHECK(normalize_name(rule.domain.name) == rule.domain.name);
  DnsMatcher m;
  CHECK(m.add(rule));
  CHECK(!m.add(rule));  // a duplicate is refused
  if (rule.domain.wildcard) {
    CHECK(m.match(rule.domain.name) == nullptr);  // the apex is not covered
    if (rule.domain.name.size() + 2 <= 253) CHECK(m.match("x." + rule.domain.name) != nullptr);
  } else {
    CHECK(m.match(rule.domain.name) != nullptr);
  }
}

void fuzz_cidr(std::string_view in) {
  auto parsed = parse_block_cidr(in);
  auto strict = Cidr::parse(in);
  if (auto* err = std::get_if<RuleError>(&parsed)) {
    check_error(*err, "block-cidr", in);
    CHECK(!strict.has_value());
    return;
  }
  const Cidr& cidr = std::get<Cidr>(parsed);
  CHECK(strict.has_value() && *strict == cidr);
  auto again = Cidr::parse(cidr.to_string());
  CHECK(again.has_value() && *again == cidr);
  CHECK(cidr.contains(cidr.base));
  Classifier c({cidr});
  CHECK(c.classify(cidr.base).blocked);
}

void fuzz_ip(std::string_view in, std::uint16_t port, const Snapshot& snap) {
  auto ip = IpAddr::parse(in);
  if (ip) {
    std::string text = ip->to_string();
    auto again = IpAddr::parse(text);
    CHECK(again.has_value() && *again == *ip);
    CHECK(again->to_string() == text);
    Classification c = Classifier().classify(*ip);
    CHECK(c.blocked == !c.range.empty());
    CHECK(c.blocked == !c.kind.empty());
    if (classify_always_blocked(*ip).blocked) CHECK(c.blocked);
    if (!ip->v6) CHECK(c.embedded.empty());
  }
  Decision d = decide_http(in, port, snap);
  CHECK(d.verdict == Verdict::deny || (d.reason == Reason::allowlisted && !d.rule.empty()));
  if (d.reason == Reason::blocked_address) CHECK(!d.range.empty());
  Decision q = decide_dns(in, snap);
  CHECK(q.verdict == Verdict::deny || !q.rule.empty());
}

void fuzz_glob(std::string_view in) {
  if (in.size() < 2) return;
  auto port = static_cast<std::uint16_t>(static_cast<unsigned char>(in[0]) << 8 |
                                         static_cast<unsigned char>(in[1]));
  std::string_view glob = in.substr(2, 12);
  std::string collapsed;  // runs of '*' mean one '*'; collapsing keeps the reference fast
  for (char c : glob) {
    if (c != '*' || collapsed.empty() || collapsed.back() != '*') collapsed += c;
  }
  std::string text = std::to_string(port);
  CHECK(port_glob_matches(glob, port) == glob_ref(collapsed, text));
}

void fuzz_compile(std::string_view in) {
  // One entry per line; the line number picks the list.
  RuleSet rules;
  std::size_t line = 0;
  for (std::size_t start = 0; start <= in.size(); ++line) {
    std::size_t end = in.find('\n', start);
    if (end == std::string_view::npos) end = in.size();
    std::string entry(in.substr(start, end - start));
    if (line % 3 == 0) rules.allow_http.push_back(entry);
    if (line % 3 == 1) rules.allow_dns.push_back(entry);
    if (line % 3 == 2) rules.block_cidr.push_back(entry);
    start = end + 1;
  }
  auto result = compile(rules, 3);
  if (auto* errors = std::get_if<std::vector<RuleError>>(&result)) {
    CHECK(!errors->empty());
    CHECK(errors->size() <= line);
    return;
  }
  const auto& snap = std::get<std::shared_ptr<const Snapshot>>(result);
  CHECK(snap->generation == 3);
  CHECK(snap->http.size() == snap->rules.allow_http.size());
  CHECK(snap->dns.size() == snap->rules.allow_dns.size());
  CHECK(snap->classifier.extra_blocked().size() == snap->rules.block_cidr.size());
  // Compiling the canonical rule set again changes nothing.
  const RuleSet canonical{snap->rules.allow_http.to_vector(), snap->rules.allow_dns.to_vector(),
                          snap->rules.block_cidr, snap->rules.mode};
  auto again = compile(canonical, 4);
  CHECK(std::holds_alternative<std::shared_ptr<const Snapshot>>(again));
  const auto& snap2 = std::get<std::shared_ptr<const Snapshot>>(again);
  CHECK(snap2->rules.allow_http.to_vector() == canonical.allow_http);
  CHECK(snap2->rules.allow_dns.to_vector() == canonical.allow_dns);
  CHECK(snap2->rules.block_cidr == canonical.block_cidr);
  // Every line is also a host to decide on against this snapshot.
  for (const auto& e : rules.allow_dns) fuzz_ip(e, 443, *snap);
}

}  // namespace

// A request's path as the rules see it: a normalised path is a fixed point, holds no dot
// segment and no escape a server could read as another path, and every glob the input
// makes matches it as a plain recursive reading of the glob does.
void fuzz_request_path(std::string_view in) {
  const NormalPath n = normalize_path(in);
  if (!n.error.empty()) {
    CHECK(n.path.empty() || n.path.front() == '/');
    return;
  }
  CHECK(!n.path.empty() && n.path.front() == '/');
  CHECK(n.path.size() <= in.size() + 1);
  CHECK(n.query.empty() || n.query.front() == '?');
  const NormalPath again = normalize_path(n.path);
  CHECK(again.error.empty() && again.path == n.path && again.query.empty());
  const auto segs = reference::path_segments(n.path);
  for (auto seg : segs) {
    CHECK(seg != "." && seg != "..");
    CHECK(seg.find('\\') == std::string_view::npos);
  }
  for (const char* bad : {"%2F", "%5C", "%00", "%2E"}) {
    CHECK(n.path.find(bad) == std::string::npos);
  }
  // Globs from the input's own segments (the first few), with wildcards in between.
  if (segs.size() > 12) return;
  for (unsigned mask = 0; mask < 27 && mask < 3u * segs.size(); ++mask) {
    RequestRule r;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      const unsigned pick = (mask >> (i % 5)) % 3;
      r.segments.emplace_back(pick == 0 ? std::string(segs[i]) : pick == 1 ? "*" : "**");
    }
    CHECK(r.matches_path(n.path) == reference::glob_matches(r.segments, 0, segs, 0));
    if (!r.segments.empty()) r.segments.pop_back();
    CHECK(r.matches_path(n.path) == reference::glob_matches(r.segments, 0, segs, 0));
  }
}

// An entry with methods and a path: its rule allows what it names, and only that.
void fuzz_request_rule(std::string_view in) {
  const auto sp = in.find(' ');
  if (sp == std::string_view::npos) return;
  auto parsed = parse_request_rule(in.substr(0, sp), in.substr(sp + 1));
  if (std::holds_alternative<std::string>(parsed)) {
    CHECK(!std::get<std::string>(parsed).empty());
    return;
  }
  const RequestRule& r = std::get<RequestRule>(parsed);
  const auto tsp = r.text.find(' ');
  CHECK(tsp != std::string::npos);
  auto again = parse_request_rule(std::string_view(r.text).substr(0, tsp),
                                  std::string_view(r.text).substr(tsp + 1));
  CHECK(std::holds_alternative<RequestRule>(again));
  CHECK(std::get<RequestRule>(again).text == r.text);
  CHECK(r.segments.size() <= kMaxGlobSegments && r.methods.size() <= kMaxMethods);
  // A path made of the glob's own segments, wildcards filled in, is matched.
  std::string path;
  for (const auto& seg : r.segments)
    path += "/" + (seg == "*" || seg == "**" ? std::string("x") : seg);
  if (path.empty()) path = "/";
  const NormalPath n = normalize_path(path);
  if (n.error.empty() && n.path == path) {
    CHECK(r.matches_path(path));
    const std::string method = r.methods.empty() ? std::string("PATCH") : r.methods.front();
    CHECK(r.matches(method, path));
    auto entry = "a.test:443 " + r.text;
    auto rule = parse_http_rule(entry);
    CHECK(std::holds_alternative<HttpRule>(rule));
    auto snap = std::get<std::shared_ptr<const Snapshot>>(compile(RuleSet{{entry}, {}, {}}, 1));
    const Decision tunnel = decide_http("a.test", 443, *snap);
    CHECK(tunnel.verdict == Verdict::allow && tunnel.inspect && tunnel.per_request);
    const Decision d = decide_request("a.test", 443, method, path, *snap);
    CHECK(d.verdict == Verdict::allow && d.rule == entry);
    if (!r.methods.empty()) {
      CHECK(decide_request("a.test", 443, "get", path, *snap).verdict == Verdict::deny);
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  static const std::shared_ptr<const Snapshot> snap = std::get<std::shared_ptr<const Snapshot>>(
      compile(RuleSet{{"example.com:443", "*.example.com:8*", "203.0.113.7:443", "[2001:db8::1]:*"},
                      {"example.com", "*.example.com"},
                      {"198.51.100.0/24"}},
              1));
  fuzz_http(in);
  fuzz_dns(in);
  fuzz_cidr(in);
  fuzz_ip(in, 443, *snap);
  fuzz_ip(in, 8080, *snap);
  fuzz_glob(in);
  fuzz_compile(in);
  fuzz_request_path(in);
  fuzz_request_rule(in);
  return 0;
}
