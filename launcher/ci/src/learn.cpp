// Rule learning for `vibepit ci --mode learn`.
#include "vibepit/launcher/ci/learn.hpp"

#include <libpsl.h>

#include <algorithm>
#include <map>
#include <set>
#include <variant>

#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/rules.hpp"

namespace vibepit::launcher {
namespace {

// libpsl's newest list: the system's (package publicsuffix) or the one built into libpsl.
const psl_ctx_t* psl() {
  static const psl_ctx_t* ctx = [] {
    const psl_ctx_t* latest = psl_latest(nullptr);
    return latest ? latest : psl_builtin();
  }();
  return ctx;
}

// Exact entries, or one wildcard where two or more names below one registrable domain were
// used (the apex itself, if used, stays exact: *.example.com does not cover it).
std::vector<std::string> collapse(const std::set<std::string>& names) {
  std::map<std::string, std::set<std::string>> below;  // registrable domain -> names under it
  std::vector<std::string> out;
  for (const auto& n : names) {
    auto reg = registrable_domain(n);
    if (reg && *reg != n)
      below[*reg].insert(n);
    else
      out.push_back(n);
  }
  for (const auto& [reg, under] : below) {
    if (under.size() >= 2)
      out.push_back("*." + reg);
    else
      out.push_back(*under.begin());
  }
  return out;
}

bool valid_http(const std::string& e) {
  return std::holds_alternative<policy::HttpRule>(policy::parse_http_rule(e));
}
bool valid_dns(const std::string& e) {
  return std::holds_alternative<policy::DnsRule>(policy::parse_dns_rule(e));
}

}  // namespace

std::optional<std::string> registrable_domain(std::string_view name) {
  if (name.empty() || policy::IpAddr::parse(name)) return std::nullopt;
  const std::string n(name);
  const char* reg = psl_registrable_domain(psl(), n.c_str());
  if (reg == nullptr) return std::nullopt;
  return std::string(reg);
}

Proposal propose_rules(const std::vector<Destination>& destinations) {
  std::set<std::string> http, dns;                            // final entries
  std::map<std::uint16_t, std::set<std::string>> http_names;  // port -> learned names
  std::set<std::string> dns_names;
  for (const auto& d : destinations) {
    if (d.allowed == 0 && d.would_deny == 0) continue;  // never went ahead
    const bool by_rule = d.would_deny == 0 && !d.rule.empty();
    if (d.protocol == "dns") {
      if (by_rule)
        dns.insert(d.rule);
      else
        dns_names.insert(d.host);
    } else if (by_rule) {
      http.insert(d.rule);
    } else if (auto ip = policy::IpAddr::parse(d.host)) {
      http.insert(policy::join_host_port(ip->to_string(), d.port));
    } else {
      http_names[d.port].insert(d.host);
    }
  }
  for (const auto& [port, names] : http_names)
    for (const auto& e : collapse(names)) http.insert(e + ":" + std::to_string(port));
  for (const auto& e : collapse(dns_names)) dns.insert(e);

  Proposal p;
  std::copy_if(http.begin(), http.end(), std::back_inserter(p.allow_http), valid_http);
  std::copy_if(dns.begin(), dns.end(), std::back_inserter(p.allow_dns), valid_dns);
  return p;
}

std::string proposal_yaml(const Proposal& p, std::string_view origin) {
  std::string from(origin);
  std::replace(from.begin(), from.end(), '\n', ' ');
  std::string out = "# Proposed by vibepit ci --mode learn from " + from +
                    ".\n# Review it, then save it as .vibepit/network.yaml.\n";
  // Entries are valid rules (checked above), so they hold only name and port characters;
  // quoting keeps "*" from reading as a YAML alias.
  out += "allow-http:";
  out += p.allow_http.empty() ? " []\n" : "\n";
  for (const auto& e : p.allow_http) out += "  - \"" + e + "\"\n";
  out += "allow-dns:";
  out += p.allow_dns.empty() ? " []\n" : "\n";
  for (const auto& e : p.allow_dns) out += "  - \"" + e + "\"\n";
  return out;
}

}  // namespace vibepit::launcher
