#pragma once
// What git_shield.cpp (the session's copy of .git) and git_bring_back.cpp (what comes back
// from it) share. Internal to the launcher.
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/launcher/guard/git_shield.hpp"

namespace vibepit::launcher::git_detail {

// How many entries a walk of the project (or of the session's copy) looks at, at most: the
// sandbox can make files faster than anyone wants to wait for.
inline constexpr std::size_t kWalkLimit = 2'000'000;

// A small regular file's content, or "" when it is missing, not regular, or too large.
std::string small_file(const std::filesystem::path& p, std::size_t max = 1 << 16);

// What makes host git run programs, as one digest: the config (and the files that could
// stand in for it) and every hook, by name, mode and content.
std::string fingerprint(const std::filesystem::path& git_dir);

// Every `.git` entry below `root` (relative paths), not descending into them or into
// symlinks, with what host git would take from it. The project's own .git is left out.
// `complete` says whether the walk ended before kWalkLimit.
std::map<std::string, std::string> nested_git_entries(const std::filesystem::path& root,
                                                      bool& complete);

void write_file(const std::filesystem::path& p, const std::string& text);

// Printable ASCII only: ref names and git's messages are shown on the user's terminal.
std::string shown(std::string_view s);

// Host git, in the project, as the owner of its git directory (never as root over a user's
// repository: what it writes there must stay theirs). Output and errors together.
struct HostGit {
  const GitShieldState& s;
  std::string run(std::vector<std::string> args, int& status) const;
  std::string must(std::vector<std::string> args) const;  // throws on a failure
  std::map<std::string, std::string> refs(const std::string& prefix = "") const;
};

}  // namespace vibepit::launcher::git_detail
