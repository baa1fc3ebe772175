#include "vibepit/config/rules_file.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <unordered_set>

#include <yaml-cpp/yaml.h>

namespace vibepit::config {
namespace {

std::string where(const std::string& name, const YAML::Mark& m) {
  return name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

std::vector<std::string> strings(const YAML::Node& v, const std::string& what,
                                 const std::string& name) {
  std::vector<std::string> out;
  if (v.IsNull()) return out;
  if (!v.IsSequence())
    throw RulesFileError(where(name, v.Mark()) + ": " + what + " must be a list");
  for (const auto& item : v) {
    if (!item.IsScalar())
      throw RulesFileError(where(name, item.Mark()) + ": " + what + " entries must be strings");
    out.push_back(item.Scalar());
  }
  return out;
}

// allow-http and allow-dns of one mapping (the top level's, or a tenant's), into `http` and
// `dns`; `extra` is the one further key the mapping may have ("tenants" at the top), which
// the caller reads.
void read_lists(const YAML::Node& map, const std::string& scope, const std::string& name,
                const char* extra, std::vector<std::string>& http, std::vector<std::string>& dns) {
  std::unordered_set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    if (!seen.insert(key).second)
      throw RulesFileError(where(name, kv.first.Mark()) + ": \"" + key + "\" appears twice");
    if (key == "allow-http") {
      http = strings(kv.second, scope + "allow-http", name);
    } else if (key == "allow-dns") {
      dns = strings(kv.second, scope + "allow-dns", name);
    } else if (extra == nullptr || key != extra) {
      throw RulesFileError(where(name, kv.first.Mark()) + ": unknown key \"" + key.substr(0, 64) +
                           "\" (allow-http, allow-dns" + (extra ? std::string(", ") + extra : "") +
                           ")");
    }
  }
}

}  // namespace

RulesFile parse_rules_file(const std::string& text, const std::string& name) {
  RulesFile out;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw RulesFileError(where(name, e.mark) + ": " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) return out;
  if (!root.IsMap())
    throw RulesFileError(where(name, root.Mark()) +
                         ": the top level must be a mapping with the keys allow-http, allow-dns "
                         "and tenants");
  read_lists(root, "", name, "tenants", out.allow_http, out.allow_dns);
  const YAML::Node tenants = root["tenants"];
  if (!tenants || tenants.IsNull()) return out;
  if (!tenants.IsMap())
    throw RulesFileError(where(name, tenants.Mark()) +
                         ": tenants must map each tenant's name to its allow-http and allow-dns");
  for (const auto& kv : tenants) {
    if (!kv.first.IsScalar())
      throw RulesFileError(where(name, kv.first.Mark()) + ": a tenant's name must be a string");
    policy::TenantRuleSet t;
    t.name = kv.first.Scalar();
    const bool twice =
        std::any_of(out.tenants.begin(), out.tenants.end(),
                    [&](const policy::TenantRuleSet& x) { return x.name == t.name; });
    if (twice)
      throw RulesFileError(where(name, kv.first.Mark()) + ": tenant \"" + t.name.substr(0, 64) +
                           "\" appears twice");
    if (!kv.second.IsNull()) {
      if (!kv.second.IsMap())
        throw RulesFileError(where(name, kv.second.Mark()) + ": tenant \"" + t.name.substr(0, 64) +
                             "\" must be a mapping");
      read_lists(kv.second, "tenant " + t.name.substr(0, 64) + " ", name, nullptr, t.allow_http,
                 t.allow_dns);
    }
    out.tenants.push_back(std::move(t));
  }
  return out;
}

std::string read_rules_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RulesFileError("cannot read rules file \"" + path + "\"");
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxRulesFile)
      throw RulesFileError("rules file \"" + path + "\" is larger than " +
                           std::to_string(kMaxRulesFile) + " bytes");
  }
  if (in.bad()) throw RulesFileError("cannot read rules file \"" + path + "\"");
  return text;
}

policy::RuleSet merge_rules(const policy::RuleSet& base, const RulesFile& file) {
  policy::RuleSet out = base;
  out.allow_http.insert(out.allow_http.end(), file.allow_http.begin(), file.allow_http.end());
  out.allow_dns.insert(out.allow_dns.end(), file.allow_dns.begin(), file.allow_dns.end());
  for (const auto& t : file.tenants) {
    auto it = std::find_if(out.tenants.begin(), out.tenants.end(),
                           [&](const policy::TenantRuleSet& x) { return x.name == t.name; });
    if (it == out.tenants.end())
      throw RulesFileError("tenant \"" + t.name.substr(0, 64) +
                           "\" is not in the configuration's tenants (its token would be "
                           "nowhere)");
    it->allow_http.insert(it->allow_http.end(), t.allow_http.begin(), t.allow_http.end());
    it->allow_dns.insert(it->allow_dns.end(), t.allow_dns.begin(), t.allow_dns.end());
  }
  return out;
}

}  // namespace vibepit::config
