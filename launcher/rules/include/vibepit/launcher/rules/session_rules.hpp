#pragma once
// Where a session's rules come from: built-in presets (container/presets/*.yaml), the
// project's .vibepit/network.yaml (untrusted: only entries the user approved apply), and
// the command line. Merged, canonical, de-duplicated and validated before anything starts.
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/rules/network_file.hpp"

namespace vibepit::launcher {

class RulesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The built-in presets' names, sorted.
std::vector<std::string> preset_names();
// A preset's rules. Throws RulesError listing the valid names for an unknown one.
NetworkFile load_preset(const std::string& name);

// Every source's entries in canonical form (policy grammar), each once, in first-seen
// order, with the presets each source names expanded. Throws RulesError with one line per
// invalid entry, naming where it came from.
struct NamedSource {
  std::string name;  // "preset github", ".vibepit/network.yaml", "--allow-http"
  NetworkFile rules;
};
NetworkFile merge_rules(const std::vector<NamedSource>& sources);

// The same entries in canonical form (invalid ones kept as written, so they still show).
NetworkFile canonical(const NetworkFile& f);

// What the user approved of a project's network.yaml, kept outside every mount:
// <state>/approved/<project hash>.json (directory 0700, file 0600).
class Approvals {
 public:
  Approvals(const std::filesystem::path& state_dir, Project project);
  const NetworkFile& approved() const { return approved_; }
  // The entries of `file` (canonical) that were never approved.
  NetworkFile unapproved(const NetworkFile& file) const;
  // The entries of `file` (canonical) that were.
  NetworkFile approved_part(const NetworkFile& file) const;
  void approve(const NetworkFile& entries);  // adds and saves at once
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  Project project_;
  NetworkFile approved_;
};

// $XDG_STATE_HOME/vibepit (the parent of the sessions root).
std::filesystem::path state_dir_for(const std::filesystem::path& sessions_root);

bool empty(const NetworkFile& f);

}  // namespace vibepit::launcher
