#pragma once
// The watched rules file (config key rules-file, docs/fleet.md): network.yaml's form, the
// top-level allow-http and allow-dns for everyone and a tenant's own under tenants:
//
//   allow-http: [pypi.org:443]
//   allow-dns: [pypi.org]
//   tenants:
//     team-a:
//       allow-http: ["api.team-a.example:443 GET /v1/**"]
//
// This reads its shape; the rules in it are checked when they are compiled with the rest
// (policy::compile), so that one invalid entry leaves the whole file unapplied.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::config {

struct RulesFile {
  std::vector<std::string> allow_http;
  std::vector<std::string> allow_dns;
  std::vector<policy::TenantRuleSet> tenants;  // in the file's order
};

class RulesFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kMaxRulesFile = 4u << 20;  // bytes

// Throws RulesFileError naming `name`, the line and column, and the problem: YAML errors,
// unknown keys, a key twice, values that are not lists of strings, a tenant twice.
RulesFile parse_rules_file(const std::string& text, const std::string& name);

// The whole file (symbolic links followed: a Kubernetes ConfigMap volume is made of them),
// at most kMaxRulesFile bytes. Throws RulesFileError when it cannot be read.
std::string read_rules_text(const std::string& path);

// `base` with the file's rules added: the top-level lists, and each tenant's to the tenant
// of that name in base. A tenant base does not have is an error (RulesFileError): its token
// would be nowhere.
policy::RuleSet merge_rules(const policy::RuleSet& base, const RulesFile& file);

}  // namespace vibepit::config
