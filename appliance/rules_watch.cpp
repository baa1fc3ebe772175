#include "rules_watch.hpp"

#include <string>
#include <variant>
#include <vector>

#include <spdlog/spdlog.h>

namespace vibepit::appliance {

StartRules load_start_rules(const std::string& path, const policy::RuleSet& base) {
  StartRules out;
  out.text = config::read_rules_text(path);
  const auto file = config::parse_rules_file(out.text, path);
  try {
    out.rules = config::merge_rules(base, file);
  } catch (const config::RulesFileError& e) {
    throw config::RulesFileError(path + ": " + e.what());
  }
  auto compiled = policy::compile(out.rules, 1);
  if (auto* errors = std::get_if<std::vector<policy::RuleError>>(&compiled)) {
    std::string why = path + ": " + errors->front().message();
    if (errors->size() > 1) why += " (and " + std::to_string(errors->size() - 1) + " more)";
    throw config::RulesFileError(why);
  }
  return out;
}

RulesFileWatch::RulesFileWatch(std::string path, std::string text, control::RuleUpdater& rules)
    : path_(std::move(path)),
      rules_(rules),
      last_(std::move(text)),
      watch_("rules-file", {path_}, [this] { reload(); }) {}

void RulesFileWatch::reload() {
  std::lock_guard lock(mu_);
  // Each invalid version is counted and logged once; a file that cannot be read, once until
  // the problem changes, not at every re-read that finds it again.
  auto refuse = [&](const std::string& why, bool new_text) {
    if (!new_text && why == last_error_) return;
    last_error_ = why;
    rules_.count_invalid_file();
    spdlog::error("rules file not applied, the rules in force stay: {}", why);
  };
  std::string text;
  try {
    text = config::read_rules_text(path_);
  } catch (const config::RulesFileError& e) {
    refuse(e.what(), false);
    return;
  }
  if (text == last_) return;  // an event that changed nothing (a touch, a rescan)
  last_ = text;
  config::RulesFile file;
  try {
    file = config::parse_rules_file(text, path_);
  } catch (const config::RulesFileError& e) {
    refuse(e.what(), true);
    return;
  }
  auto applied = rules_.apply_rules_file(file);
  if (auto* why = std::get_if<std::string>(&applied)) {
    last_error_ = *why;  // apply_rules_file counted it
    spdlog::error("rules file {} not applied, the rules in force stay: {}", path_, *why);
    return;
  }
  last_error_.clear();
  spdlog::info("rules file {} applied: generation {}", path_, std::get<std::uint64_t>(applied));
}

}  // namespace vibepit::appliance
