#pragma once
// The watched rules file (config key rules-file, docs/fleet.md): re-read when it changes and
// applied like a control API update, all or nothing. inotify watches the file's directory,
// so a file replaced by a rename, and the symbolic-link swap by which a Kubernetes ConfigMap
// volume updates its files, are seen as well as a file written in place; a slow re-read
// every few seconds catches what a filesystem does not report.
#include <mutex>
#include <string>
#include <thread>

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
  ~RulesFileWatch();
  RulesFileWatch(const RulesFileWatch&) = delete;
  RulesFileWatch& operator=(const RulesFileWatch&) = delete;

  // Read the file now and apply it if it changed (SIGHUP).
  void reload();

 private:
  void run();

  std::string path_;
  control::RuleUpdater& rules_;
  std::mutex mu_;           // one reload at a time: the watcher's or SIGHUP's
  std::string last_;        // the text last read: an unchanged file publishes nothing
  std::string last_error_;  // the problem last reported, reported once
  int inotify_ = -1;
  int stop_ = -1;  // an eventfd the destructor writes
  std::thread thread_;
};

}  // namespace vibepit::appliance
