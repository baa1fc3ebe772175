#include "vibepit/control/rule_updater.hpp"

#include <stdexcept>
#include <unordered_set>

namespace vibepit::control {

const char* to_string(RuleList list) {
  return list == RuleList::allow_http ? "allow-http" : "allow-dns";
}

namespace {

// Parses each entry once; `rules` receives the parsed rules, valid ones only.
template <class Rule, class Parse>
std::vector<policy::RuleError> parse_all(const std::vector<std::string>& entries, Parse parse,
                                         std::vector<Rule>& rules) {
  std::vector<policy::RuleError> errors;
  for (const auto& entry : entries) {
    auto r = parse(entry);
    if (auto* e = std::get_if<policy::RuleError>(&r)) {
      errors.push_back(std::move(*e));
    } else {
      rules.push_back(std::move(std::get<Rule>(r)));
    }
  }
  return errors;
}

// Moves the rules that neither the matcher in force nor an earlier entry of the same
// request holds out of `rules`, recording which were new. The cost grows with the entries
// given, not with the rules in force.
template <class Rule>
std::vector<Rule> only_new(std::vector<Rule>& rules, const policy::Snapshot& present,
                           policy::TenantId tenant, AddResult& out) {
  std::unordered_set<std::string> seen;
  std::vector<Rule> fresh;
  for (auto& rule : rules) {
    if (!policy::has_rule(present, rule, tenant) && seen.insert(rule.text).second) {
      out.added.push_back(rule.text);
      fresh.push_back(std::move(rule));
    } else {
      out.existing.push_back(rule.text);
    }
  }
  return fresh;
}

}  // namespace

std::variant<AddResult, std::vector<policy::RuleError>> RuleUpdater::add(
    RuleList list, const std::vector<std::string>& entries, policy::TenantId tenant) {
  policy::ParsedRules parsed;
  auto errors = list == RuleList::allow_http
                    ? parse_all(entries, policy::parse_http_rule, parsed.allow_http)
                    : parse_all(entries, policy::parse_dns_rule, parsed.allow_dns);
  if (!errors.empty()) return errors;

  std::lock_guard lock(mu_);
  auto snap = store_.current();
  AddResult out;
  policy::ParsedRules fresh;
  if (tenant != policy::kNoTenant && policy::tenant_of(*snap, tenant) == nullptr)
    throw std::invalid_argument("RuleUpdater::add: no such tenant");
  if (list == RuleList::allow_http) {
    fresh.allow_http = only_new(parsed.allow_http, *snap, tenant, out);
  } else {
    fresh.allow_dns = only_new(parsed.allow_dns, *snap, tenant, out);
  }
  if (out.added.empty()) {
    out.generation = snap->generation;
    return out;
  }
  out.generation = publish(policy::with_added(*snap, std::move(fresh), tenant));
  for (const auto& text : out.added) added_.push_back({list, tenant, text});
  return out;
}

void RuleUpdater::set_base(policy::RuleSet base) {
  std::lock_guard lock(mu_);
  base_ = std::move(base);
}

std::variant<std::uint64_t, std::string> RuleUpdater::apply_rules_file(
    const config::RulesFile& file) {
  std::lock_guard lock(mu_);
  auto invalid = [&](std::string why) {
    file_invalid_.fetch_add(1, std::memory_order_relaxed);
    return std::variant<std::uint64_t, std::string>(std::move(why));
  };
  policy::RuleSet rules;
  try {
    rules = config::merge_rules(base_, file);
  } catch (const config::RulesFileError& e) {
    return invalid(e.what());
  }
  for (const auto& a : added_) {
    if (a.tenant == policy::kNoTenant) {
      (a.list == RuleList::allow_http ? rules.allow_http : rules.allow_dns).push_back(a.text);
    } else {
      auto& tenant = rules.tenants.at(static_cast<std::size_t>(a.tenant));
      (a.list == RuleList::allow_http ? tenant.allow_http : tenant.allow_dns).push_back(a.text);
    }
  }
  const auto snap = store_.current();
  rules.mode = snap->rules.mode;
  auto compiled = policy::compile_mutable(rules);
  if (auto* errors = std::get_if<std::vector<policy::RuleError>>(&compiled)) {
    std::string why = errors->front().message();
    if (errors->size() > 1) why += " (and " + std::to_string(errors->size() - 1) + " more)";
    return invalid(std::move(why));
  }
  auto next = std::get<std::shared_ptr<policy::Snapshot>>(std::move(compiled));
  next->credentials = snap->credentials;
  if (snap->tenants && next->tenants) {
    std::vector<policy::TenantTokens> tokens;
    for (const auto& t : *snap->tenants) tokens.push_back(t.tokens);
    next = policy::with_tenant_tokens(*next, std::move(tokens));
  }
  file_applied_.fetch_add(1, std::memory_order_relaxed);
  return publish(std::move(next));
}

std::uint64_t RuleUpdater::set_tenant_tokens(std::vector<policy::TenantTokens> tokens) {
  std::lock_guard lock(mu_);
  return publish(policy::with_tenant_tokens(*store_.current(), std::move(tokens)));
}

std::uint64_t RuleUpdater::set_mode(policy::Mode mode, bool& changed) {
  std::lock_guard lock(mu_);
  auto snap = store_.current();
  changed = snap->rules.mode != mode;
  if (!changed) return snap->generation;
  auto next = policy::with_added(*snap, {});  // the rules in force, nothing parsed again
  next->rules.mode = mode;
  return publish(std::move(next));
}

std::variant<std::uint64_t, std::string> RuleUpdater::set_credential(policy::Credential c,
                                                                     bool& replaced) {
  std::lock_guard lock(mu_);
  auto snap = store_.current();
  if (const auto* other = policy::credential_conflict(*snap, c.spec)) {
    return "credential " + other->spec.name + " already sets " + other->spec.header + " on " +
           other->spec.host.text + "; remove it first";
  }
  replaced = false;
  if (snap->credentials) {
    for (const auto& x : *snap->credentials) replaced = replaced || x.spec.name == c.spec.name;
  }
  return publish(policy::with_credential(*snap, std::move(c)));
}

std::optional<std::uint64_t> RuleUpdater::remove_credential(std::string_view name) {
  std::lock_guard lock(mu_);
  auto next = policy::without_credential(*store_.current(), name);
  if (!next) return std::nullopt;
  return publish(std::move(next));
}

std::uint64_t RuleUpdater::publish(std::shared_ptr<policy::Snapshot> next) {
  const auto generation = store_.publish(std::move(next));
  // This thread's cached snapshot moves on now, so that it does not keep the one replaced
  // (and a credential's value in it) alive until its next request.
  (void)store_.current();
  if (on_publish_) on_publish_();
  return generation;
}

}  // namespace vibepit::control
