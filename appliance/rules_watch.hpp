#pragma once
// The watched rules file (config key rules-file, docs/fleet.md): re-read when it changes
// (FileWatch) and applied like a control API update, all or nothing.
#include <mutex>
#include <string>

#include "file_watch.hpp"

#include "vibepit/config/rules_file.hpp"
#include "vibepit/control/rule_updater.hpp"

namespace vibepit::appliance {

// The file's text and rules as the start found them; throws config::RulesFileError (or
// the first rule error, as a RulesFileError) when it is not a valid rules file for `base`.
struct StartRules {
  std::string text;
  policy::RuleSet rules;  // base with the file's rules added
};
StartRules load_start_rules(const std::string& path, const policy::RuleSet& base);

class RulesFileWatch {
 public:
  // `text` is what the start applied. Starts the watching thread.
  RulesFileWatch(std::string path, std::string text, control::RuleUpdater& rules);
  RulesFileWatch(const RulesFileWatch&) = delete;
  RulesFileWatch& operator=(const RulesFileWatch&) = delete;

  // Read the file now and apply it if it changed (SIGHUP).
  void reload();

 private:
  std::string path_;
  control::RuleUpdater& rules_;
  std::mutex mu_;           // one reload at a time: the watcher's or SIGHUP's
  std::string last_;        // the text last read: an unchanged file publishes nothing
  std::string last_error_;  // the problem last reported, reported once
  FileWatch watch_;         // last: its thread stops before the members it reads go
};

}  // namespace vibepit::appliance
