#include "vibepit/control/rule_updater.hpp"

#include <stdexcept>
#include <unordered_set>

namespace vibepit::control {

const char* to_string(RuleList list) {
  return list == RuleList::allow_http ? "allow-http" : "allow-dns";
}

std::variant<AddResult, std::vector<policy::RuleError>> RuleUpdater::add(
    RuleList list, const std::vector<std::string>& entries) {
  std::vector<policy::RuleError> errors;
  std::vector<std::string> canonical;
  canonical.reserve(entries.size());
  for (const auto& entry : entries) {
    if (list == RuleList::allow_http) {
      auto r = policy::parse_http_rule(entry);
      if (auto* e = std::get_if<policy::RuleError>(&r)) {
        errors.push_back(std::move(*e));
      } else {
        canonical.push_back(std::get<policy::HttpRule>(r).text);
      }
    } else {
      auto r = policy::parse_dns_rule(entry);
      if (auto* e = std::get_if<policy::RuleError>(&r)) {
        errors.push_back(std::move(*e));
      } else {
        canonical.push_back(std::get<policy::DnsRule>(r).text);
      }
    }
  }
  if (!errors.empty()) return errors;

  std::lock_guard lock(mu_);
  auto snap = store_.current();
  const auto& present =
      list == RuleList::allow_http ? snap->rules.allow_http : snap->rules.allow_dns;
  std::unordered_set<std::string> seen(present.begin(), present.end());
  AddResult out;
  for (auto& text : canonical) {
    if (seen.insert(text).second) {
      out.added.push_back(std::move(text));
    } else {
      out.existing.push_back(std::move(text));
    }
  }
  if (out.added.empty()) {
    out.generation = snap->generation;
    return out;
  }
  policy::RuleSet next = snap->rules;
  auto& target = list == RuleList::allow_http ? next.allow_http : next.allow_dns;
  target.insert(target.end(), out.added.begin(), out.added.end());
  auto compiled = policy::compile_mutable(next);
  if (auto* errs = std::get_if<std::vector<policy::RuleError>>(&compiled)) return *errs;
  out.generation = store_.publish(std::get<std::shared_ptr<policy::Snapshot>>(std::move(compiled)));
  return out;
}

std::uint64_t RuleUpdater::set_mode(policy::Mode mode, bool& changed) {
  std::lock_guard lock(mu_);
  auto snap = store_.current();
  changed = snap->rules.mode != mode;
  if (!changed) return snap->generation;
  policy::RuleSet next = snap->rules;
  next.mode = mode;
  // The rules compiled once already; only a broken invariant could fail here.
  auto compiled = policy::compile_mutable(next);
  if (std::holds_alternative<std::vector<policy::RuleError>>(compiled))
    throw std::logic_error("the rules in force no longer compile");
  return store_.publish(std::get<std::shared_ptr<policy::Snapshot>>(std::move(compiled)));
}

}  // namespace vibepit::control
