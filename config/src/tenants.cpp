// Keys tenants and dns-tenants (docs/fleet.md): who may use a shared gateway, with what
// rules, and which DNS clients are which tenant.
#include <algorithm>
#include <string>

#include "json_values.hpp"
#include "vibepit/config/config.hpp"

namespace vibepit::config {
namespace detail {

using json = nlohmann::json;

// One entry of key tenants: {name, token-file, allow-http?, allow-dns?}.
void parse_tenant(const json& v, std::size_t index, Config& cfg) {
  const std::string key = "tenants";
  const std::string at = "entry " + std::to_string(index) + ": ";
  if (!v.is_object()) throw ConfigError(key, at + "must be an object, got " + type_name(v));
  TenantConfig t;
  policy::TenantRuleSet rules;
  for (const auto& [k, x] : v.items()) {
    if (k == "name" || k == "token-file") {
      if (!x.is_string() || x.get<std::string>().empty())
        throw ConfigError(key, at + k + " must be a non-empty string");
      (k == "name" ? t.name : t.token_file) = x.get<std::string>();
    } else if (k == "allow-http") {
      rules.allow_http = string_list(x, key);
    } else if (k == "allow-dns") {
      rules.allow_dns = string_list(x, key);
    } else {
      throw ConfigError(key, at + "unknown key \"" + k.substr(0, 32) +
                                 "\" (name, token-file, allow-http, allow-dns; a token is never "
                                 "written in the config)");
    }
  }
  if (t.name.empty() || t.token_file.empty())
    throw ConfigError(key, at + "needs name and token-file");
  if (auto why = policy::tenant_name_problem(t.name); !why.empty())
    throw ConfigError(key, at + "\"" + t.name.substr(0, 64) + "\": " + why);
  if (t.token_file.front() != '/')
    throw ConfigError(key, at + "token-file must be an absolute path");
  for (const auto& other : cfg.tenants) {
    if (other.name == t.name) throw ConfigError(key, "two tenants are named " + t.name);
  }
  rules.name = t.name;
  cfg.tenants.push_back(std::move(t));
  cfg.rules.tenants.push_back(std::move(rules));
}

void parse_tenants(const json& v, Config& cfg) {
  if (!v.is_array() || v.empty())
    throw ConfigError("tenants", "must be a list of one or more objects");
  for (std::size_t i = 0; i < v.size(); ++i) parse_tenant(v[i], i, cfg);
}

void parse_dns_tenants(const json& v, Config& cfg) {
  const std::string key = "dns-tenants";
  if (!v.is_object() || v.empty())
    throw ConfigError(key, "must be an object of one or more \"CIDR\": \"TENANT\" entries");
  if (cfg.tenants.empty()) throw ConfigError(key, "needs key tenants");
  auto& ranges = cfg.dns.tenant_ranges;
  for (const auto& [k, x] : v.items()) {
    const auto cidr = policy::Cidr::parse(k);
    if (!cidr)
      throw ConfigError(key,
                        "\"" + k.substr(0, 64) + "\" is not a range (ADDR/PREFIX, no host bits)");
    if (!x.is_string()) throw ConfigError(key, k + ": must name a tenant");
    const auto name = x.get<std::string>();
    const auto it = std::find_if(cfg.tenants.begin(), cfg.tenants.end(),
                                 [&](const TenantConfig& t) { return t.name == name; });
    if (it == cfg.tenants.end())
      throw ConfigError(key, k + ": no tenant is named \"" + name.substr(0, 64) + "\"");
    const bool twice =
        std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first == *cidr; });
    if (twice) throw ConfigError(key, k + " is given twice");
    ranges.emplace_back(*cidr, static_cast<policy::TenantId>(it - cfg.tenants.begin()));
  }
  // The most specific range first: a client in two ranges is the narrower one's tenant.
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const auto& a, const auto& b) { return a.first.prefix > b.first.prefix; });
}

}  // namespace detail

policy::TenantId dns_tenant(const DnsConfig& cfg, const policy::IpAddr& addr) {
  if (cfg.tenant_ranges.empty()) return policy::kEveryTenant;
  for (const auto& [range, tenant] : cfg.tenant_ranges) {
    if (range.contains(addr)) return tenant;
  }
  return policy::kNoTenant;
}

}  // namespace vibepit::config
